"""bench_train's long-source rows: summarization-like encoder-decoders trained on long sources and
beam search from a long source, every model of `_models.seq2seq_model_variants` (TaLK, DynamicConv,
LightConv) against the same-size Transformer (Marian: BART's layers through SDPA).

Training: at each source length of ``--sources`` (with the target length of ``--targets`` at the
same place) every step holds ``--source-tokens`` source tokens (rows = source tokens // length)
and their targets; tokens/s counts source + target tokens.  Generation: one ``--generate-source``
token source, beam search of ``--beams`` beams writing exactly ``--generate-new-tokens`` tokens;
its time includes the encoder pass, which is also timed alone.

Each model works in a process of its own (`_workers`: its peak memory is its own), all of them
alive together, and the models take their timed calls in turn, round after round
(`_timing.interleaved`, the order rotating), so that every ratio compares calls made under the
same load; a ratio is also taken in every round (its spread is reported).  The targets of issue
#60 are judged and printed, never asserted.
"""

from __future__ import annotations

import contextlib
import os
import statistics
from collections.abc import Callable
from pathlib import Path

from _device import run_metadata, write_report
from _models import SEQ2SEQ_BASELINE, ModelShape
from _timing import interleaved, spread
from _train_step import summarise
from _workers import Work

# Source length: the least tokens/s over the Transformer's that meets issue #60's target, at
# TARGET_PEAK_MEMORY of its peak memory at most.
TARGET_SPEED = {4096: 2.0, 16384: 4.0}
TARGET_PEAK_MEMORY = 0.6

StartWorker = Callable[..., Work]  # (name, task, source_length, target_length, rows, args) -> a started worker


def cpu_flags() -> list[str]:
    """The CPU's vector instruction sets from /proc/cpuinfo (``avx2``, ``avx512_bf16``, ``amx_tile``,
    ...), which set how fast its kernels run; empty where there is no /proc."""
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    flags = next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), [])
    return sorted(flag for flag in flags if flag.startswith(("avx", "amx", "fma", "f16c")))


def measure(task: str, source_length: int, target_length: int, rows: int, args, start_worker: StartWorker) -> dict:
    """Every model of ``args.models`` doing ``task`` in its own worker, in interleaved rounds
    (``args.warmup`` untimed calls each, then ``args.steps`` rounds): {model: its worker's ready
    answer, its timed calls' answers in round order (``calls``) and its finish answer}, or
    {model: its failure} for a model whose worker ran out of memory."""
    with contextlib.ExitStack() as stack:
        workers = {}
        for name in args.models:
            workers[name] = start_worker(name, task, source_length, target_length, rows, args)
            stack.callback(workers[name].close)
        alive = {name: worker for name, worker in workers.items() if "status" not in worker.ready}
        runs = {name: (lambda number, worker=worker: worker.run()) for name, worker in alive.items()}
        timings = interleaved(runs, rounds=args.steps, warmup=args.warmup, rotate=True) if runs else {}
        measured = {}
        for name, worker in workers.items():
            answers = list(timings[name].values) if name in timings else []
            failure = next((answer for answer in [worker.ready, *answers] if "status" in answer), None)
            measured[name] = failure or {"status": "ok", **worker.ready, "calls": answers, **worker.finish()}
        return measured


def per_round(results: dict, name: str, length: str, key: str) -> dict | None:
    """Spread over the rounds of the baseline's seconds (``key``: a row's per-call times) over
    model ``name``'s in the same round at ``length``: a speed ratio, > 1 where ``name`` is faster;
    None where either did not run."""
    ours, baseline = results[name][length], results[SEQ2SEQ_BASELINE][length]
    if ours["status"] != "ok" or baseline["status"] != "ok":
        return None
    return spread(theirs / mine for mine, theirs in zip(ours[key], baseline[key], strict=True))


