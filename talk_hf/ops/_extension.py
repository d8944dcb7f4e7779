"""Just-in-time build and loading of the compiled backends in ``csrc/``, with a safe fallback.

Two extensions share the per-element math of ``csrc/talk_math.h``:

* ``"cpu"``: ``csrc/cpu_ops.cpp`` + ``csrc/cpu_linear.cpp`` (the few-row linear layer of
  decoding) + ``csrc/cpu_depthwise.cpp``, C++ only (-O3, OpenMP, the host's vector instructions unless
  ``$TALK_HF_PORTABLE_CPU=1``: see :func:`native_cpu`), for CPU tensors;
* ``"cuda"``: ``csrc/cuda_ops.cu`` + ``csrc/cuda_depthwise.cu`` + ``csrc/cuda_bindings.cpp``, for CUDA tensors,
  and the streaming kernels ``csrc/cuda_talk_stream.cu`` + ``csrc/cuda_conv_stream.cu`` (used where
  ``$TALK_HF_UNVERIFIED_CUDA`` names their op: :mod:`._unverified`).

Nothing is built at import.  :func:`load` builds an extension on first use with
``torch.utils.cpp_extension.load`` (ninja) into :func:`build_directory`, a folder named by the
package version, torch version, CUDA version (or ``cpu``), architecture and a digest of the kernel
sources' content (and of the host CPU where the build targets it), under ``$TALK_HF_BUILD_DIR``
(default ``~/.cache/talk_hf/extensions``).  Clones and environments with the same sources therefore
share one build, and a folder that already holds a finished build imports its library as it is,
without ninja (whose build file records one clone's absolute paths and would rebuild for
another).  A compile is announced through ``logging`` (a warning, so it shows by default) when it
starts and when it ends.  :func:`check_loadable` runs first, :func:`check_build_tools` before a
build (a finished build loads without a compiler), and every failure, of a check or of the build,
becomes an :class:`ExtensionUnavailable` that says why and how to fix it;
:func:`warn_fallback` turns it into one warning per process.

Builds are serialised by an OS-level file lock (``filelock``) with a timeout of
``$TALK_HF_BUILD_LOCK_TIMEOUT`` seconds (default 600).  The OS drops that lock when its holder
dies, so a killed build never blocks later runs; torch's own "lock" file, which it leaves behind
when killed and would otherwise wait on forever, is removed while we hold ours.

A build becomes visible only when it is complete: after the library is linked, imported and
flushed to disk, a completion record (``talk_hf_<kind>.complete.json``: its size and SHA-256) is
written next to it, atomically.  A library is loaded only when it matches its record, because
importing a library cut short (a full disk, a power loss, a job killed while linking) kills the
process with a bus error rather than raising.  A library without a matching record (or without
one at all, as those built before records were kept) is announced as such (one warning line) and
built again under the lock; ninja links it anew and recompiles only the objects whose compile did
not finish.

Loading a finished build takes no lock and writes nothing, so a read-only build folder (a cluster's
read-only home, a shared cache) that holds one is used as it is; a folder that cannot be created or
written when a build is needed becomes an :class:`ExtensionUnavailable` that names the folder and
``$TALK_HF_BUILD_DIR``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import platform
import re
import shutil
import subprocess
import threading
import time
import warnings
from pathlib import Path
from types import ModuleType

import filelock
import torch
import torch.utils.cpp_extension as cpp_extension

from ..version import __version__


def _kernel_sources() -> Path:
    """The folder of the kernel sources: ``talk_hf/csrc`` inside an installed wheel, else the
    repository's top-level ``csrc/`` (a source tree or an editable install); the first that exists."""
    package = Path(__file__).resolve().parent.parent
    installed, repository = package / "csrc", package.parent / "csrc"
    return installed if installed.is_dir() or not repository.is_dir() else repository


