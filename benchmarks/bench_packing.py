"""Packed against padded training batches of the same documents: real tokens per second and peak memory.

Documents of varied length, as a user trains a causal LM on them: Multi30k's English training
sentences (short, 5-40 tokens) and WikiText-2's training paragraphs (tens to hundreds of tokens),
split by a BPE tokenizer trained on them (as the example scripts train it).  The same batches of
``--batch-documents`` documents (a `Trainer`'s ``per_device_train_batch_size``) are collated two
ways: padded to the batch's longest document (``DataCollatorForLanguageModeling(mlm=False)``, what a
`Trainer` user gets by default) and packed into one row (``DataCollatorWithFlattening``: no padding,
each document computed alone).  A third row pads length-grouped batches (``group_by_length``-style:
documents sorted by length, then batched), the padded baseline at its best.

A step is forward, backward and an AdamW update.  Rounds interleave the settings (their order
rotating), each round running ``--steps`` batches of every setting, so that load from other processes
hits all alike; tokens/s counts the real (non-padding) tokens over the wall-clock time of all rounds.
Peak memory: each setting trains its largest batch in a fresh subprocess, which reports its resident
memory before the first step and its peak (Linux ``VmHWM``); the difference is what training adds.
A process's peak is its own, so the probes run side by side (one per core), after every timing.

    python benchmarks/bench_packing.py --threads 1        # writes results/bench_packing_cpu.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from _device import add_cpu_options, parse_cpu_args, process_status_bytes, run_metadata, write_report
from _models import ModelShape, add_shape_options, build_model, causal_lm_models
from _timing import interleaved
from transformers import DataCollatorForLanguageModeling, DataCollatorWithFlattening

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))  # the example scripts' tokenizer

from common.tokenizer import train_tokenizer  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
SETTINGS = ("padded", "padded, length-grouped", "packed")


def read_documents(corpus: str, limit: int) -> list[str]:
    """The first ``limit`` documents of ``corpus``: Multi30k English sentences, or WikiText-2 paragraphs
    (non-empty lines that are not section headings)."""
    path = DATA / ("multi30k/train.en.gz" if corpus == "multi30k" else "wikitext-2/train.txt.gz")
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        texts = [line.strip() for line in lines]
    if corpus == "wikitext":
        texts = [text for text in texts if text and not text.startswith("=")]
    return texts[:limit]


def document_batches(token_lists: list[list[int]], batch_documents: int, grouped: bool, seed: int) -> list[list]:
    """Batches of ``batch_documents`` documents: shuffled, or (``grouped``) sorted by length and then
    the batches shuffled."""
    order = list(range(len(token_lists)))
    random.Random(seed).shuffle(order)
    if grouped:
        order.sort(key=lambda index: len(token_lists[index]))
    batches = [order[start : start + batch_documents] for start in range(0, len(order), batch_documents)]
    if grouped:
        random.Random(seed + 1).shuffle(batches)
    return [[{"input_ids": token_lists[index]} for index in batch] for batch in batches]


def collated(setting: str, batches: list[list], tokenizer) -> list[dict]:
    """Each batch as the setting's collator gives it."""
    if setting == "packed":
        collate = DataCollatorWithFlattening(return_tensors="pt")
    else:
        collate = DataCollatorForLanguageModeling(tokenizer, mlm=False, return_tensors="pt")
    return [dict(collate(batch)) for batch in batches]


def real_tokens(batch: dict) -> int:
    mask = batch.get("attention_mask")
    return int(batch["input_ids"].numel() if mask is None else mask.sum())


def train_step(model, optimizer, batch: dict) -> None:
    optimizer.zero_grad(set_to_none=True)
    model(**batch).loss.backward()
    optimizer.step()


def time_settings(name: str, prepared: dict[str, list[dict]], args) -> dict[str, dict]:
    """Interleaved rounds of every setting's batches on one model: real tokens/s of each.

    `_timing.interleaved`: one warm-up step on each setting's first batch, then ``--rounds`` rounds
    (their order rotating) of ``--steps`` steps of each setting, on batches not run before."""
    torch.manual_seed(0)
    model = build_model(name, ModelShape.from_args(args), 1024, dropout=0.0).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def steps_of(batches):
        def step(number):
            train_step(model, optimizer, batches[number])
            return real_tokens(batches[number]), batches[number]["input_ids"].numel()

        return step

    functions = {setting: steps_of(batches) for setting, batches in prepared.items()}
    timings = interleaved(functions, rounds=args.rounds, calls=args.steps, rotate=True)
    totals = {}
    for setting, timing in timings.items():
        real, computed = (sum(counts) for counts in zip(*timing.values, strict=True))
        totals[setting] = {
            "seconds": timing.total_s,
            "real_tokens": real,
            "tokens_computed": computed,
            "real_tokens_per_second": real / timing.total_s,
            "padding_fraction": 1 - real / computed,
        }
    return totals


