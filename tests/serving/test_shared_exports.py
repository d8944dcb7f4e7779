"""Under pytest-xdist the workers share one folder of exports (conftest.py): a model exported by one
session is read back by another from its record, not exported again."""

import pytest

from . import exported
from .exported import SharedExports


class Exported(Exception):
    """Raised by a stand-in for the export: the model was being exported."""


def _exporting(*args, **kwargs):
    raise Exported


def test_a_second_session_reads_the_first_sessions_export(shared_exports, monkeypatch):
    made = shared_exports("dynamic-lm")
    monkeypatch.setattr(exported, "export_onnx", _exporting)
    monkeypatch.setattr(exported, "end_token", _exporting)
    read = SharedExports(shared_exports.root)("dynamic-lm")
    assert (read.folder, read.eos, read.exported_files) == (made.folder, made.eos, made.exported_files)
    assert read.ids.equal(made.ids) and read.mask.equal(made.mask)


def test_a_folder_without_its_record_is_exported(tmp_path, monkeypatch):
    """Only the record says an export is finished: a folder left by a session that stopped midway is
    exported over."""
    (tmp_path / "dynamic-lm").mkdir()
    (tmp_path / "dynamic-lm" / "encoder.onnx").write_text("cut short")
    monkeypatch.setattr(exported, "export_onnx", _exporting)
    with pytest.raises(Exported):
        SharedExports(tmp_path)("dynamic-lm")