CSRC = _kernel_sources()
SOURCES = {
    "cpu": ("cpu_ops.cpp", "cpu_linear.cpp", "cpu_depthwise.cpp"),
    "cuda": ("cuda_ops.cu", "cuda_bindings.cpp", "cuda_depthwise.cu", "cuda_talk_stream.cu", "cuda_conv_stream.cu"),
}
BUILD_DIR_ENV = "TALK_HF_BUILD_DIR"
LOCK_TIMEOUT_ENV = "TALK_HF_BUILD_LOCK_TIMEOUT"
PORTABLE_CPU_ENV = "TALK_HF_PORTABLE_CPU"
DEFAULT_LOCK_TIMEOUT_S = 600.0
TORCH_BATON = "lock"  # the file torch.utils.cpp_extension waits on while another build runs
BUILD_LOCK = "talk_hf_build.lock"
NOT_BUILT = "is not built yet"  # what _library_fault says of a folder without a library

logger = logging.getLogger(__name__)
_results: dict[str, ModuleType | ExtensionUnavailable] = {}
_results_guard = threading.Lock()
_warned: set[str] = set()


class ExtensionUnavailable(RuntimeError):
    """A compiled backend cannot be used here; ``reason`` says why, ``fix`` what to do."""

    def __init__(self, kind: str, reason: str, fix: str):
        self.kind, self.reason, self.fix = kind, reason, fix
        super().__init__(f"the talk_hf {kind} extension is unavailable: {reason}. Fix: {fix}")


class BackendFallbackWarning(UserWarning):
    """Issued once per process and extension when "auto" falls back to the PyTorch path."""


def _check_sources(kind: str) -> None:
    missing = [source for source in SOURCES[kind] if not (CSRC / source).is_file()]
    if missing:  # e.g. a remote-code copy of the ops, which carries no kernel sources
        raise ExtensionUnavailable(
            kind,
            f"the kernel sources {missing} are not in {CSRC}",
            "install the talk_hf package (pip install talk_hf) to get them",
        )


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
    _check_sources(kind)  # first: a copy without kernel sources never runs nvcc
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


def _compiler_flags(kind: str) -> dict:
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
    """12 hex digits of SHA-256 over what ``kind`` is compiled from: its sources, every header of
    ``csrc/`` and the compiler flags ("nosources" where there are none, as in a remote-code copy)."""
    files = [CSRC / source for source in SOURCES[kind]] + sorted(CSRC.glob("*.h"))
    if not all(path.is_file() for path in files):
        return "nosources"
    flags = _compiler_flags(kind)
    digest = hashlib.sha256(repr(sorted(flags.items())).encode())
    if "-march=native" in flags["extra_cflags"]:
        digest.update(_host_cpu().encode())
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def _build_root() -> Path:
    """``$TALK_HF_BUILD_DIR``, or ``~/.cache/talk_hf/extensions`` where it is unset or empty."""
    return Path(os.environ.get(BUILD_DIR_ENV) or Path.home() / ".cache" / "talk_hf" / "extensions")


def build_directory(kind: str) -> Path:
    """Where ``kind`` is built: one folder per package, torch, CUDA version, architecture and
    kernel source content (:func:`source_digest`)."""
    cuda = f"cu{torch.version.cuda}" if kind == "cuda" else "cpu"
    name = f"talk_hf-{__version__}_torch-{torch.__version__}_{cuda}_{architecture(kind)}_{source_digest(kind)}"
    return _build_root() / re.sub(r"[^A-Za-z0-9._-]", "_", name)


def _library(kind: str, directory: Path) -> Path:
    return directory / f"talk_hf_{kind}{cpp_extension.LIB_EXT}"


def _completion_record(kind: str, directory: Path) -> Path:
    """The file that says ``kind``'s library in ``directory`` is complete: its size and SHA-256."""
    return directory / f"talk_hf_{kind}.complete.json"


def _fingerprint(path: Path) -> dict:
    """Size in bytes and SHA-256 of the file at ``path``, from one reading of it."""
    digest, size = hashlib.sha256(), 0
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
            size += len(block)
    return {"size": size, "sha256": digest.hexdigest()}


