"""What finding, building and loading a compiled backend needs here, checked before it is tried.

:func:`check_loadable` (kernel sources; for CUDA a CUDA build of torch and a GPU or named
architectures) runs before a finished build is looked for, :func:`check_build_tools` (a C++
compiler, ninja; for CUDA nvcc of torch's major version) only before a build, since a finished
build loads without them.  Each raises :class:`ExtensionUnavailable` saying why and how to fix it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import torch
import torch.utils.cpp_extension as cpp_extension

from . import build_folder
from .unavailable import ExtensionUnavailable


def _nvcc_major() -> tuple[str, int]:
    """Path and major version of the nvcc that torch would use (raises on failure)."""
    home = cpp_extension.CUDA_HOME
    nvcc = os.path.join(home, "bin", "nvcc") if home else shutil.which("nvcc")
    if not nvcc or not os.path.exists(nvcc):
        raise FileNotFoundError("nvcc")
    banner = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    match = re.search(r"release (\d+)\.", banner)
    if match is None:
        raise ValueError(f"cannot read the version from {nvcc} --version")
    return nvcc, int(match.group(1))


def preflight(kind: str) -> None:
    """Check what building ``kind`` ("cpu" or "cuda") needs; raise :class:`ExtensionUnavailable`.

    :func:`check_loadable`, then a C++ compiler and ninja, and for CUDA nvcc of torch's major
    version.
    """
    check_loadable(kind)
    check_build_tools(kind)


def check_loadable(kind: str) -> None:
    """Check what finding and loading a finished build of ``kind`` needs, build tools aside; raise
    :class:`ExtensionUnavailable`.

    The kernel sources (the build folder is named by their digest); for CUDA, a CUDA build of torch
    and a visible GPU unless ``$TORCH_CUDA_ARCH_LIST`` names the architectures (ahead-of-time
    builds on GPU-less nodes).
    """
    build_folder.check_sources(kind)  # first: a copy without kernel sources never runs nvcc
    if kind == "cuda":
        if torch.version.cuda is None:
            raise ExtensionUnavailable(
                kind,
                f"torch {torch.__version__} is a CPU-only build",
                "install a CUDA build of torch (https://pytorch.org/get-started/locally/)",
            )
        if not torch.cuda.is_available() and not os.environ.get("TORCH_CUDA_ARCH_LIST"):
            raise ExtensionUnavailable(
                kind,
                "no CUDA GPU is visible",
                "check nvidia-smi, the driver and CUDA_VISIBLE_DEVICES "
                "(or name the architectures to build for in $TORCH_CUDA_ARCH_LIST)",
            )


def check_build_tools(kind: str) -> None:
    """Check the tools that building ``kind`` needs (a C++ compiler, ninja; for CUDA nvcc of torch's
    major version); raise :class:`ExtensionUnavailable`.  A finished build loads without them."""
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        raise ExtensionUnavailable(
            kind,
            f"no C++ compiler: {compiler!r} (from $CXX, default c++) was not found",
            "install one (e.g. apt-get install g++) or point $CXX at it",
        )
    if not cpp_extension.is_ninja_available():
        raise ExtensionUnavailable(kind, "ninja is not installed", "pip install ninja")
    if kind == "cuda":
        try:
            nvcc, major = _nvcc_major()
        except (OSError, ValueError, subprocess.CalledProcessError) as error:
            raise ExtensionUnavailable(
                kind,
                f"nvcc was not found or does not run ({error})",
                f"install the CUDA {torch.version.cuda} toolkit and set $CUDA_HOME",
            ) from error
        if major != int(torch.version.cuda.split(".")[0]):
            raise ExtensionUnavailable(
                kind,
                f"{nvcc} is CUDA {major} but torch was built with CUDA {torch.version.cuda}",
                f"point $CUDA_HOME at a CUDA {torch.version.cuda.split('.')[0]}.x toolkit",
            )
