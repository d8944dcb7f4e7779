"""Where a build of a compiled backend lives: the kernel sources it is compiled from, the compiler
flags, and the build folder named by both.

The folder's name holds the package version, torch version, CUDA version (or ``cpu``),
architecture and a digest of the kernel sources' content and the compiler flags (and of the host
CPU where the build targets it), under ``$TALK_HF_BUILD_DIR`` (default
``~/.cache/talk_hf/extensions``).  Clones and environments with the same sources therefore share
one build, and any change of what is compiled gets a folder of its own.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
from pathlib import Path

import torch

from ...version import __version__
from .unavailable import ExtensionUnavailable


def _kernel_sources() -> Path:
    """The folder of the kernel sources: ``talk_hf/csrc`` inside an installed wheel, else the
    repository's top-level ``csrc/`` (a source tree or an editable install); the first that exists."""
    package = Path(__file__).resolve().parent.parent.parent  # talk_hf
    installed, repository = package / "csrc", package.parent / "csrc"
    return installed if installed.is_dir() or not repository.is_dir() else repository


CSRC = _kernel_sources()
# What each extension compiles, relative to CSRC: one folder per op, and the file of the module's
# bindings.  Every header under CSRC counts too (source_digest).  Base names are unique across the
# folders (talk_conv_cpu.cpp, not talk_conv/cpu.cpp): torch's ninja build names each object file
# after its source's base name alone.
SOURCES = {
    "cpu": (
        "talk_conv/talk_conv_cpu.cpp",
        "dynamic_conv/dynamic_conv_cpu.cpp",
        "depthwise_conv/depthwise_conv_cpu.cpp",
        "linear/linear_cpu.cpp",
        "cpu_bindings.cpp",
    ),
    "cuda": (
        "talk_conv/talk_conv_cuda.cu",
        "talk_conv/talk_conv_cuda_stream.cu",
        "dynamic_conv/dynamic_conv_cuda.cu",
        "dynamic_conv/dynamic_conv_cuda_stream.cu",
        "depthwise_conv/depthwise_conv_cuda.cu",
        "cuda_bindings.cpp",
    ),
}
BUILD_DIR_ENV = "TALK_HF_BUILD_DIR"
PORTABLE_CPU_ENV = "TALK_HF_PORTABLE_CPU"


def source_paths(kind: str) -> list[Path]:
    """The files ``kind`` ("cpu" or "cuda") compiles, as paths under :data:`CSRC`."""
    return [CSRC / source for source in SOURCES[kind]]


def check_sources(kind: str) -> None:
    """Raise :class:`ExtensionUnavailable` naming the kernel sources of ``kind`` that are missing."""
    missing = [source for source in SOURCES[kind] if not (CSRC / source).is_file()]
    if missing:  # e.g. a remote-code copy of the ops, which carries no kernel sources
        raise ExtensionUnavailable(
            kind,
            f"the kernel sources {missing} are not in {CSRC}",
            "install talk_hf from its source, which holds them (it is not on the package index): "
            "pip install -e <path to a clone of the talk_hf repository>",
        )


def architecture(kind: str) -> str:
    """``sm_XY`` of the current GPU for "cuda" (or of ``$TORCH_CUDA_ARCH_LIST``), else the CPU's."""
    if kind != "cuda":
        return platform.machine() or "unknown"
    listed = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if listed:
        return "sm_" + "_".join(arch.replace(".", "") for arch in re.split(r"[;\s]+", listed.strip()))
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


def native_cpu() -> bool:
    """Whether the CPU kernels target this host's vector instructions (``-march=native``).

    On by default with GCC-style compilers on Linux: the build is just in time, on the machine that
    runs it, and the build folder's digest includes the host CPU (:func:`_host_cpu`), so a cache
    shared by different machines keeps one build per CPU. ``$TALK_HF_PORTABLE_CPU=1`` builds for the
    architecture's baseline instead (a library meant to be copied to other machines).
    """
    return platform.system() == "Linux" and os.environ.get(PORTABLE_CPU_ENV, "") not in ("1", "true", "yes")


def _host_cpu() -> str:
    """What ``-march=native`` depends on: the CPU model and its feature flags (Linux /proc/cpuinfo)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor()
    wanted = ("model name", "flags", "features", "cpu model", "isa")  # x86, Arm, others
    return "\n".join(sorted({line for line in lines if line.split(":")[0].strip().lower() in wanted}))


def compiler_flags(kind: str) -> dict:
    """The keyword arguments of ``cpp_extension.load`` that decide what ``kind`` compiles to."""
    flags = ["-O3", "-fvisibility=hidden"]  # the CPU and CUDA modules define the same C++ names
    ldflags = []
    if platform.system() == "Linux":
        flags.append("-fopenmp")
        ldflags.append("-fopenmp")
    if kind == "cpu" and native_cpu():
        flags.append("-march=native")
    options = {"extra_cflags": flags, "extra_ldflags": ldflags}
    if kind == "cuda":
        options["extra_cuda_cflags"] = ["-O3", "-lineinfo", "-Xcompiler", "-fvisibility=hidden"]
    return options


def source_digest(kind: str) -> str:
    """12 hex digits of SHA-256 over what ``kind`` is compiled from: its sources and every header
    under :data:`CSRC`, each with its path there, and the compiler flags.  Raises
    :class:`ExtensionUnavailable` where sources are missing (:func:`check_sources`)."""
    check_sources(kind)
    flags = compiler_flags(kind)
    digest = hashlib.sha256(repr(sorted(flags.items())).encode())
    if "-march=native" in flags["extra_cflags"]:
        digest.update(_host_cpu().encode())
    for path in source_paths(kind) + sorted(CSRC.rglob("*.h")):
        digest.update(path.relative_to(CSRC).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def build_root() -> Path:
    """``$TALK_HF_BUILD_DIR``, or ``~/.cache/talk_hf/extensions`` where it is unset or empty."""
    return Path(os.environ.get(BUILD_DIR_ENV) or Path.home() / ".cache" / "talk_hf" / "extensions")


def build_directory(kind: str) -> Path:
    """Where ``kind`` is built: one folder per package, torch, CUDA version, architecture and
    kernel source content (:func:`source_digest`)."""
    digest = source_digest(kind)  # first: without sources there is no folder, whatever the GPU
    cuda = f"cu{torch.version.cuda}" if kind == "cuda" else "cpu"
    name = f"talk_hf-{__version__}_torch-{torch.__version__}_{cuda}_{architecture(kind)}_{digest}"
    return build_root() / re.sub(r"[^A-Za-z0-9._-]", "_", name)
