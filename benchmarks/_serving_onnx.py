"""Our models exported to ONNX and run by ONNX Runtime, as rows of `bench_serving.py`.

`exported_copy` exports a model with `talk_hf.export.export_onnx` (the default dynamo exporter) into a
temporary folder and returns an `OnnxRuntimeSystem` over it; `exported_int8_copy` quantizes a copy of
that folder's graphs (`talk_hf.export.quantize_exported`: ONNX Runtime's dynamic int8, as ``--int8``
does).  Each model object is exported once per process, however many rows use it: the export is most
of the time these rows take to prepare.  The runner (`talk_hf.export.OnnxGenerator`) decodes with
numpy around the sessions, without talk_hf's model code; `exported_model_copy` and
`exported_model_int8_copy` load the same folders as `talk_hf.onnx.ORTModelForSeq2SeqLM`, which
transformers' ``generate`` drives as it drives the PyTorch model.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import weakref
from collections.abc import Callable
from pathlib import Path

import numpy as np

from talk_hf.export import OnnxGenerator, export_onnx, quantize_exported
from talk_hf.onnx import ORTModelForSeq2SeqLM


class OnnxRuntimeSystem:
    """An exported model folder and, per thread count, what ``load(folder, threads=...)`` makes of it
    (an `OnnxGenerator`, or an ``ORTModelForSeq2SeqLM`` through its ``from_pretrained``): ONNX Runtime
    fixes its threads when a session is made."""

    def __init__(self, folder: Path, load: Callable = OnnxGenerator):
        self.folder = folder
        self.load = load
        self.generators: dict[int, object] = {}

    def generator(self, threads: int):
        if threads not in self.generators:
            self.generators[threads] = self.load(self.folder, threads=threads)
        return self.generators[threads]


def _export_folder() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="bench_serving_onnx_"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


# The float32 export's folder of each model object exported so far (never changed once written).
_float32_exports: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _float32_export(model) -> Path:
    """The folder of ``model``'s float32 export: exported on the first call for this model object."""
    if model not in _float32_exports:
        folder = _export_folder()
        export_onnx(model, folder)
        _float32_exports[model] = folder
    return _float32_exports[model]


def exportable(model) -> bool:
    """Whether `export_onnx` takes ``model`` (every registered encoder-decoder does; a new family may not).
    Answered by exporting it (`_float32_export`, kept for its rows): tracing is most of an export, so a
    separate check would trace it twice."""
    try:
        _float32_export(model)
    except (TypeError, ValueError):
        return False
    return True


def exported_copy(model) -> OnnxRuntimeSystem:
    """``model`` exported to ONNX (float32), run by ONNX Runtime."""
    return OnnxRuntimeSystem(_float32_export(model))


# The int8 folder of each model object quantized so far.
_int8_exports: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _int8_export(model) -> Path:
    """A copy of ``model``'s float32 export with its graphs' weights in int8, made on the first call."""
    if model not in _int8_exports:
        folder = _export_folder()
        shutil.copytree(_float32_export(model), folder, dirs_exist_ok=True)
        quantize_exported(folder)
        _int8_exports[model] = folder
    return _int8_exports[model]


def exported_int8_copy(model) -> OnnxRuntimeSystem:
    """``model`` exported to ONNX with both graphs' weights in int8 (`talk_hf.export.quantize_exported`:
    ONNX Runtime's dynamic quantization of a copy of the float32 export)."""
    return OnnxRuntimeSystem(_int8_export(model))


def exported_model_copy(model) -> OnnxRuntimeSystem:
    """``model``'s float32 export loaded as ``talk_hf.onnx.ORTModelForSeq2SeqLM`` (its ``generate``)."""
    return OnnxRuntimeSystem(_float32_export(model), ORTModelForSeq2SeqLM.from_pretrained)


def exported_model_int8_copy(model) -> OnnxRuntimeSystem:
    """``model``'s int8 export loaded as ``talk_hf.onnx.ORTModelForSeq2SeqLM``."""
    return OnnxRuntimeSystem(_int8_export(model), ORTModelForSeq2SeqLM.from_pretrained)


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
