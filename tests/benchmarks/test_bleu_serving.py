"""bleu_serving.py end to end on a tiny untrained model and a few test sentences: every system and beam
width is scored, PyTorch float32 is the tokens' reference, ONNX Runtime float32 reproduces it."""

import json
import subprocess
import sys

import pytest

from ..examples.conftest import MULTI30K, requires_data
from ..examples.test_trainer_scripts import tiny_checkpoint
from .conftest import BENCHMARKS

SYSTEMS = ("PyTorch float32", "PyTorch int8", "ONNX Runtime float32", "ONNX Runtime int8")

pytestmark = requires_data


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    from common.data import load_columns

    folder = tmp_path_factory.mktemp("bleu_serving")
    pairs = load_columns(MULTI30K, "train", ["de", "en"], limit=100)
    model = tiny_checkpoint(
        folder / "model", "talk", pairs["de"] + pairs["en"], True, kind="bpe", vocab_size=300, add_eos=True
    )
    out = folder / "bleu.json"
    command = [sys.executable, "bleu_serving.py", str(model), "--data_dir", str(MULTI30K), "--limit", "6"]
    command += ["--batch_size", "4", "--beams", "1", "2", "--threads", "1", "--out", str(out)]
    subprocess.run(command, cwd=BENCHMARKS, check=True, capture_output=True)
    return json.loads(out.read_text())


def test_every_system_is_scored_at_every_beam_width(report):
    assert report["data"]["sentences"] == 6
    assert report["settings"]["systems"] == list(SYSTEMS)
    assert set(report["results"]) == {f"{name}, beams {beams}" for name in SYSTEMS for beams in (1, 2)}
    for measured in report["results"].values():
        assert 0 <= measured["bleu"] <= 100
        assert 0 <= measured["same_tokens_as_float32"] <= 1
        assert len(measured["examples"]) == 3


def test_onnx_runtime_float32_translates_as_pytorch_float32(report):
    for beams in (1, 2):
        assert report["results"][f"PyTorch float32, beams {beams}"]["same_tokens_as_float32"] == 1
        assert report["results"][f"ONNX Runtime float32, beams {beams}"]["same_tokens_as_float32"] == 1
