"""Whether a build folder holds a finished, intact library, and importing it when it does.

A build becomes visible only when it is complete: after the library is linked, imported and
flushed to disk, a completion record (``talk_hf_<kind>.complete.json``: its size and SHA-256) is
written next to it, atomically (:func:`record_completion`).  A library is imported only when it
matches its record, because importing a library cut short (a full disk, a power loss, a job killed
while linking) kills the process with a bus error rather than raising.  What is wrong with a
folder's library is a :class:`LibraryFault`; checking takes no lock and writes nothing, so a
read-only folder's finished build is used as it is.
"""

from __future__ import annotations

import enum
import hashlib
import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch.utils.cpp_extension as cpp_extension

from . import build_folder


class FaultCause(enum.Enum):
    """Why a folder's library is not imported."""

    NOT_BUILT = enum.auto()  # there is no library
    NO_RECORD = enum.auto()  # its build did not finish, or wrote no completion record
    UNREADABLE_RECORD = enum.auto()  # the record or the library cannot be read
    MISMATCH = enum.auto()  # the library is not the one its build recorded
    NOT_IMPORTABLE = enum.auto()  # intact, but its import fails (e.g. a libtorch that is gone)


@dataclass(frozen=True)
class LibraryFault:
    """What is wrong with a folder's library: ``cause``, and ``words`` that follow "the library"."""

    cause: FaultCause
    words: str

    def __str__(self) -> str:
        return self.words


def library_path(kind: str, directory: Path) -> Path:
    """The file of ``kind``'s compiled module in ``directory``."""
    return directory / f"talk_hf_{kind}{cpp_extension.LIB_EXT}"


def completion_record(kind: str, directory: Path) -> Path:
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


def library_fault(kind: str, directory: Path) -> LibraryFault | None:
    """None when ``directory`` holds ``kind``'s library exactly as its finished build recorded it;
    otherwise what is wrong.  Reads files only, never imports the library."""
    library, record = library_path(kind, directory), completion_record(kind, directory)
    try:
        if not library.is_file():
            return LibraryFault(FaultCause.NOT_BUILT, "is not built yet")
        recorded = json.loads(record.read_text())
        found = _fingerprint(library)
    except FileNotFoundError:
        return LibraryFault(FaultCause.NO_RECORD, f"has no completion record {record.name} (its build did not finish)")
    except (OSError, ValueError) as error:
        words = f"cannot be checked against its completion record {record.name} ({error})"
        return LibraryFault(FaultCause.UNREADABLE_RECORD, words)
    if found == recorded:
        return None
    built = recorded.get("size", "?") if isinstance(recorded, dict) else "?"
    words = f"does not match its completion record ({found['size']} bytes, {built} when built)"
    return LibraryFault(FaultCause.MISMATCH, words)


def record_completion(kind: str, directory: Path) -> None:
    """Flush ``kind``'s library to disk, then write its completion record (atomically: a partial
    file renamed), so that a record never vouches for a library a power loss could cut short."""
    library, record = library_path(kind, directory), completion_record(kind, directory)
    with library.open("rb") as file:
        os.fsync(file.fileno())
    partial = record.with_name(record.name + ".partial")
    with partial.open("w") as file:
        json.dump(_fingerprint(library), file)
        file.flush()
        os.fsync(file.fileno())
    os.replace(partial, record)


def is_built(kind: str) -> bool:
    """Whether the build folder of ``kind`` holds a finished, intact build (loading reuses it)."""
    return library_fault(kind, build_folder.build_directory(kind)) is None


def _import_library(kind: str, library: Path) -> ModuleType:
    """Import a library built earlier (by this clone or another with the same sources)."""
    spec = importlib.util.spec_from_file_location(f"talk_hf_{kind}", library)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def import_finished(kind: str, directory: Path) -> ModuleType | LibraryFault:
    """``kind``'s module imported from a finished build in ``directory``, or why there is none to
    import.  Takes no lock and writes nothing."""
    fault = library_fault(kind, directory)
    if fault is not None:
        return fault
    try:
        return _import_library(kind, library_path(kind, directory))
    except ImportError as error:
        return LibraryFault(FaultCause.NOT_IMPORTABLE, f"does not import ({error})")
