"""An export folder's files are moved in all or nothing as far as a reader can tell (`folder_writes.publish`):
a quantization or export that stops while renaming its files in (a failed rename, a killed process) leaves a
note that makes the runner refuse the folder, naming what to run again, and `quantize_exported` run again
moves the rest in; quantizing logs no advice of ONNX Runtime's to pre-process the graphs.

The tests use the session's export of the tiny DynamicConv encoder-decoder (`exported.SharedExports`); each
test damages, quantizes or publishes into a copy of it.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import pytest

from talk_hf.export import OnnxGenerator, quantize_exported
from talk_hf.export import int8 as export_int8
from talk_hf.export.folder_writes import STAGING_PREFIX, publish, staging_folder
from talk_hf.export.runner_checks import MANIFEST_NAME, MOVING_IN
from talk_hf.onnx import ORTModelForSeq2SeqLM
from talk_hf.quiet_imports import dropping_records

from .exported import SharedExport

pytest.importorskip("onnxruntime")

GRAPHS = ["decoder_step.onnx", "encoder.onnx"]  # the graphs quantize_exported moves in, in this order


@pytest.fixture(scope="module")
def exported(shared_exports) -> SharedExport:
    """The session's float32 export (its folder is never changed: tests damage copies)."""
    return shared_exports("dynamic-seq2seq")


@pytest.fixture(scope="module")
def quantized(exported, tmp_path_factory) -> Path:
    """A copy of the export quantized without interruption."""
    folder = exported.copy(tmp_path_factory.mktemp("int8") / "export")
    quantize_exported(folder)
    return folder


def _contents(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def _stop_at(monkeypatch, name: str, error: BaseException) -> list[str]:
    """Make ``os.replace`` raise ``error`` when it would move a file called ``name`` into place; returns the
    names of the files moved before that."""
    replace, moved = os.replace, []

    def stopping(source, target):
        if Path(target).name == name:
            raise error
        replace(source, target)
        moved.append(Path(target).name)

    monkeypatch.setattr(os, "replace", stopping)
    return moved


@pytest.mark.parametrize("stop", ["rename-fails", "killed"])
def test_an_interrupted_quantization_is_refused_then_finished(exported, quantized, tmp_path, monkeypatch, stop):
    """The rename of encoder.onnx fails (or the process is interrupted there, as a kill leaves it) after
    decoder_step.onnx was moved in: the folder holds an int8 step beside the float32 encoder and manifest,
    and every reader refuses it, naming the fix; quantize_exported then finishes it into the folder an
    uninterrupted quantization gives."""
    folder = exported.copy(tmp_path / "export")
    error = OSError("disk gone") if stop == "rename-fails" else KeyboardInterrupt()
    moved = _stop_at(monkeypatch, "encoder.onnx", error)
    with pytest.raises(type(error)) as raised:
        quantize_exported(folder)
    if stop == "rename-fails":
        assert raised.match(
            r"moving encoder.onnx into .* failed \(disk gone\), so the folder holds some new files beside old ones and "
            r"is refused until you run talk_hf.export.quantize_exported\(.*\) again"
        )
    monkeypatch.undo()
    assert moved == [MOVING_IN, "decoder_step.onnx"]
    assert (folder / "decoder_step.onnx").read_bytes() == (quantized / "decoder_step.onnx").read_bytes()
    assert "int8" not in json.loads((folder / MANIFEST_NAME).read_text())  # the mixed folder
    half_written = r"is half written: .* so its graphs may not be its manifest's: run talk_hf.export.quantize_exported"
    with pytest.raises(ValueError, match=half_written):
        OnnxGenerator(folder)
    with pytest.raises(ValueError, match=half_written):
        ORTModelForSeq2SeqLM.from_pretrained(folder)
    assert quantize_exported(folder) == GRAPHS
    assert _contents(folder) == _contents(quantized)  # no note, no staging folder left
    with pytest.raises(ValueError, match="is already int8"):
        quantize_exported(folder)


def test_a_quantization_whose_staged_files_are_lost_cannot_be_finished(exported, tmp_path, monkeypatch):
    folder = exported.copy(tmp_path / "export")
    _stop_at(monkeypatch, "encoder.onnx", OSError("disk gone"))
    with pytest.raises(OSError):
        quantize_exported(folder)
    monkeypatch.undo()
    (staging,) = [path for path in folder.iterdir() if path.name.startswith(STAGING_PREFIX)]
    shutil.rmtree(staging)
    with pytest.raises(ValueError, match=r"some of them are gone, so the folder cannot be finished: export the model"):
        quantize_exported(folder)


def test_an_interrupted_export_names_the_export_and_a_new_one_replaces_it(exported, tmp_path, monkeypatch):
    """An export's files moved in by `publish` (as export_onnx does, here without tracing again): stopped
    after the first, the runner names the export to run again; the next export's publish supersedes the note
    and deletes the stopped one's staging folder."""
    folder, names = exported.copy(tmp_path / "export"), sorted(GRAPHS + [MANIFEST_NAME])
    _stop_at(monkeypatch, "encoder.onnx", OSError("disk gone"))
    with (
        pytest.raises(OSError, match=r"refused until you export the model again \(python -m talk_hf.export"),
        staging_folder(folder) as staging,
    ):
        for name in names:
            shutil.copyfile(exported.folder / name, staging / name)
        publish(staging, folder, names)
    monkeypatch.undo()
    with pytest.raises(
        ValueError, match=r"is half written: .*: export the model again \(python -m talk_hf.export MODEL_DIR"
    ):
        OnnxGenerator(folder)
    with staging_folder(folder) as staging:
        for name in names:
            shutil.copyfile(exported.folder / name, staging / name)
        publish(staging, folder, names)
    assert not [path for path in folder.iterdir() if path.name.startswith(STAGING_PREFIX) or path.name == MOVING_IN]
    OnnxGenerator(folder)


def test_a_damaged_note_is_refused(exported, tmp_path):
    folder = exported.copy(tmp_path / "export")
    (folder / MOVING_IN).write_text('{"staging": "../elsewhere", "files": ["encoder.onnx"], "writer": "export"}')
    before = _contents(folder)
    with pytest.raises(ValueError, match=r"is half written: .*: export the model again \(python -m talk_hf.export"):
        OnnxGenerator(folder)
    with pytest.raises(ValueError, match=f"{MOVING_IN} is damaged .*: export the model again"):
        quantize_exported(folder)
    assert _contents(folder) == before


def test_quantizing_logs_no_preprocessing_advice(exported, tmp_path, caplog):
    """ONNX Runtime advises pre-processing at every quantize_dynamic; only that message is dropped."""
    with caplog.at_level(logging.WARNING):
        quantize_exported(exported.copy(tmp_path / "export"))
        with dropping_records(logging.getLogger(), export_int8._is_preprocessing_advice):
            logging.warning("%s (another message of the root logger)", "kept")
    messages = [record.getMessage() for record in caplog.records]
    assert not [message for message in messages if export_int8.PREPROCESSING_ADVICE in message]
    assert "kept (another message of the root logger)" in messages
