"""What a batch-1 decoding step costs, and what bounds it: weights, operators, host syncs.

For each language model of `bench_generate` (same sizes) at each position, in one run: the step's median
CPU time; the time of the step's matrix products alone (every ``nn.Linear`` / GPT-2 ``Conv1D``
applied once to a one-row input, in module order: streaming the weights, which no eager
implementation avoids); the bytes of those weights; the operators the step dispatches and its
host synchronisations (``aten::_local_scalar_dense``, from the PyTorch profiler); and, for our
models, the time of the position computation from the attention mask (``positions_from_mask``,
O(t) in the mask's length).

    python benchmarks/profile_decode.py --threads 1   # writes results/profile_decode_cpu_<family>.json (intel, amd)
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from _device import add_cpu_options, cpu_family, parse_cpu_args, run_metadata, write_report
from _models import add_shape_options, baseline_of, causal_lm_models
from bench_generate import Decoder, build_models
from torch.profiler import ProfilerActivity, profile
from transformers.pytorch_utils import Conv1D

from talk_hf.layers.sinusoidal_positions import positions_from_mask

OPERATOR_COUNT_STEPS = 10  # steps the PyTorch profiler counts operators over


def cpu_seconds(function) -> float:
    """Process CPU time of one ``function()`` call."""
    start = time.process_time()
    function()
    return time.process_time() - start


def matrix_products(model: torch.nn.Module):
    """A function applying every linear layer of ``model`` once to a one-row input, and the bytes
    of their weights and biases."""
    layers = [module for module in model.modules() if isinstance(module, (torch.nn.Linear, Conv1D))]
    inputs = [
        torch.randn(1, 1, layer.in_features if isinstance(layer, torch.nn.Linear) else layer.weight.shape[0])
        for layer in layers
    ]
    weight_bytes = sum(parameter.nbytes for layer in layers for parameter in layer.parameters())

    @torch.no_grad()
    def run():
        for layer, one_row in zip(layers, inputs, strict=True):
            layer(one_row)

    return run, weight_bytes


def operator_counts(decoder: Decoder, steps: int) -> tuple[float, float]:
    """(operators dispatched, host synchronisations) per step, from the PyTorch profiler."""
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        for _ in range(steps):
            decoder.step(0)
    events = profiler.key_averages()
    operators = sum(event.count for event in events if event.key.startswith("aten::"))
    syncs = sum(event.count for event in events if event.key == "aten::_local_scalar_dense")
    return operators / steps, syncs / steps


def parse_args() -> argparse.Namespace:
    """The command line, and what bench_generate's model builder and Decoder read besides: the
    device, and the steps a decoder runs (warm-up, timed, then those the profiler counts) in one round."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_shape_options(parser)
    parser.add_argument("--positions", type=int, nargs="+", default=[16, 2048])
    parser.add_argument("--source-length", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=60, help="timed calls per measurement")
    add_cpu_options(parser)
    args = parse_cpu_args(parser)
    warmup = 5
    return argparse.Namespace(
        **vars(args), device="cpu", rounds=1, warmup=warmup, steps=warmup + args.repeats + OPERATOR_COUNT_STEPS
    )


def median_cpu_seconds(decoders: dict, *, products: dict, repeats: int) -> tuple[dict, dict]:
    """Median CPU seconds of each decoder's step and of its model's matrix products alone, by
    (model, position): ``repeats`` rounds over every decoder, one step then the products, so that
    load from other processes hits every measurement alike."""
    step_times = {key: [] for key in decoders}
    product_times = {key: [] for key in decoders}
    for _ in range(repeats):
        for key, decoder in decoders.items():
            step_times[key].append(cpu_seconds(lambda decoder=decoder: decoder.step(0)))
            product_times[key].append(cpu_seconds(products[key[0]][0]))
    median = {key: statistics.median(times) for key, times in step_times.items()}
    return median, {key: statistics.median(times) for key, times in product_times.items()}


def profile_step(decoder: Decoder, *, label: str, step_s: float, products_s: float, weight_bytes: int) -> dict:
    """The result of one (model, position), printed after ``label``: step and matrix-product CPU
    seconds, the rest, and the operators and host syncs of a step."""
    operators, syncs = operator_counts(decoder, OPERATOR_COUNT_STEPS)
    print(
        f"{label} step {step_s * 1e3:6.2f} ms  matrix products {products_s * 1e3:6.2f} ms "
        f"({weight_bytes / products_s / 1e9:5.1f} GB/s)  rest {(step_s - products_s) * 1e3:5.2f} ms  "
        f"{operators:5.0f} ops  {syncs:.0f} syncs",
        flush=True,
    )
    return {
        "step_cpu_s": step_s,
        "matrix_products_cpu_s": products_s,
        "other_cpu_s": step_s - products_s,
        "operators_per_step": operators,
        "host_syncs_per_step": syncs,
    }


def positions_from_mask_seconds(length: int) -> float:
    """Median CPU seconds of `positions_from_mask` over an all-ones mask of ``length``."""
    mask = torch.ones(1, length, dtype=torch.long)
    return statistics.median(cpu_seconds(lambda: positions_from_mask(mask, 1, length - 1, "cpu")) for _ in range(1000))


def summarise(results: dict) -> dict:
    """Each model's linear weight bytes and step CPU time over its baseline's, at each position."""
    summary = {}
    for name, measured in results.items():
        baseline = results[baseline_of(name)]
        summary[name] = {
            "linear_weight_bytes_over_baseline": measured["linear_weight_bytes"] / baseline["linear_weight_bytes"],
            **{
                f"step_over_baseline_at_{p}": measured["positions"][p]["step_cpu_s"]
                / baseline["positions"][p]["step_cpu_s"]
                for p in measured["positions"]
            },
        }
    return summary


def main() -> None:
    args = parse_args()
    # Language models only: a seq2seq step skips the encoder's and the cross-attention keys' and
    # values' projections, which the matrix-product floor would have to leave out by name.
    models = {name: model for name, (model, _) in build_models(args).items() if name in causal_lm_models()}
    products = {name: matrix_products(model) for name, model in models.items()}
    decoders = {
        (name, position): Decoder(
            model, is_seq2seq=False, rows=1, beams=1, position=position, steps=args.steps, args=args
        )
        for name, model in models.items()
        for position in args.positions
    }
    for decoder in decoders.values():
        for _ in range(args.warmup):
            decoder.step(0)
    step_s, products_s = median_cpu_seconds(decoders, products=products, repeats=args.repeats)
    results = {name: {"linear_weight_bytes": products[name][1], "positions": {}} for name in models}
    for (name, position), decoder in decoders.items():
        results[name]["positions"][str(position)] = profile_step(
            decoder,
            label=f"{name:24s} P={position:>5d}",
            step_s=step_s[name, position],
            products_s=products_s[name, position],
            weight_bytes=products[name][1],
        )
    mask_length = max(args.positions) + 1
    positions_s = positions_from_mask_seconds(mask_length)
    report = {
        "benchmark": "profile_decode",
        **run_metadata("cpu"),
        "shapes": {key: getattr(args, key) for key in ("d_model", "layers", "heads", "ffn", "vocab", "positions")},
        "results": results,
        "positions_from_mask_cpu_s": {str(mask_length): positions_s},
        "summary": summarise(results),
    }
    print(f"positions_from_mask over a mask of {mask_length}: {positions_s * 1e6:.1f} us")
    write_report(report, args.out, f"profile_decode_cpu_{cpu_family()}.json")


if __name__ == "__main__":
    main()
