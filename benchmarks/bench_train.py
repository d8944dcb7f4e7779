"""Training speed and peak memory of our models against same-size Transformers at long sequences.

Language models: TaLKForCausalLM and DynamicConvForCausalLM against GPT-2 (SDPA) at each block
length of ``--blocks`` (default 256, 1,024, 4,096, 16,384), every step holding the same number of
tokens (``--tokens`` = rows x block).  Seq2seq: TaLKForConditionalGeneration and
DynamicConvForConditionalGeneration against Marian (SDPA) with summarization-like lengths
(``--source-length`` 512 source and ``--target-length`` 128 target tokens, ``--seq2seq-rows`` rows).
All models share width, depth, heads, FFN size and vocabulary (`_models`) and train in float32
(``--mixed-precision bf16``: float32 weights, forward under bfloat16 autocast, as Accelerate's
``--mixed_precision bf16`` trains; on a GPU GPT-2's SDPA then runs the flash kernel), with their
configs' default dropout or, with ``--dropout P``, every dropout probability set to P.
Attention dropout decides GPT-2's path on the CPU: PyTorch's flash SDPA kernel (memory O(T)) takes
no dropout, so with GPT-2's default 0.1 it runs the math path, whose score matrices grow with T².

A training step is forward, backward and an AdamW update on random token ids.  Every (model,
length) runs in a fresh subprocess, so that each peak memory is its own: ``--warmup`` steps,
then ``--steps`` timed steps (wall clock).  The subprocess reports the median step time, the
resident memory before the first step (weights and inputs) and the peak resident memory of the
whole run (Linux ``VmHWM``: weights, activations, gradients, optimizer state); their difference
is the memory training adds (on a GPU: the CUDA allocator's figures).  A subprocess that
fails for lack of memory is recorded as out of memory, with the error.  Ratios (ours / the
baseline): tokens per second and peak memory, at each length.  Lengths are measured one after
another, every model at each, and the JSON is rewritten after each measurement: a run cut short
keeps its complete comparisons.

    THP_MEM_ALLOC_ENABLE=1 python benchmarks/bench_train.py       # CPU, writes results/train_cpu.json
    THP_MEM_ALLOC_ENABLE=1 python benchmarks/bench_train.py --dropout 0 --models TaLKForCausalLM \
        DynamicConvForCausalLM "GPT2 (baseline)" --out benchmarks/results/train_cpu_no_dropout.json
    python benchmarks/bench_train.py --device cuda                  # on a GPU (peak memory: the CUDA allocator's)
    python benchmarks/bench_train.py --device cuda --mixed-precision bf16 --blocks 1024 4096 16384 \
        --d-model 768 --layers 12 --heads 12 --ffn 3072 --vocab 50257 \
        --models TaLKForCausalLM DynamicConvForCausalLM "GPT2 (baseline)"   # the LMs against GPT-2 with flash

``--long-source`` measures instead summarization-like encoder-decoders (TaLK, DynamicConv and
LightConv against Marian) at source lengths 400 to 16,384, every model in a worker process of its
own and the models' steps alternating round by round, and beam search from a 4,096-token source
(`_long_source`, which also judges issue #60's targets):

    THP_MEM_ALLOC_ENABLE=1 python benchmarks/bench_train.py --long-source   # CPU: results/train_long_source_cpu.json
    python benchmarks/bench_train.py --long-source --device cuda --mixed-precision bf16   # the cnn-dm preset's shape
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch
from _device import check_device_runs, run_metadata, write_report
from _long_source import run_rows
from _long_source_work import make_work
from _models import ModelShape, build_model, causal_lm_models, seq2seq_models
from _timing import Stopwatch, interleaved
from _train_options import child_arguments, parse_options
from _train_step import failure_of, memory_in_use, random_ids, summarise, training_step
from _workers import WorkerProcess, serve_stdio


def make_batch(name: str, length: int, rows: int, args, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Random token ids (ids 3.. of the vocabulary) for one training step of model ``name``."""

    def ids(columns: int) -> torch.Tensor:
        return random_ids(rows, columns, args.vocab, args.device, generator)

    if name in seq2seq_models():
        # No attention mask: nothing is padded, and without one every model takes its fastest
        # path (an all-ones mask makes transformers test it on every call before dropping it).
        return {"input_ids": ids(args.source_length), "labels": ids(args.target_length)}
    return {"input_ids": ids(length), "labels": ids(length)}


