"""Bad input to ``python -m talk_hf.convert fairseq``: each a one-paragraph error that names the file
and what was expected, a non-zero exit status and no traceback."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from talk_hf.convert.__main__ import main

FIXTURES = Path(__file__).parents[1] / "fixtures" / "fairseq"
EXPECTED = "Expected a fairseq checkpoint: the model.pt that fairseq writes with torch.save."
DAMAGED = "torch.load cannot read it: it is truncated, damaged, or not written by torch.save"


def _text_file(folder: Path) -> Path:
    path = folder / "notes.txt"
    path.write_text("a b c d\ne f g\n")  # torch.load alone: IndexError: pop from empty list
    return path


def _empty_file(folder: Path) -> Path:
    path = folder / "model.pt"
    path.touch()  # torch.load alone: EOFError
    return path


def _folder(folder: Path) -> Path:
    return folder


def _missing(folder: Path) -> Path:
    return folder / "no-such-model.pt"


@pytest.mark.parametrize(
    "make_path, message",
    [
        (_text_file, "is neither a zip archive nor a pickle, the formats torch.save writes (is it a text file?)"),
        (_empty_file, "is empty"),
        (_folder, "is a folder"),
        (_missing, "does not exist"),
    ],
)
def test_command_line_names_a_path_that_is_no_checkpoint(make_path, message, tmp_path, capsys):
    path = make_path(tmp_path)
    assert main(["fairseq", str(path), str(tmp_path / "out")]) == 1
    assert f"error: {path} {message}. {EXPECTED}" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_module_entry_point_exits_non_zero_without_a_traceback(tmp_path):
    """``python -m talk_hf.convert`` itself: the exit status and stderr of a real process."""
    path = _missing(tmp_path)
    command = [sys.executable, "-m", "talk_hf.convert", "fairseq", str(path), str(tmp_path / "out")]
    result = subprocess.run(
        command, capture_output=True, text=True, check=False, env={**os.environ, "HF_HUB_OFFLINE": "1"}
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert f"error: {path} does not exist. {EXPECTED}" in result.stderr
    assert not (tmp_path / "out").exists()


def _truncated(fixture: str):
    """The fixture's ``model.pt`` cut to half (zip format or fairseq 0.x's legacy pickle format)."""

    def write(path: Path) -> None:
        data = (FIXTURES / fixture / "model.pt").read_bytes()
        path.write_bytes(data[: len(data) // 2])

    return write


def _zip_of_something_else(path: Path) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("readme.txt", "not a checkpoint")


def _saved(contents):
    def write(path: Path) -> None:
        torch.save(contents, path)

    return write


@pytest.mark.parametrize(
    "write, message",
    [
        (_truncated("dynamicconv_glu_wmt_en_de_cfg"), "{path} is a zip archive, but " + DAMAGED),
        (_truncated("lightconv_iwslt_de_en_args"), "{path} is a pickle, but " + DAMAGED),
        (_zip_of_something_else, "{path} is a zip archive, but " + DAMAGED),
        (
            _saved({"weight": torch.zeros(2)}),
            "{path} is not a fairseq checkpoint: expected a dict with a 'model' state dict",
        ),
        (
            _saved({"model": {"encoder.embed_tokens.weight": "abc"}, "args": argparse.Namespace(arch="lightconv")}),
            "{path} is not a fairseq checkpoint: its 'model' state dict must map parameter names to tensors, but holds "
            "'encoder.embed_tokens.weight' (str)",
        ),
        (
            _saved({"model": {}, "args": "lightconv_iwslt_de_en"}),
            "{path}: the saved model arguments have no 'arch' (or '_name')",
        ),
        (
            _saved({"model": {}, "cfg": "model"}),
            "{path} holds no model arguments: neither 'args' nor 'cfg[\"model\"]' is set",
        ),
        (
            _saved({"model": {}, "args": argparse.Namespace(arch=5)}),
            "{path}: the saved 'arch' must be an architecture name (a string), got 5",
        ),
    ],
)
def test_damaged_or_foreign_checkpoints_are_named(write, message, tmp_path, capsys):
    path = tmp_path / "model.pt"
    write(path)
    assert main(["fairseq", str(path), str(tmp_path / "out")]) == 1
    assert f"error: {message.format(path=path)}" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_folder_holding_a_checkpoint_points_to_it(tmp_path, capsys):
    (tmp_path / "model.pt").touch()
    assert main(["fairseq", str(tmp_path), str(tmp_path / "out")]) == 1
    assert f"{tmp_path} is a folder (did you mean {tmp_path / 'model.pt'}?)" in capsys.readouterr().err


def test_an_output_that_is_a_file_is_refused(tmp_path, capsys):
    output = tmp_path / "out"
    output.touch()
    assert main(["fairseq", str(FIXTURES / "talkconv_glu_wmt_en_de_args" / "model.pt"), str(output)]) == 1
    assert f"error: {output} is a file: the output must be a folder (created if missing)" in capsys.readouterr().err
