"""Writing an exported folder's files without touching anything else in it.

`check_replaceable` refuses to replace a file that no export wrote (the manifest lists what an export
wrote, so a previous export's folder can be exported into again) unless the caller asks to overwrite;
`remove_stale` deletes what a previous export wrote and the new one does not.
`staging_folder` and `publish` write every file into a hidden folder inside the target first and then
rename them into place, the manifest last: a failure before `publish` leaves the folder as it was, and
a rename replaces a symlink of the same name, never the file it points to.  While `publish` renames, a
note in the folder (``MOVING_IN``, written atomically first and removed last) lists the files and where
they come from: the runner refuses a folder holding it (`runner_checks.read_manifest`: its graphs may be
another export's than its manifest's), and `finish_publish` moves the rest in after a process was killed
or a rename failed midway.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .runner_checks import FORMAT, MANIFEST_NAME, MOVING_IN, finish_advice

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
    moved = (_moving_in(folder, refuse=False) or {}).get("files", [])  # an unfinished publish's files, some moved in
    return {name for name in [*written, *moved] if isinstance(name, str)} if isinstance(written, list) else set()


def check_replaceable(folder: Path, names: Iterable[str], overwrite: bool) -> None:
    """Refuse to write the files ``names`` into ``folder`` when that would replace a user's file.

    Raises:
        NotADirectoryError: ``folder`` is a file, or lies under one.
        IsADirectoryError: one of ``names`` is a folder in ``folder``.
        FileExistsError: one of ``names`` is in ``folder`` and no export wrote it (its manifest does not
            list it), unless ``overwrite``; the message names the files.
        PermissionError: ``folder`` (or the folder it would be created in) cannot be written, found
            before anything is traced or loaded (by making and removing a folder in it, as `staging_folder` does).
    """
    existing = next(path for path in (folder, *folder.parents) if path.exists())
    if not existing.is_dir():
        raise NotADirectoryError(f"{existing} is a file, so {folder} cannot be a folder: choose another output folder")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=existing))
    except OSError as error:
        raise PermissionError(
            f"{folder} cannot be written: {existing} refuses new files ({error.strerror}); choose another output "
            "folder, or make it writable"
        ) from None
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
        note = _moving_in(folder, refuse=False)
        if note is None or note["staging"] != staging.name:  # a publish that stopped midway keeps its files
            shutil.rmtree(staging, ignore_errors=True)


def publish(staging: Path, folder: Path, names: Iterable[str], writer: str = "export") -> None:
    """Rename the files ``names`` from ``staging`` into ``folder``, replacing those of the same names,
    the manifest last (a reader finds the new manifest only beside the new files).

    First the ``MOVING_IN`` note (the staging folder, the files in order, and the ``writer``,
    ``"export"`` or ``"quantize_exported"``, whose run again finishes a publish that stopped midway:
    `runner_checks.finish_advice`) goes into ``folder``, replacing an earlier unfinished publish's (whose
    staging folder is deleted); it is removed once every file is in.

    Raises:
        OSError: a rename failed; the message says what to run again.
    """
    order = sorted(names, key=lambda name: name == MANIFEST_NAME)
    earlier = _moving_in(folder, refuse=False)
    (staging / MOVING_IN).write_text(json.dumps({"staging": staging.name, "files": order, "writer": writer}))
    os.replace(staging / MOVING_IN, folder / MOVING_IN)
    if earlier is not None and earlier["staging"] != staging.name:
        shutil.rmtree(folder / earlier["staging"], ignore_errors=True)
    _move_in(staging, folder, order, writer)


def finish_publish(folder: Path) -> bool:
    """Move in the rest of the files of a `publish` into ``folder`` that stopped midway (its ``MOVING_IN``
    note), from its staging folder; False when there is none.

    Raises:
        ValueError: the note is damaged, or files it lists as not yet moved are gone from its staging
            folder: the folder cannot be finished, only written again (the message says how).
    """
    note = _moving_in(folder)
    if note is None:
        return False
    staging, files = folder / note["staging"], note["files"]
    left = [name for name in files if (staging / name).is_file()]
    if not staging.is_dir() or files[len(files) - len(left) :] != left:  # the files moved form a prefix
        raise ValueError(
            f"{folder / MOVING_IN} lists files that were being moved into {folder} from {staging}, but some of them "
            f"are gone, so the folder cannot be finished: export the model again (python -m talk_hf.export MODEL_DIR "
            f"{folder}), then quantize it if it was being quantized"
        )
    _move_in(staging, folder, left, note["writer"])
    shutil.rmtree(staging, ignore_errors=True)
    return True


def _move_in(staging: Path, folder: Path, names: list[str], writer: str) -> None:
    """Rename ``names`` from ``staging`` into ``folder`` in order, then remove the ``MOVING_IN`` note."""
    for name in names:
        try:
            os.replace(staging / name, folder / name)
        except OSError as error:
            raise OSError(
                f"moving {name} into {folder} failed ({error}), so the folder holds some new files beside old "
                f"ones and is refused until you {finish_advice(folder, writer)}"
            ) from error
    (folder / MOVING_IN).unlink()


def _moving_in(folder: Path, refuse: bool = True) -> dict | None:
    """The ``MOVING_IN`` note of ``folder``, or None without one.  A damaged note (not as `publish` writes
    it): ValueError, or None when not ``refuse``."""
    path = folder / MOVING_IN
    if not path.exists():
        return None
    try:
        note = json.loads(path.read_text())
    except (OSError, ValueError):
        note = None
    files = note.get("files") if isinstance(note, dict) else None
    if isinstance(files, list) and isinstance(note.get("writer"), str) and _plain_name(note.get("staging")):
        if note["staging"].startswith(STAGING_PREFIX) and all(_plain_name(name) for name in files):
            return note
    if refuse:
        raise ValueError(f"{path} is damaged (not as talk_hf writes it): export the model again into {folder}")
    return None


def remove_stale(folder: Path, previous: Iterable[str], names: Iterable[str]) -> None:
    """Delete the files of ``previous`` (a previous export's `previous_export_files`) that are not among
    ``names`` (the new export's), each a plain file name of ``folder`` (a symlink: the link itself)."""
    for stale in set(previous) - set(names):
        path = folder / stale
        if _plain_name(stale) and (path.is_symlink() or path.is_file()):
            path.unlink()


def _plain_name(name) -> bool:
    """Whether ``name`` is a file name in a folder: a string without folders, not ``.`` or ``..``."""
    return isinstance(name, str) and Path(name).name == name and name not in ("", ".", "..")
