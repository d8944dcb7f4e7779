"""_serving_onnx.py: a model's float32 and int8 ONNX rows (the runner's and the ORTModel's) come from one
export and one quantization, and quantizing the int8 rows' copy leaves the float32 rows' graphs as they
were.  Export and quantization are stand-ins here
(the real ones run end to end in test_bench_serving.py and test_bleu_serving.py)."""

from pathlib import Path

import _serving_onnx
import torch


def test_the_int8_row_quantizes_a_copy_of_the_models_one_export(monkeypatch):
    exported = []

    def export_onnx(model, folder):
        exported.append(model)
        (Path(folder) / "decoder.onnx").write_text("float32")

    quantized = []

    def quantize_exported(folder):
        quantized.append(folder)
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
    model_rows = _serving_onnx.exported_model_copy(model), _serving_onnx.exported_model_int8_copy(model)
    assert [row.folder for row in model_rows] == [float32.folder, int8.folder]
    assert [row.load for row in model_rows] == [_serving_onnx.ORTModelForSeq2SeqLM.from_pretrained] * 2
    assert exported == [model] and quantized == [int8.folder]

    other_int8 = _serving_onnx.exported_int8_copy(other_model)  # the int8 row first: its export is made then
    assert exported == [model, other_model]
    assert (other_int8.folder / "decoder.onnx").read_text() == "int8"
    assert (_serving_onnx.exported_copy(other_model).folder / "decoder.onnx").read_text() == "float32"
    assert exported == [model, other_model]
