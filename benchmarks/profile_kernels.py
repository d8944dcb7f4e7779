"""One forward and backward of each op at the TaLK paper's Table 6 shape, for Nsight Compute, on the
CUDA kernels the ops run (talk_conv: the tiled forward, csrc/talk_conv/talk_conv_cuda.cu, and the
streaming backward, talk_conv_cuda_stream.cu; dynamic_conv and light_conv: the streaming kernels,
csrc/dynamic_conv/dynamic_conv_cuda_stream.cu; see csrc/cuda_fallback.h).

    ncu --profile-from-start off --clock-control none --section SpeedOfLight --section Occupancy \
        --section LaunchStats --section WarpStateStats -k regex:'talk|conv' \
        python benchmarks/profile_kernels.py [--length 10000]

Each op runs once before profiling starts (build, cache warm-up); the profiled region holds exactly
one forward and one backward per case, so every kernel launch in the report belongs to one of them,
in the order printed on stdout.  ``--dtype bfloat16`` profiles the half-precision loads.
`benchmarks/gpu_suite.sh profile` runs it and saves the report.
"""

import argparse

import torch
from bench_ops import TABLE6, build_case

# The cases profiled, each once.
CASES = ("talk_bidirectional", "talk_causal", "dynamic_conv_k3", "dynamic_conv_k31", "light_conv_k31")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--length", type=int, default=10_000)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    args = parser.parse_args()
    shape = dict(batch=TABLE6["batch"], length=args.length, channels=TABLE6["channels"], heads=TABLE6["heads"])
    dtype = getattr(torch, args.dtype)
    steps = []
    for name in args.cases:
        run, _ = build_case(name, **shape, device="cuda", dtype=dtype, backend="cuda")
        out = run()
        out.backward(torch.ones_like(out))
        steps.append((name, run))
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for name, run in steps:
        print(f"profiled: {name} forward + backward, {shape}, {args.dtype}", flush=True)
        out = run()
        out.backward(torch.ones_like(out))
        torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main()