def measure_one(name: str, length: int, rows: int, args) -> dict:
    """Train model ``name`` for warmup + timed steps in this process; step times and memory."""
    torch.manual_seed(0)
    max_positions = max(length, args.source_length, args.target_length) + 8
    model = build_model(name, ModelShape.from_args(args), max_positions, args.dropout).to(args.device).train()
    batch = make_batch(name, length, rows, args, torch.Generator().manual_seed(0))
    step = training_step(model, batch, args.device, args.mixed_precision)
    memory_before = memory_in_use(args.device, peak=False)
    timing = interleaved({name: step}, rounds=args.steps, warmup=args.warmup, stopwatch=Stopwatch(args.device))[name]
    peak = memory_in_use(args.device, peak=True)
    return {
        "status": "ok",
        "step_s": timing.median_s,
        "step_times_s": list(timing.wall_s),
        "memory_before_bytes": memory_before,
        "peak_memory_bytes": peak,
        "training_memory_bytes": peak - memory_before,
        "parameters": sum(p.numel() for p in model.parameters()),
        "final_loss": timing.values[-1].item(),
    }


def run_in_subprocess(name: str, length: int, rows: int, args) -> dict:
    """``measure_one`` in a fresh Python process (its own peak memory); out of memory is a result."""
    command = [sys.executable, __file__, "--one", name, str(length), str(rows), *child_arguments(args)]
    completed = subprocess.run(command, capture_output=True, text=True)
    lines = completed.stdout.strip().splitlines()
    if completed.returncode == 0 and lines:
        return json.loads(lines[-1])
    return failure_of(f"{name} at length {length}", completed.returncode, completed.stderr)


def start_worker(name: str, task: str, source_length: int, target_length: int, rows: int, args) -> WorkerProcess:
    """A worker process serving ``task`` (`_long_source_work.make_work`) of model ``name``."""
    command = [sys.executable, __file__, "--serve", name, task, str(source_length), str(target_length), str(rows)]
    what = f"{name} ({task}, source length {source_length})"
    return WorkerProcess([*command, *child_arguments(args)], what)


def tokens_per_step(name: str, length: int, rows: int, args) -> int:
    """Tokens one step trains on: the block's tokens (LM), source + target tokens (seq2seq)."""
    if name in seq2seq_models():
        return rows * (args.source_length + args.target_length)
    return rows * length


def parse_args(argv=None):
    """bench_train's command line ``argv`` (None: ``sys.argv``): see `_train_options.parse_options`."""
    return parse_options(argv, description=__doc__)


def main(argv=None) -> None:
    args = parse_args(argv)
    check_device_runs(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.one:
        name, length, rows = args.one[0], int(args.one[1]), int(args.one[2])
        print(json.dumps(measure_one(name, length, rows, args)))
        return
    if args.serve:
        name, task, *sizes = args.serve
        serve_stdio(lambda: make_work(name, task, *map(int, sizes), args))
        return
    if args.long_source:
        run_rows(args, start_worker)
        return

    settings = [
        (name, block, args.tokens // block)
        for block in args.blocks
        for name in args.models
        if name in causal_lm_models()
    ]
    settings += [(name, args.source_length, args.seq2seq_rows) for name in args.models if name in seq2seq_models()]
    results: dict[str, dict[str, dict]] = {}
    default_name = f"train_{args.device.split(':')[0]}.json"
    for name, length, rows in settings:
        measured = run_in_subprocess(name, length, rows, args)
        tokens = tokens_per_step(name, length, rows, args)
        measured.update(rows=rows, tokens_per_step=tokens)
        if measured["status"] == "ok":
            measured["tokens_per_s"] = tokens / measured["step_s"]
        print(f"{name:38s} length {length:>6d} x {rows:>3d} rows  {describe(measured)}", flush=True)
        results.setdefault(name, {})[str(length)] = measured
        write_report(report_of(args, results), args.out, default_name, announce=False)  # kept if cut short
    write_report(report_of(args, results), args.out, default_name)


def describe(measured: dict) -> str:
    """A printed line's account of one measurement: speed and memory, or why there is none."""
    if measured["status"] != "ok":
        return f"{measured['status']}: {measured['error']}"
    return (
        f"step {measured['step_s']:8.3f} s  {measured['tokens_per_s']:9.0f} tokens/s  "
        f"peak {measured['peak_memory_bytes'] / 2**30:6.2f} GiB "
        f"({measured['training_memory_bytes'] / 2**30:6.2f} GiB above the weights and inputs)"
    )


def report_of(args, results: dict) -> dict:
    """The JSON report of the measurements ``results`` ({model: {length: measured}}) so far."""
    return {
        "benchmark": "bench_train",
        **run_metadata(args.device),
        "THP_MEM_ALLOC_ENABLE": os.environ.get("THP_MEM_ALLOC_ENABLE"),
        "shapes": {
            key: getattr(args, key)
            for key in (
                "d_model",
                "layers",
                "heads",
                "ffn",
                "vocab",
                "blocks",
                "tokens",
                "source_length",
                "target_length",
                "seq2seq_rows",
            )
        },
        "dropout": "each config's default" if args.dropout is None else args.dropout,
        "mixed_precision": args.mixed_precision,
        "steps": {"warmup": args.warmup, "timed": args.steps},
        "results": results,
        "summary": summarise(results),
    }


if __name__ == "__main__":
    main()
