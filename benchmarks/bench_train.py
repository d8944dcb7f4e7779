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
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import torch
from _device import add_cpu_options, add_device_option, process_status_bytes, run_metadata, write_report
from _models import ModelShape, add_shape_options, baseline_of, build_model, causal_lm_models, seq2seq_models
from _timing import Stopwatch, interleaved

OUT_OF_MEMORY_MARKERS = ("out of memory", "can't allocate memory", "cannot allocate memory", "std::bad_alloc")


def memory_in_use(device: str, peak: bool) -> int | None:
    """Memory in use now (or its peak so far): the CUDA allocator's on a GPU, the process's
    resident memory on the CPU."""
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated(device) if peak else torch.cuda.memory_allocated(device)
    return process_status_bytes("VmHWM" if peak else "VmRSS")


def make_batch(name: str, length: int, rows: int, args, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Random token ids (ids 3.. of the vocabulary) for one training step of model ``name``."""

    def ids(columns: int) -> torch.Tensor:
        return torch.randint(3, args.vocab, (rows, columns), generator=generator).to(args.device)

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
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch = make_batch(name, length, rows, args, torch.Generator().manual_seed(0))
    memory_before = memory_in_use(args.device, peak=False)
    device_type = torch.device(args.device).type

    def step(number):
        with torch.autocast(device_type, dtype=torch.bfloat16, enabled=args.mixed_precision == "bf16"):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

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
    error = (completed.stderr.strip().splitlines() or [f"exit status {completed.returncode}"])[-1]
    killed = completed.returncode in (-9, 137)  # the kernel's OOM killer sends SIGKILL
    if killed or any(marker in completed.stderr.lower() for marker in OUT_OF_MEMORY_MARKERS):
        return {"status": "out of memory", "error": error if not killed else "killed (SIGKILL, out of memory)"}
    raise RuntimeError(f"{name} at length {length} failed:\n{completed.stderr}")


def tokens_per_step(name: str, length: int, rows: int, args) -> int:
    """Tokens one step trains on: the block's tokens (LM), source + target tokens (seq2seq)."""
    if name in seq2seq_models():
        return rows * (args.source_length + args.target_length)
    return rows * length


def summarise(results: dict) -> dict:
    """Per model and length: tokens/s and peak memory as ratios to the model's baseline."""
    summary = {}
    for name, per_length in results.items():
        baseline = results.get(baseline_of(name), {})
        rows = {}
        for length, measured in per_length.items():
            reference = baseline.get(length, {"status": "not measured"})  # a run cut short
            both_ran = measured["status"] == "ok" and reference["status"] == "ok"
            rows[length] = {
                "tokens_per_s_over_baseline": measured["tokens_per_s"] / reference["tokens_per_s"]
                if both_ran
                else None,
                "peak_memory_over_baseline": measured["peak_memory_bytes"] / reference["peak_memory_bytes"]
                if both_ran
                else None,
                "training_memory_over_baseline": measured["training_memory_bytes"] / reference["training_memory_bytes"]
                if both_ran
                else None,
                "baseline_status": reference["status"],
            }
        summary[name] = rows
    return summary


def parse_args(argv=None):
    """The command line ``argv`` (None: ``sys.argv``), its models each with its baseline and its
    blocks within ``--tokens``."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_device_option(parser)
    add_shape_options(parser, ModelShape(d_model=256, layers=4, heads=4, ffn=1024, vocab=8000))
    parser.add_argument("--blocks", type=int, nargs="+", default=[256, 1024, 4096, 16384], help="LM block lengths")
    parser.add_argument("--tokens", type=int, default=16384, help="LM tokens per step (rows = tokens // block)")
    parser.add_argument("--source-length", type=int, default=512)
    parser.add_argument("--target-length", type=int, default=128)
    parser.add_argument("--seq2seq-rows", type=int, default=16)
    parser.add_argument(
        "--models",
        nargs="+",
        default=list(causal_lm_models() + seq2seq_models()),
        help="a subset of the models (each needs its baseline)",
    )
    parser.add_argument(
        "--dropout",
        type=float,
        default=None,
        help="every dropout probability of every model (default: each config's own)",
    )
    parser.add_argument(
        "--mixed-precision",
        choices=["no", "bf16"],
        default="no",
        help="bf16: the forward under bfloat16 autocast, weights and optimizer in float32",
    )
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per (model, length)")
    parser.add_argument("--one", nargs=3, metavar=("MODEL", "LENGTH", "ROWS"), help=argparse.SUPPRESS)
    add_cpu_options(parser)
    args = parser.parse_args(argv)
    for name in args.models:
        if baseline_of(name) not in args.models:
            parser.error(f"--models: {name} needs its baseline {baseline_of(name)!r} too")
    if args.steps < 1 or args.warmup < 0:
        parser.error(f"--steps ({args.steps}) must be at least 1 and --warmup ({args.warmup}) at least 0")
    if any(block > args.tokens for block in args.blocks):
        parser.error(f"--tokens ({args.tokens}) must be at least the longest block ({max(args.blocks)})")
    return args


def child_arguments(args) -> list[str]:
    """The command line of a child process (`run_in_subprocess`): every option of ``args`` but
    --one, --out and --models; --threads and --dropout where they are given."""
    values = {
        "--device": args.device,
        "--d-model": args.d_model,
        "--layers": args.layers,
        "--heads": args.heads,
        "--ffn": args.ffn,
        "--vocab": args.vocab,
        "--source-length": args.source_length,
        "--target-length": args.target_length,
        "--warmup": args.warmup,
        "--steps": args.steps,
        "--mixed-precision": args.mixed_precision,
        "--threads": args.threads or None,
        "--dropout": args.dropout,
    }
    return [text for flag, value in values.items() if value is not None for text in (flag, str(value))]


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.one:
        name, length, rows = args.one[0], int(args.one[1]), int(args.one[2])
        print(json.dumps(measure_one(name, length, rows, args)))
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