def _library_fault(kind: str, directory: Path) -> str | None:
    """None when ``directory`` holds ``kind``'s library exactly as its finished build recorded it;
    otherwise what is wrong, worded to follow "the library" (:data:`NOT_BUILT` where there is none).

    Reads files only, never imports the library: importing one cut short is a bus error.
    """
    library, record = _library(kind, directory), _completion_record(kind, directory)
    try:
        if not library.is_file():
            return NOT_BUILT
        recorded = json.loads(record.read_text())
        found = _fingerprint(library)
    except FileNotFoundError:
        return f"has no completion record {record.name} (its build did not finish)"
    except (OSError, ValueError) as error:
        return f"cannot be checked against its completion record {record.name} ({error})"
    if found == recorded:
        return None
    built = recorded.get("size", "?") if isinstance(recorded, dict) else "?"
    return f"does not match its completion record ({found['size']} bytes, {built} when built)"


def _record_completion(kind: str, directory: Path) -> None:
    """Flush ``kind``'s library to disk, then write its completion record (atomically: a partial
    file renamed), so that a record never vouches for a library a power loss could cut short."""
    library, record = _library(kind, directory), _completion_record(kind, directory)
    with library.open("rb") as file:
        os.fsync(file.fileno())
    partial = record.with_name(record.name + ".partial")
    with partial.open("w") as file:
        json.dump(_fingerprint(library), file)
        file.flush()
        os.fsync(file.fileno())
    os.replace(partial, record)


def is_built(kind: str) -> bool:
    """Whether :func:`build_directory` holds a finished, intact build of ``kind`` (loading reuses it)."""
    return _library_fault(kind, build_directory(kind)) is None


def _lock_timeout() -> float:
    value = os.environ.get(LOCK_TIMEOUT_ENV, "")
    try:
        return float(value) if value else DEFAULT_LOCK_TIMEOUT_S
    except ValueError:
        raise ValueError(f"${LOCK_TIMEOUT_ENV} must be a number of seconds, got {value!r}") from None


def _import_library(kind: str, library: Path) -> ModuleType:
    """Import a library built earlier (by this clone or another with the same sources)."""
    spec = importlib.util.spec_from_file_location(f"talk_hf_{kind}", library)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _import_finished(kind: str, directory: Path) -> ModuleType | str:
    """``kind``'s module imported from a finished build in ``directory``, or why there is none to
    import (:func:`_library_fault`, or the import's error).  Takes no lock and writes nothing."""
    fault = _library_fault(kind, directory)
    if fault is not None:
        return fault
    try:
        return _import_library(kind, _library(kind, directory))
    except ImportError as error:  # intact, but e.g. linked against a libtorch that is gone
        return f"does not import ({error})"


def _unusable_folder(kind: str, directory: Path, fault: str, error: OSError) -> ExtensionUnavailable:
    """The error for a build folder that cannot be created or written when ``kind`` needs a build."""
    setting = os.environ.get(BUILD_DIR_ENV)
    now = f"now {setting}" if setting else "unset, so ~/.cache/talk_hf/extensions"
    return ExtensionUnavailable(
        kind,
        f"its build folder {directory} cannot be created or written ({error.strerror or error}), "
        f"and a build is needed there: the library {fault}",
        f"point ${BUILD_DIR_ENV} ({now}) at a writable folder",
    )


def _take_build_lock(kind: str, directory: Path, fault: str, timeout: float) -> filelock.FileLock:
    """Create ``directory`` and take its build lock, held when this returns.  ``fault`` is why a
    build is needed (:func:`_library_fault`), for the error raised if the folder is unusable."""
    lock = filelock.FileLock(str(directory / BUILD_LOCK), timeout=timeout)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        lock.acquire()
    except filelock.Timeout:  # first: a subclass of OSError
        raise ExtensionUnavailable(
            kind,
            f"another process held the build lock {lock.lock_file} for more than {timeout:g} s",
            f"wait for that build to finish, or raise ${LOCK_TIMEOUT_ENV}",
        ) from None
    except OSError as error:  # a file in the way, a read-only file system, no permission
        raise _unusable_folder(kind, directory, fault, error) from None  # it names the folder and the cause
    return lock


