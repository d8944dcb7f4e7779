"""Building a compiled backend under a file lock, unless a finished build is there to import.

Builds are serialised by an OS-level file lock (``filelock``) with a timeout of
``$TALK_HF_BUILD_LOCK_TIMEOUT`` seconds (default 600).  The OS drops that lock when its holder
dies, so a killed build never blocks later runs.  torch before 2.14 serialises its own builds with a
"lock" file whose mere existence blocks, which a killed build leaves behind and every later load
would wait on forever: that file is removed while we hold our lock (from 2.14 torch holds an OS lock
on the file instead, which its holder's death releases, and the file stays).  A library
without a matching completion record (:mod:`.build_record`) is announced (one warning line) and
built again under the lock; ninja links it anew and recompiles only the objects whose compile did
not finish.  A compile is announced through ``logging`` (a warning, so it shows by default) when
it starts and when it ends.  A folder that cannot be created or written when a build is needed
becomes an :class:`ExtensionUnavailable` that names the folder and ``$TALK_HF_BUILD_DIR``.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from pathlib import Path
from types import ModuleType

import filelock
import torch
import torch.utils.cpp_extension as cpp_extension
from torch.torch_version import TorchVersion

from . import build_folder, build_record, build_tools
from .build_record import FaultCause, LibraryFault
from .unavailable import ExtensionUnavailable

LOCK_TIMEOUT_ENV = "TALK_HF_BUILD_LOCK_TIMEOUT"
DEFAULT_LOCK_TIMEOUT_S = 600.0
TORCH_BATON = "lock"  # the file torch.utils.cpp_extension waits on while another build runs
# whether torch waits while that file exists (before 2.14), rather than while another process holds its OS lock
TORCH_WAITS_ON_A_BATON = TorchVersion(torch.__version__) < (2, 14)
BUILD_LOCK = "talk_hf_build.lock"

logger = logging.getLogger(__name__)


def lock_timeout() -> float:
    """Seconds to wait for another process's build: ``$TALK_HF_BUILD_LOCK_TIMEOUT``, default 600."""
    value = os.environ.get(LOCK_TIMEOUT_ENV, "")
    try:
        return float(value) if value else DEFAULT_LOCK_TIMEOUT_S
    except ValueError:
        raise ValueError(f"${LOCK_TIMEOUT_ENV} must be a number of seconds, got {value!r}") from None


def _unusable_folder(kind: str, directory: Path, fault: LibraryFault, error: OSError) -> ExtensionUnavailable:
    """The error for a build folder that cannot be created or written when ``kind`` needs a build."""
    setting = os.environ.get(build_folder.BUILD_DIR_ENV)
    now = f"now {setting}" if setting else "unset, so ~/.cache/talk_hf/extensions"
    return ExtensionUnavailable(
        kind,
        f"its build folder {directory} cannot be created or written ({error.strerror or error}), "
        f"and a build is needed there: the library {fault}",
        f"point ${build_folder.BUILD_DIR_ENV} ({now}) at a writable folder",
    )


def _take_build_lock(kind: str, directory: Path, fault: LibraryFault, timeout: float) -> filelock.FileLock:
    """Create ``directory`` and take its build lock, held when this returns.  ``fault`` is why a
    build is needed, for the error raised if the folder is unusable."""
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
    if TORCH_WAITS_ON_A_BATON:
        (directory / TORCH_BATON).unlink(missing_ok=True)  # stale: no other talk_hf build can hold it now
    found = build_record.import_finished(kind, directory)
    if not isinstance(found, LibraryFault):
        return found
    library = build_record.library_path(kind, directory)
    if found.cause is not FaultCause.NOT_BUILT:
        logger.warning("talk_hf: not loading %s, which %s; building it again", library, found)
    build_record.completion_record(kind, directory).unlink(missing_ok=True)
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
        sources=[str(path) for path in build_folder.source_paths(kind)],
        extra_include_paths=[str(build_folder.CSRC)],
        build_directory=str(directory),
        verbose=os.environ.get("TALK_HF_BUILD_VERBOSE") == "1",
        **build_folder.compiler_flags(kind),
    )
    build_record.record_completion(kind, directory)  # only now may other processes load it
    logger.warning("talk_hf: the %s kernels were built in %.0f s", kind, time.perf_counter() - start)
    return module


def build(kind: str) -> ModuleType:
    """Check, then import ``kind``'s finished build, or build it under the lock (errors become
    :class:`ExtensionUnavailable`).  The build tools are checked only when a build is needed."""
    build_tools.check_loadable(kind)
    timeout = lock_timeout()  # a bad setting is named even where a finished build needs no lock
    directory = build_folder.build_directory(kind)
    found = build_record.import_finished(kind, directory)  # lock-free, so a read-only folder's build is used
    if not isinstance(found, LibraryFault):
        return found
    build_tools.check_build_tools(kind)
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
