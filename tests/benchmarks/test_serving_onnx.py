"""_serving_onnx.py: a model's float32 and int8 ONNX rows come from one export, and quantizing the int8
row's copy leaves the float32 row's graphs as they were.  Export and quantization are stand-ins here
(the real ones run end to end in test_bench_serving.py and test_bleu_serving.py)."""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import _serving_onnx  # noqa: E402


def test_the_int8_row_quantizes_a_copy_of_the_models_one_export(monkeypatch):
    exported = []

    def export_onnx(model, folder):
        exported.append(model)
        (Path(folder) / "decoder.onnx").write_text("float32")

    def quantize_exported(folder):
        (Path(folder) / "decoder.onnx").write_text("int8")

    monkeypatch.setattr(_serving_onnx, "export_onnx", export_onnx)
    monkeypatch.setattr(_serving_onnx, "quantize_exported", quantize_exported)
    model, other_model = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)

    float32 = _serving_onnx.exported_copy(model)
    int8 = _serving_onnx.exported_int8_copy(model)
    assert exported == [model]
    assert int8.folder != float32.folder
    assert (float32.folder / "decoder.onnx").read_text() == "float32"
    assert (int8.folder / "decoder.onnx").read_text() == "int8"
    assert _serving_onnx.exported_copy(model).folder == float32.folder  # still the one export

    other_int8 = _serving_onnx.exported_int8_copy(other_model)  # the int8 row first: its export is made then
    assert exported == [model, other_model]
    assert (other_int8.folder / "decoder.onnx").read_text() == "int8"
    assert (_serving_onnx.exported_copy(other_model).folder / "decoder.onnx").read_text() == "float32"
    assert exported == [model, other_model]
