"""Atomic folders and files: a kill or a power cut leaves the old or the new version."""

import os
from pathlib import Path

import pytest
from common.atomic_files import existing_dir, replace_dir, write_json


def test_replace_dir_never_leaves_nothing(tmp_path):
    final, tmp = tmp_path / "last", tmp_path / "last.tmp"
    tmp.mkdir()
    (tmp / "v").write_text("1")
    replace_dir(tmp, final)
    tmp.mkdir()
    (tmp / "v").write_text("2")
    replace_dir(tmp, final)
    assert (final / "v").read_text() == "2" and not tmp.exists() and existing_dir(final) == final
    final.rename(tmp_path / "last.old")  # as if killed between the two renames
    assert (existing_dir(final) / "v").read_text() == "2"
    assert existing_dir(tmp_path / "never") is None


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names open files through /proc")
def test_saves_are_on_the_disk_before_they_are_renamed_into_place(tmp_path, monkeypatch):
    """A power cut may lose what the system still caches: every file of a new folder, and the new
    folder itself, is flushed (fsync) before the rename that publishes it, and the parent folder (the
    rename) before `replace_dir` returns; a file written atomically likewise."""
    events = []
    flush, replace = os.fsync, os.replace
    monkeypatch.setattr(
        os, "fsync", lambda fd: events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"))) or flush(fd)
    )
    monkeypatch.setattr(os, "replace", lambda a, b: events.append(("replace", str(a), str(b))) or replace(a, b))
    final, tmp = tmp_path / "state", tmp_path / "state.tmp"
    (tmp / "sub").mkdir(parents=True)
    for name in ("model.bin", "sub/optimizer.bin"):
        (tmp / name).write_text(name)
    (final / "sub").mkdir(parents=True)  # an earlier save, moved aside first
    replace_dir(tmp, final)
    published = events.index(("replace", str(tmp), str(final)))
    flushed_before = {event[1] for event in events[:published] if event[0] == "fsync"}
    assert {str(tmp / "model.bin"), str(tmp / "sub" / "optimizer.bin"), str(tmp / "sub"), str(tmp)} <= flushed_before
    assert ("fsync", str(tmp_path)) in events[published:]
    events.clear()
    write_json(tmp_path / "args.json", {"lr": 1e-3})
    temporary = str(tmp_path / "args.json.tmp")
    assert events == [
        ("fsync", temporary),
        ("replace", temporary, str(tmp_path / "args.json")),
        ("fsync", str(tmp_path)),
    ]