def peak_memory(name: str, corpus: str, setting: str, args) -> dict:
    """Resident memory before and at the peak of training the setting's largest batch, in a fresh process."""
    command = [sys.executable, __file__, "--memory-probe", name, corpus, setting, *sys.argv[1:]]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def packed_ratios(measured: dict[str, dict]) -> dict[str, float]:
    """Add to ``measured["packed"]`` its tokens/s and training memory over each padded setting's;
    return those ratios rounded (the summary's entry)."""
    packed = measured["packed"]
    for baseline in ("padded", "padded, length-grouped"):
        packed[f"speed_over_{baseline}"] = (
            packed["real_tokens_per_second"] / measured[baseline]["real_tokens_per_second"]
        )
        packed[f"memory_over_{baseline}"] = (
            packed["memory"]["added_by_training"] / measured[baseline]["memory"]["added_by_training"]
        )
    return {key: round(value, 2) for key, value in packed.items() if key.startswith(("speed", "memory_over"))}


def probe_memory(name: str, corpus: str, setting: str, args) -> None:
    """(Subprocess) train two steps on the largest batch of ``setting``; print the memory as JSON."""
    prepared = prepare(corpus, args)[setting]
    largest = max(prepared, key=lambda batch: batch["input_ids"].numel())
    model = build_model(name, ModelShape.from_args(args), 1024, dropout=0.0).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    before = process_status_bytes("VmRSS")
    for _ in range(2):
        train_step(model, optimizer, largest)
    peak = process_status_bytes("VmHWM")
    print(json.dumps({"resident_before": before, "peak": peak, "added_by_training": peak - before}))


def prepare(corpus: str, args) -> dict[str, list[dict]]:
    """Every setting's collated batches of the corpus's documents (tokenizer trained on them).

    Raises ValueError when the batches are fewer than the timed steps of a setting (``--rounds`` x
    ``--steps``): every timed step runs a batch not run before."""
    texts = read_documents(corpus, args.documents)
    tokenizer = train_tokenizer(texts, "bpe", args.vocab)
    token_lists = [ids[: args.max_length] for ids in tokenizer(texts)["input_ids"] if ids]
    prepared = {
        setting: collated(
            setting, document_batches(token_lists, args.batch_documents, "grouped" in setting, seed=0), tokenizer
        )
        for setting in SETTINGS
    }
    batches, needed = len(prepared[SETTINGS[0]]), args.rounds * args.steps
    if batches < needed:
        raise ValueError(
            f"{corpus}: {len(token_lists)} documents make {batches} batches of --batch-documents "
            f"{args.batch_documents}, but --rounds {args.rounds} x --steps {args.steps} time {needed} batches of "
            "each setting: raise --documents or lower --rounds or --steps"
        )
    return prepared


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_cpu_options(parser)
    add_shape_options(parser, ModelShape(d_model=256, layers=3, heads=4, ffn=1024, vocab=8000))
    parser.add_argument("--corpora", nargs="+", choices=("multi30k", "wikitext"), default=["multi30k", "wikitext"])
    parser.add_argument("--models", nargs="+", default=None, help="default: our causal LMs")
    parser.add_argument("--documents", type=int, default=4000, help="documents read from each corpus")
    parser.add_argument("--max-length", type=int, default=512, help="longer documents are cut to this")
    parser.add_argument("--batch-documents", type=int, default=32, help="documents per batch")
    parser.add_argument("--steps", type=int, default=4, help="batches of each setting per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--memory-probe", nargs=3, default=None, help=argparse.SUPPRESS)
    args = parse_cpu_args(parser)
    if args.memory_probe:
        probe_memory(*args.memory_probe, args)
        return
    models = args.models or [name for name in causal_lm_models() if "GPT2" not in name]
    report = {"run": run_metadata("cpu"), "settings": vars(args), "results": {}}
    prepared = {corpus: prepare(corpus, args) for corpus in args.corpora}  # checks every corpus before timing
    for corpus in args.corpora:
        for name in models:
            report["results"][f"{corpus}/{name}"] = time_settings(name, prepared[corpus], args)
            write_report(report, args.out, "bench_packing_cpu.json", announce=False)
    probes = [(name, corpus, setting) for corpus in args.corpora for name in models for setting in SETTINGS]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        memories = list(pool.map(lambda probe: peak_memory(*probe, args), probes))
    for (name, corpus, setting), memory in zip(probes, memories, strict=True):
        report["results"][f"{corpus}/{name}"][setting]["memory"] = memory
    report["summary"] = {key: packed_ratios(measured) for key, measured in report["results"].items()}
    write_report(report, args.out, "bench_packing_cpu.json")


if __name__ == "__main__":
    main()
