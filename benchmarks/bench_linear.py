"""The few-row linear layer of decoding: our C++ kernel against F.linear (MKL) and a plain read.

For the weight shapes of the decoding benchmarks' models (d, FFN size f, vocabulary V of
`_models.ModelShape`: the mixer's (2d, d) input projection with GLU, (d, d), (f, d), (d, f) and the
(V, d) output layer) and R input rows, in one run: the weight bytes per second of

* ``F.linear``, what ``nn.Linear`` runs (MKL on the CPU wheels);
* ``few_rows_linear``, the C++ kernel that ``talk_hf.ops.linear`` runs for R <= ``MAX_ROWS``
  (called directly here, so R above the threshold shows where MKL wins);
* ``addmm`` of the transposed (in, out) weight: GPT-2's ``Conv1D`` layout, what the baseline's
  decoding step runs for every matrix but its output layer (MKL streams this layout differently);
* ``weight.sum()``, one sequential read of the weight: the memory bound a one-row product can reach.

Every call reads a different copy of the weight (copies cycle through ``--megabytes`` of memory
per layout, far beyond the caches), as a decoding step reads every layer's weight once.  After one
warm-up round of ``--calls`` calls each, rounds interleave the methods (`_timing.interleaved`), so
load from other processes hits them alike; each figure is the median round.

    python benchmarks/bench_linear.py --threads 1   # writes results/linear_cpu_<family>.json (intel, amd)
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from _device import add_cpu_options, cpu_family, parse_cpu_args, run_metadata, write_report
from _models import ModelShape, add_shape_options
from _timing import interleaved

from talk_hf.ops import _extension
from talk_hf.ops.linear import MAX_ROWS


def weight_shapes(shape: ModelShape) -> dict[str, tuple[int, int]]:
    """name -> (out, in) of the linear layers a decoding step of our models runs."""
    d = shape.d_model
    return {
        "mixer input + GLU": (2 * d, d),
        "mixer output": (d, d),
        "FFN in": (shape.ffn, d),
        "FFN out": (d, shape.ffn),
        "output layer": (shape.vocab, d),
    }


def methods() -> dict:
    """name -> function(input (R, in), weight (out, in), weight_in_out (in, out) contiguous, bias (out,))."""
    kernel = _extension.load("cpu").few_rows_linear
    return {
        "F.linear": lambda input, weight, weight_in_out, bias: F.linear(input, weight, bias),
        "few_rows_linear": lambda input, weight, weight_in_out, bias: kernel(input, weight, bias),
        "Conv1D layout (addmm)": lambda input, weight, weight_in_out, bias: torch.addmm(bias, input, weight_in_out),
        "sequential read": lambda input, weight, weight_in_out, bias: weight.sum(),
    }


def measure(out_features: int, in_features: int, *, rows: int, args) -> dict:
    """Weight GB/s of every method (median over rounds) for one shape and row count."""
    weight_bytes = out_features * in_features * 4
    copies = max(2, args.megabytes * 2**20 // weight_bytes)
    weights = [torch.randn(out_features, in_features) for _ in range(copies)]
    weights_in_out = [weight.t().contiguous() for weight in weights]
    bias, input = torch.randn(out_features), torch.randn(rows, in_features)

    def calls_of(method):
        def run(number):
            for index in range(args.calls):
                method(input, weights[index % copies], weights_in_out[index % copies], bias)

        return run

    with torch.no_grad():
        timings = interleaved({name: calls_of(method) for name, method in methods().items()}, rounds=args.rounds)
    seconds = {name: timing.median_s / args.calls for name, timing in timings.items()}
    return {f"{name}_GBps": weight_bytes / time_s / 1e9 for name, time_s in seconds.items()} | {
        "kernel_speedup": seconds["F.linear"] / seconds["few_rows_linear"],
        "kernel_over_sequential_read": seconds["sequential read"] / seconds["few_rows_linear"],
        "kernel_over_conv1d_layout": seconds["Conv1D layout (addmm)"] / seconds["few_rows_linear"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_shape_options(parser)
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 8, 16, 40])
    parser.add_argument("--calls", type=int, default=100, help="timed calls per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--megabytes", type=int, default=256, help="memory the weight copies cycle through")
    add_cpu_options(parser)
    args = parse_cpu_args(parser)
    shapes = weight_shapes(ModelShape.from_args(args))
    results = {
        name: {str(rows): measure(*shape, rows=rows, args=args) for rows in args.rows} for name, shape in shapes.items()
    }
    summary = {
        name: {rows: round(figures["kernel_speedup"], 2) for rows, figures in per_rows.items()}
        for name, per_rows in results.items()
    }
    write_report(
        {
            "benchmark": "bench_linear",
            **run_metadata("cpu"),
            "max_rows": MAX_ROWS,
            "shapes": {name: list(shape) for name, shape in shapes.items()},
            "args": vars(args),
            "results": results,
            "summary": {"kernel_speedup_over_F.linear": summary},
        },
        args.out,
        f"linear_cpu_{cpu_family()}.json",
    )


if __name__ == "__main__":
    main()
