"""One forward and backward of each op at the TaLK paper's Table 6 shape, for Nsight Compute, on both
CUDA kernel sets: the default (talk_conv's tiled kernels, the streaming ones of dynamic_conv and
light_conv) and talk_conv's streaming kernels (csrc/talk_conv/talk_conv_cuda_stream.cu, turned on
per case through $TALK_HF_UNVERIFIED_CUDA), so one report holds old and new; then the streaming
kernels at one channel a thread (misaligned x; see KERNEL_SETS).

    ncu --profile-from-start off --clock-control none --section SpeedOfLight --section Occupancy \
        --section LaunchStats --section WarpStateStats -k regex:'talk|conv' \
        python benchmarks/profile_kernels.py [--length 10000]

Each op runs once before profiling starts (build, cache warm-up); the profiled region holds exactly
one forward and one backward per case and kernel set, so every kernel launch in the report belongs
to one of them, in the order printed on stdout.  ``--dtype bfloat16`` profiles the half-precision loads.  `benchmarks/gpu_suite.sh profile` runs it and saves the report.
"""

import argparse

import torch
from bench_ops import STREAM_BACKEND, TABLE6, build_case, kernel_set

# name -> (its benchmark backend, for bench_ops.kernel_set; the cases it profiles; whether x is
# misaligned).  "stream-one-channel": the streaming kernels with x off the vector boundary, so that
# each thread owns one channel: its shared-memory ring (talk_conv: max_left + max_right + 3 rows;
# dynamic/light_conv: K rows) holds a quarter (float32) or an eighth (bfloat16) of the full-width
# one's, which limits the resident warps per SM (about 6 and 3 at full width at this shape), so the
# two sets' durations and occupancies in one report say how much occupancy bounds these kernels.
KERNEL_SETS = {
    "default": (
        "cuda",
        ("talk_bidirectional", "talk_causal", "dynamic_conv_k3", "dynamic_conv_k31", "light_conv_k31"),
        False,
    ),
    "stream": (STREAM_BACKEND, ("talk_bidirectional", "talk_causal"), False),
    "stream-one-channel": (STREAM_BACKEND, ("talk_bidirectional", "dynamic_conv_k31"), True),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--length", type=int, default=10_000)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--sets", nargs="+", default=list(KERNEL_SETS), choices=list(KERNEL_SETS))
    args = parser.parse_args()
    shape = dict(batch=TABLE6["batch"], length=args.length, channels=TABLE6["channels"], heads=TABLE6["heads"])
    dtype = getattr(torch, args.dtype)
    steps = []
    for kernels in args.sets:
        set_backend, cases, misaligned_x = KERNEL_SETS[kernels]
        for name in cases:
            with kernel_set(set_backend) as backend:
                run, _ = build_case(
                    name, **shape, device="cuda", dtype=dtype, backend=backend, misaligned_x=misaligned_x
                )
                out = run()
                out.backward(torch.ones_like(out))
            steps.append((kernels, name, run))
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for kernels, name, run in steps:
        print(f"profiled: {name} [{kernels}] forward + backward, {shape}, {args.dtype}", flush=True)
        with kernel_set(KERNEL_SETS[kernels][0]):
            out = run()
            out.backward(torch.ones_like(out))
        torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main()