def training_row(measured: dict, rows: int, tokens: int) -> dict:
    """The report's entry of one model's training at one length (a `measure` answer), with the
    fields of bench_train's other rows."""
    if measured["status"] != "ok":
        return {**measured, "rows": rows, "tokens_per_step": tokens}
    walls = [call["wall_s"] for call in measured["calls"]]
    step_s = statistics.median(walls)
    return {
        "status": "ok",
        "step_s": step_s,
        "step_times_s": walls,
        "step_cpu_s": statistics.median(call["cpu_s"] for call in measured["calls"]),
        "memory_before_bytes": measured["memory_before_bytes"],
        "peak_memory_bytes": measured["peak_memory_bytes"],
        "training_memory_bytes": measured["peak_memory_bytes"] - measured["memory_before_bytes"],
        "parameters": measured["parameters"],
        "final_loss": measured["calls"][-1]["loss"],
        "rows": rows,
        "tokens_per_step": tokens,
        "tokens_per_s": tokens / step_s,
    }


def generation_row(measured: dict, new_tokens: int) -> dict:
    """The report's entry of one model's beam search (a `measure` answer)."""
    if measured["status"] != "ok":
        return measured
    walls = [call["wall_s"] for call in measured["calls"]]
    encoder_walls = [call["encoder_wall_s"] for call in measured["calls"]]
    return {
        "status": "ok",
        "generate_s": statistics.median(walls),
        "generate_times_s": walls,
        "encoder_s": statistics.median(encoder_walls),
        "encoder_times_s": encoder_walls,
        "new_tokens_per_s": new_tokens / statistics.median(walls),
        "memory_before_bytes": measured["memory_before_bytes"],
        "peak_memory_bytes": measured["peak_memory_bytes"],
        "parameters": measured["parameters"],
    }


def training_summary(results: dict) -> dict:
    """bench_train's ratios (`_train_step.summarise`) with each ratio of tokens/s per round."""
    summary = summarise(results)
    for name, per_length in summary.items():
        for length, ratios in per_length.items():
            ratios["per_round_tokens_per_s_over_baseline"] = per_round(results, name, length, "step_times_s")
    return summary


def generation_summary(results: dict, length: str) -> dict:
    """Per model: the baseline's beam search and encoder seconds over the model's (speed-ups), per
    round too, and its peak memory over the baseline's; None where either did not run."""
    baseline = results[SEQ2SEQ_BASELINE][length]
    summary = {}
    for name, per_length in results.items():
        ours = per_length[length]
        both_ran = ours["status"] == "ok" and baseline["status"] == "ok"
        summary[name] = {
            "generate_speedup_over_baseline": baseline["generate_s"] / ours["generate_s"] if both_ran else None,
            "encoder_speedup_over_baseline": baseline["encoder_s"] / ours["encoder_s"] if both_ran else None,
            "per_round_generate_speedup_over_baseline": per_round(results, name, length, "generate_times_s"),
            "peak_memory_over_baseline": ours["peak_memory_bytes"] / baseline["peak_memory_bytes"]
            if both_ran
            else None,
            "baseline_status": baseline["status"],
        }
    return summary


def judge_targets(summary: dict) -> dict:
    """Issue #60's targets against the training ``summary``: per source length of `TARGET_SPEED`,
    each of our models' verdict: ``met``, ``missed``, or ``not measured`` (the length was not run,
    or either side ran out of memory)."""
    judged = {}
    for length, least_speed in TARGET_SPEED.items():
        verdicts = {}
        for name, per_length in summary.items():
            if name == SEQ2SEQ_BASELINE:
                continue
            ratios = per_length.get(str(length), {})
            speed, memory = ratios.get("tokens_per_s_over_baseline"), ratios.get("peak_memory_over_baseline")
            if speed is None or memory is None:
                verdicts[name] = "not measured"
            else:
                verdicts[name] = "met" if speed >= least_speed and memory <= TARGET_PEAK_MEMORY else "missed"
        judged[str(length)] = {
            "least_tokens_per_s_over_baseline": least_speed,
            "most_peak_memory_over_baseline": TARGET_PEAK_MEMORY,
            "verdicts": verdicts,
        }
    return judged