def _compile(kind: str, directory: Path) -> ModuleType:
    """Build ``kind`` in ``directory``, unless another process finished it while this one waited for
    the build lock, which the caller holds."""
    (directory / TORCH_BATON).unlink(missing_ok=True)  # stale: no other talk_hf build can hold it now
    found = _import_finished(kind, directory)
    if not isinstance(found, str):
        return found
    library = _library(kind, directory)
    if found != NOT_BUILT:
        logger.warning("talk_hf: not loading %s, which %s; building it again", library, found)
    _completion_record(kind, directory).unlink(missing_ok=True)
    library.unlink(missing_ok=True)  # ninja would take a library cut short for up to date
    if kind == "cuda" and not os.environ.get("TORCH_CUDA_ARCH_LIST"):  # this GPU only, as the folder says
        os.environ["TORCH_CUDA_ARCH_LIST"] = "{}.{}".format(*torch.cuda.get_device_capability())
    logger.warning(
        "talk_hf: compiling the %s kernels, once for these sources and this torch (a minute or more), in %s",
        kind,
        directory,
    )
    start = time.perf_counter()
    module = cpp_extension.load(
        name=f"talk_hf_{kind}",
        sources=[str(CSRC / source) for source in SOURCES[kind]],
        extra_include_paths=[str(CSRC)],
        build_directory=str(directory),
        verbose=os.environ.get("TALK_HF_BUILD_VERBOSE") == "1",
        **_compiler_flags(kind),
    )
    _record_completion(kind, directory)  # only now may other processes load it
    logger.warning("talk_hf: the %s kernels were built in %.0f s", kind, time.perf_counter() - start)
    return module


def _build(kind: str) -> ModuleType:
    """Check, then import ``kind``'s finished build, or build it under the lock (errors become
    :class:`ExtensionUnavailable`).  The build tools are checked only when a build is needed."""
    check_loadable(kind)
    timeout = _lock_timeout()  # a bad setting is named even where a finished build needs no lock
    directory = build_directory(kind)
    found = _import_finished(kind, directory)  # lock-free, so a read-only folder's build is used
    if not isinstance(found, str):
        return found
    check_build_tools(kind)
    lock = _take_build_lock(kind, directory, found, timeout)
    try:
        return _compile(kind, directory)
    except (RuntimeError, OSError, subprocess.SubprocessError) as error:
        lines = str(error).strip().splitlines() or [type(error).__name__]
        summary = next((line.strip() for line in lines if "error:" in line.lower()), lines[-1])
        raise ExtensionUnavailable(
            kind,
            f"the build in {directory} failed ({summary})",
            "rerun with TALK_HF_BUILD_VERBOSE=1 to see the compiler output",
        ) from error
    finally:
        lock.release()


def load(kind: str) -> ModuleType:
    """The compiled module for ``kind`` ("cpu" or "cuda"), built on first use.

    The outcome, module or :class:`ExtensionUnavailable`, is remembered for the process: a failed
    build is not retried on every call.
    """
    with _results_guard:
        if kind not in _results:
            try:
                _results[kind] = _build(kind)
            except ExtensionUnavailable as error:
                _results[kind] = error
        result = _results[kind]
    if isinstance(result, ExtensionUnavailable):
        raise result
    return result


def warn_fallback(error: ExtensionUnavailable) -> None:
    """Warn, once per process and extension kind, that "auto" runs the PyTorch path instead."""
    if error.kind in _warned:
        return
    _warned.add(error.kind)
    warnings.warn(
        f"talk_hf runs its PyTorch path on {error.kind} tensors: {error}. "
        "Set TALK_HF_BACKEND=torch to choose it explicitly and silence this warning.",
        BackendFallbackWarning,
        stacklevel=5,  # warn_fallback, auto_extension, the op's backend choice, the op: its caller
    )
