"""Build the compiled backends ahead of time: ``python -m talk_hf.ops.build [--cpu] [--cuda]``.

For cluster nodes and CI images: the build lands in the same folder that first use would pick
(:func:`talk_hf.ops._extension.build_directory`; set ``$TALK_HF_BUILD_DIR`` to move it), so later
processes load it at once (without the build lock, so the folder may then be made read-only).  A
library there that its build did not finish, or that was damaged since, is announced and built
again.  Without flags it builds what this machine can and says what it skipped and why (exit 0);
a backend named with ``--cpu`` or ``--cuda`` that cannot be built exits 1 with the reason and the
fix.  Each line says whether the backend was built now or reused.  ``--arch 8.0
9.0`` builds CUDA for those architectures instead of the visible GPU's, without needing one (it
sets ``$TORCH_CUDA_ARCH_LIST``; export the same value where the build is used, since the folder is
named by it).
"""

from __future__ import annotations

import argparse
import os
import sys

from . import _extension


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m talk_hf.ops.build", description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="build the C++ CPU backend (an error if it cannot)")
    parser.add_argument("--cuda", action="store_true", help="build the CUDA backend (an error if it cannot)")
    parser.add_argument("--arch", nargs="+", metavar="X.Y", help="CUDA architectures, e.g. 8.0 9.0")
    args = parser.parse_args(argv)
    requested = [kind for kind in ("cpu", "cuda") if getattr(args, kind)]
    if args.arch:
        os.environ["TORCH_CUDA_ARCH_LIST"] = ";".join(args.arch)

    failed = False
    for kind in requested or ["cpu", "cuda"]:
        try:
            _extension.check_loadable(kind)  # what is_built needs; load checks the build tools if it builds
            reused = _extension.is_built(kind)
            _extension.load(kind)
        except _extension.ExtensionUnavailable as error:
            if requested:
                print(f"{kind}: FAILED: {error}", file=sys.stderr)
                failed = True
            else:
                print(f"{kind}: skipped: {error.reason} (fix: {error.fix})")
        else:
            print(f"{kind}: {'reused' if reused else 'built'} in {_extension.build_directory(kind)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
