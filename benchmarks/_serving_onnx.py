"""Our models exported to ONNX and run by ONNX Runtime, as rows of `bench_serving.py`.

`exported_copy` exports a model with `talk_hf.export.export_onnx` (the default dynamo exporter) into a
temporary folder and returns an `OnnxRuntimeSystem` over it; `exported_int8_copy` also quantizes both
graphs (`talk_hf.export.quantize_exported`: ONNX Runtime's dynamic int8, as ``--int8`` does).  The runner
(`talk_hf.export.OnnxGenerator`) decodes with numpy around the sessions, without talk_hf's model code.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

import numpy as np

from talk_hf.export import OnnxGenerator, check_exportable, export_onnx, quantize_exported


def exportable(model) -> bool:
    """Whether `export_onnx` takes ``model`` (every registered encoder-decoder does; a new family may not)."""
    try:
        check_exportable(model)
    except (TypeError, ValueError):
        return False
    return True


class OnnxRuntimeSystem:
    """An exported model folder and one `OnnxGenerator` per thread count (ONNX Runtime fixes its
    threads when a session is made)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.generators: dict[int, OnnxGenerator] = {}

    def generator(self, threads: int) -> OnnxGenerator:
        if threads not in self.generators:
            self.generators[threads] = OnnxGenerator(self.folder, threads=threads)
        return self.generators[threads]


def _export_folder() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="bench_serving_onnx_"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def exported_copy(model) -> OnnxRuntimeSystem:
    """``model`` exported to ONNX (float32), run by ONNX Runtime."""
    folder = _export_folder()
    export_onnx(model, folder)
    return OnnxRuntimeSystem(folder)


def exported_int8_copy(model) -> OnnxRuntimeSystem:
    """``model`` exported to ONNX with both graphs' weights in int8 (`talk_hf.export.quantize_exported`:
    ONNX Runtime's dynamic quantization)."""
    folder = _export_folder()
    export_onnx(model, folder)
    quantize_exported(folder)
    return OnnxRuntimeSystem(folder)


def onnx_runtime_generate(system: OnnxRuntimeSystem, batch, setting) -> list[list[int]]:
    """`OnnxGenerator.generate` of exactly ``new_tokens`` tokens per sentence (without the start token)."""
    tokens = system.generator(setting.threads).generate(
        batch.input_ids.numpy(),
        batch.attention_mask.numpy(),
        max_new_tokens=setting.new_tokens,
        min_new_tokens=setting.new_tokens,
        num_beams=setting.beams,
    )
    return np.asarray(tokens)[:, 1:].tolist()
