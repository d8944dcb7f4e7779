"""Saving a folder of a run (`state/`, `last/`, `best/`, `tokenizer/`) beside its final name and
renaming it into place; a save that fails removes its partial copy, and a full disk is said in
those words, with how much space a save needs.

A full disk shows in many forms: `OSError` 28 from Python, `[enforce fail at inline_container.cc]`
from `torch.save`, "os error 28" from safetensors. A failed save counts as a full disk when its
error carries ENOSPC or EDQUOT, or when the disk has less than `FULL_BELOW` bytes left once it failed.
"""

import errno
import os
import shutil
from contextlib import contextmanager
from pathlib import Path

from accelerate.utils import gather_object

from .atomic_files import existing_dir, remove_entry, replace_dir
from .messages import fail, first_line, warn

FULL_BELOW = 1 << 20  # bytes: a disk with less free space than this counts as full
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def save_folder(accelerator, final, write):
    """Call `write(tmp)` on every process to fill the folder `final.tmp`, then move it to `final`
    (`atomic_files.replace_dir`: the previous `final` stays until the new one is complete).

    When `write` fails on any process, the main process deletes `final.tmp` and every process
    raises: SystemExit saying how much space the save needs when the disk is full, otherwise
    the error itself (on the process that had it). `final` is left as it was.
    """
    final = Path(final)
    tmp = final.with_name(final.name + ".tmp")
    if accelerator.is_main_process:
        remove_entry(tmp)  # a link there is removed, never written through
        if final.is_symlink():
            warn(
                f"{final} is a symbolic link (to {os.readlink(final)}): the save replaces the link with the folder "
                "itself and leaves what the link points to as it is"
            )
    accelerator.wait_for_everyone()
    own_error, report = None, None
    try:
        write(tmp)
    except Exception as error:  # a full disk shows in many kinds
        own_error, report = error, (first_line(error), disk_is_full(error, final.parent))
    reports = [r for r in gather_object([report]) if r is not None]
    if reports:
        full = any(is_full for _, is_full in reports)
        message = no_space_message(final, tmp, reports[0][0]) if full and accelerator.is_main_process else None
        if accelerator.is_main_process:
            remove_entry(tmp)
        if full:
            fail(message or f"no space left on device while saving {final} (the main process says how much is needed)")
        if own_error is not None:
            raise own_error
        fail(f"saving {final} failed on another process: {reports[0][0]}")
    if accelerator.is_main_process:
        replace_dir(tmp, final)
    accelerator.wait_for_everyone()


def disk_is_full(error, folder):
    """Whether `error`, raised while writing into `folder`, comes of a full disk (see the module's docstring)."""
    while error is not None:
        if isinstance(error, OSError) and error.errno in NO_SPACE:
            return True
        error = error.__cause__ or error.__context__
    return shutil.disk_usage(folder).free < FULL_BELOW


def folder_bytes(folder):
    """The bytes of the files under `folder` (0 when there is none)."""
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file()) if Path(folder).is_dir() else 0


def megabytes(count):
    return f"{count / 1e6:,.1f} MB"


def no_space_message(final, tmp, error):
    """What a save of `final` that filled the disk while writing `tmp` says (before `tmp` is deleted)."""
    written, previous = folder_bytes(tmp), existing_dir(final)
    need = (
        f"about {megabytes(folder_bytes(previous))} free (the size of the previous save, which is kept until the "
        "new one is complete)"
        if previous is not None
        else f"more than the {megabytes(written)} it had written, free"
    )
    free = shutil.disk_usage(final.parent).free + written  # once the partial save is deleted
    return (
        f"no space left on device while saving {final} ({error}): the partial save {tmp} is deleted, and "
        f"{megabytes(free)} are free on that disk now. A save of {final.name}/ needs {need}. Free "
        "space on the disk (or give another --output_dir), then continue with --resume: the steps since the last "
        "save are trained again"
    )


@contextmanager
def full_disk_is_an_error(folder):
    """Turn an `OSError` of a full disk raised inside the block (a log line, a JSON file of the run
    folder `folder`) into SystemExit saying so; other errors pass unchanged."""
    try:
        yield
    except OSError as error:
        if error.errno not in NO_SPACE:
            raise
        free = shutil.disk_usage(folder).free if os.path.isdir(folder) else 0
        fail(
            f"no space left on device in {folder} ({first_line(error)}; {megabytes(free)} free): free space on the "
            "disk, then continue with --resume"
        )
