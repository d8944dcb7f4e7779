"""Writing the files and folders of a run so that a kill or a power cut at any moment leaves the
previous complete version or the new one, never a mix: each is written beside its final name,
flushed to disk (`fsync`) and renamed into place.
"""

import json
import os
import shutil
from pathlib import Path


def flush_to_disk(path):
    """`fsync` the file or folder `path`: its bytes, or a folder's entries (the renames into it),
    are on the disk when this returns, not only in the system's cache."""
    if os.name == "nt" and Path(path).is_dir():
        return  # Windows opens no folder to flush it (NTFS journals the renames)
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def flush_tree(folder):
    """`flush_to_disk` every file and folder under `folder`, then `folder` itself."""
    folder = Path(folder)
    for path in sorted(folder.rglob("*"), key=lambda p: (p.is_dir(), -len(p.parts))):  # files, then deepest folders
        flush_to_disk(path)
    flush_to_disk(folder)


def write_text_atomically(path, text):
    """Write `text` beside `path`, flush it and rename it into place: a kill or a power cut leaves the
    old or the new file."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text)
        flush_to_disk(tmp)
    except Exception:  # a full disk: no partial file is left behind
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
    flush_to_disk(path.parent)


def write_json(path, data):
    """`data` as indented JSON into `path`, atomically."""
    write_text_atomically(path, json.dumps(data, indent=1) + "\n")


def append_json_line(path, record):
    """Append `record` as one line, starting a new line if a kill left the last one unfinished."""
    path = Path(path)
    torn = path.exists() and path.stat().st_size > 0 and not path.read_bytes().endswith(b"\n")
    with open(path, "a") as f:
        f.write(("\n" if torn else "") + json.dumps(record) + "\n")
    flush_to_disk(path)


def replace_dir(tmp, final):
    """Move the complete folder `tmp` to `final`, keeping the previous `final` until that worked;
    `tmp`'s files are on the disk before the first rename, and the renames when this returns.

    A `final` (or a `final.old`) that is a symbolic link is moved and removed as the link itself:
    what it points to is never written, and no link is left behind (`remove_entry`)."""
    tmp, final = Path(tmp), Path(final)
    old = final.with_name(final.name + ".old")
    flush_tree(tmp)
    if os.path.lexists(final):
        remove_entry(old)
        os.replace(final, old)
    os.replace(tmp, final)
    flush_to_disk(final.parent)
    remove_entry(old)


def remove_entry(path):
    """Delete the folder, file or symbolic link `path` if there is one. A link is removed itself,
    never what it points to (nor anything under it); a folder with everything in it."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


def existing_dir(path):
    """`path`, or `path.old` when a run died between the two renames of `replace_dir`; else None."""
    for candidate in (Path(path), Path(str(path) + ".old")):
        if candidate.is_dir():
            return candidate
    return None
