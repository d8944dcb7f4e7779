"""Writing an exported folder's files without touching anything else in it.

`check_replaceable` refuses to replace a file that no export wrote (the manifest lists what an export
wrote, so a previous export's folder can be exported into again) unless the caller asks to overwrite;
`remove_stale` deletes what a previous export wrote and the new one does not.
`staging_folder` and `publish` write every file into a hidden folder inside the target first and then
rename them into place, the manifest last: a failure before `publish` leaves the folder as it was, and
a rename replaces a symlink of the same name, never the file it points to.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .runner_checks import FORMAT, MANIFEST_NAME

STAGING_PREFIX = ".talk_hf-staging-"


def previous_export_files(folder: Path) -> set[str]:
    """The file names an export recorded as written in ``folder``'s manifest (its ``written`` list; a manifest
    from before that field: its ``files``, the manifest and ``runner.py``); empty without a talk_hf-onnx manifest."""
    try:
        manifest = json.loads((folder / MANIFEST_NAME).read_text())
    except (OSError, ValueError):
        return set()
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        return set()
    written = manifest.get("written")
    if written is None:
        files = manifest.get("files")
        written = [*(files.values() if isinstance(files, dict) else []), MANIFEST_NAME, "runner.py"]
    return {name for name in written if isinstance(name, str)} if isinstance(written, list) else set()


def check_replaceable(folder: Path, names: Iterable[str], overwrite: bool) -> None:
    """Refuse to write the files ``names`` into ``folder`` when that would replace a user's file.

    Raises:
        NotADirectoryError: ``folder`` is a file, or lies under one.
        IsADirectoryError: one of ``names`` is a folder in ``folder``.
        FileExistsError: one of ``names`` is in ``folder`` and no export wrote it (its manifest does not
            list it), unless ``overwrite``; the message names the files.
    """
    existing = next(path for path in (folder, *folder.parents) if path.exists())
    if not existing.is_dir():
        raise NotADirectoryError(f"{existing} is a file, so {folder} cannot be a folder: choose another output folder")
    present = [name for name in names if (folder / name).exists() or (folder / name).is_symlink()]
    folders = [name for name in present if (folder / name).is_dir() and not (folder / name).is_symlink()]
    if folders:
        raise IsADirectoryError(f"{folder} holds the folders {folders}, where the export writes files: move them away")
    foreign = sorted(set(present) - previous_export_files(folder))
    if foreign and not overwrite:
        raise FileExistsError(
            f"{folder} holds {foreign}, which the export would replace, but no export wrote them (its {MANIFEST_NAME} "
            "does not list them): move them away, export into another folder, or pass overwrite=True (--overwrite) "
            "to replace them"
        )


@contextmanager
def staging_folder(folder: Path) -> Iterator[Path]:
    """A new hidden folder inside ``folder`` (the same file system, so renames out of it are atomic),
    deleted with whatever is left in it at the end."""
    staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=folder))
    try:
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def publish(staging: Path, folder: Path, names: Iterable[str]) -> None:
    """Rename the files ``names`` from ``staging`` into ``folder``, replacing those of the same names,
    the manifest last (a reader finds the new manifest only beside the new files)."""
    for name in sorted(names, key=lambda name: name == MANIFEST_NAME):
        os.replace(staging / name, folder / name)


def remove_stale(folder: Path, previous: Iterable[str], names: Iterable[str]) -> None:
    """Delete the files of ``previous`` (a previous export's `previous_export_files`) that are not among
    ``names`` (the new export's), each a plain file name of ``folder`` (a symlink: the link itself)."""
    for stale in set(previous) - set(names):
        path = folder / stale
        if Path(stale).name == stale and stale not in ("", ".", "..") and (path.is_symlink() or path.is_file()):
            path.unlink()