def report_of(args, training: dict, generation: dict) -> dict:
    """The JSON report of the rows measured so far: ``training`` {model: {source length: row}},
    ``generation`` {model: {source length: row}}."""
    shape = ModelShape.from_args(args)
    return {
        "benchmark": "bench_train --long-source",
        **run_metadata(args.device),
        "cpu_flags": cpu_flags(),
        "THP_MEM_ALLOC_ENABLE": os.environ.get("THP_MEM_ALLOC_ENABLE"),
        "shape": {**vars(shape), "encoder_layers": shape.depth("encoder"), "decoder_layers": shape.layers},
        "baseline": f"{SEQ2SEQ_BASELINE}: transformers' MarianMTModel (BART's layers, post-norm), SDPA attention",
        "training_tokens": "source + target tokens of a step",
        "source_tokens_per_step": args.source_tokens,
        "lengths": {"sources": args.sources, "targets": args.targets},
        "generation_setting": {
            "source_length": args.generate_source,
            "rows": 1,
            "beams": args.beams,
            "new_tokens": args.generate_new_tokens,
        },
        "dropout": "each config's default" if args.dropout is None else args.dropout,
        "mixed_precision": args.mixed_precision,
        "steps": {"warmup": args.warmup, "timed": args.steps, "order": "interleaved rounds, rotating"},
        "training_results": training,
        "training_summary": training_summary(training),
        "generation_results": generation,
        "generation_summary": generation_summary(generation, str(args.generate_source)) if generation else {},
        "targets": judge_targets(training_summary(training)),
    }


def run_rows(args, start_worker: StartWorker) -> None:
    """Measure the training rows, one source length after another, then beam search; print each
    row, write the JSON after each (a run cut short keeps its complete comparisons) and print the
    targets' verdicts."""
    training: dict[str, dict[str, dict]] = {}
    generation: dict[str, dict[str, dict]] = {}
    default_name = f"train_long_source_{args.device.split(':')[0]}.json"
    for source_length, target_length in zip(args.sources, args.targets, strict=True):
        rows = args.source_tokens // source_length
        tokens = rows * (source_length + target_length)
        for name, measured in measure("train", source_length, target_length, rows, args, start_worker).items():
            row = training_row(measured, rows, tokens)
            training.setdefault(name, {})[str(source_length)] = row
            print(
                f"train {name:50s} source {source_length:>6d} + target {target_length:>4d} x {rows:>3d}  {describe(row)}"
            )
        write_report(report_of(args, training, generation), args.out, default_name, announce=False)
    length = args.generate_source
    for name, measured in measure("generate", length, args.generate_new_tokens, 1, args, start_worker).items():
        generation[name] = {str(length): generation_row(measured, args.generate_new_tokens)}
        print(f"generate {name:47s} source {length:>6d}, beam {args.beams}  {describe(generation[name][str(length)])}")
    report = report_of(args, training, generation)
    for length, judged in report["targets"].items():
        print(
            f"target at {int(length):,} source tokens (>= {judged['least_tokens_per_s_over_baseline']}x the "
            f"Transformer's tokens/s at <= {TARGET_PEAK_MEMORY}x its peak memory): "
            + ", ".join(f"{name} {verdict}" for name, verdict in judged["verdicts"].items())
        )
    write_report(report, args.out, default_name)


def describe(row: dict) -> str:
    """A printed line's account of one row: its speed and memory, or why there is none."""
    if row["status"] != "ok":
        return f"{row['status']}: {row['error']}"
    speed = (
        f"step {row['step_s']:8.3f} s  {row['tokens_per_s']:9.0f} tokens/s"
        if "step_s" in row
        else f"beam search {row['generate_s']:8.3f} s (encoder {row['encoder_s']:7.3f} s)"
    )
    return f"{speed}  peak {row['peak_memory_bytes'] / 2**30:6.2f} GiB"
