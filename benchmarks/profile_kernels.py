"""One forward and backward of each op at the TaLK paper's Table 6 shape, for Nsight Compute.

    ncu --profile-from-start off --clock-control none --section SpeedOfLight --section Occupancy \
        --section LaunchStats --section WarpStateStats -k regex:'talk|conv' \
        python benchmarks/profile_kernels.py [--length 10000]

Each op runs once before profiling starts (build, cache warm-up); the profiled region holds exactly
one forward and one backward per case, so every kernel launch in the report belongs to one case,
in the order printed on stdout.  `benchmarks/gpu_suite.sh profile` runs it and saves the report.
"""

import argparse

import torch
from bench_ops import TABLE6, build_case

CASES = ("talk_bidirectional", "talk_causal", "dynamic_conv_k3", "dynamic_conv_k31", "light_conv_k31")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--length", type=int, default=10_000)
    args = parser.parse_args()
    shape = dict(batch=TABLE6["batch"], length=args.length, channels=TABLE6["channels"], heads=TABLE6["heads"])
    steps = []
    for name in CASES:
        run, _ = build_case(name, **shape, device="cuda", dtype=torch.float32, backend="cuda")
        run().backward(torch.ones(shape["batch"], args.length, shape["channels"], device="cuda"))
        steps.append((name, run))
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for name, run in steps:
        print(f"profiled: {name} forward + backward, {shape}", flush=True)
        out = run()
        out.backward(torch.ones_like(out))
        torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main()
