"""int8 of an exported folder: ONNX Runtime's dynamic quantization of its graphs, in place.

``onnxruntime.quantization.quantize_dynamic`` stores every MatMul/Gemm weight in int8 (one scale per
tensor) and quantizes the activations at each call (``DynamicQuantizeLinear`` + ``MatMulInteger``);
the window sums and the convolutions stay float32 (ONNX Runtime's CPU provider has no
``ConvInteger`` for int8 weights: a ``conv1d`` of the model's forward, such as LightConv's encoder or
SliceNet's regular convolutions over a source, keeps its float weights), and ``beam_candidates.onnx``,
which has no weights, is left as it is.  The manifest records it (``"int8"``), and a folder already quantized is refused:
quantize a float32 export.  The graphs and the manifest are renamed in by `folder_writes.publish`: a quantization
stopped midway (a killed process) leaves a folder that the runner refuses, and that this function, run again,
finishes.

One scale per tensor: ``per_channel=True`` made a decoding step slower for a small gain in accuracy,
and ``reduce_range=True`` was less accurate at the same speed (docs/serving.md, "Exported to ONNX";
the speed of the int8 export: benchmarks/README.md, "Serving against CTranslate2").
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from ..quiet_imports import dropping_records
from .folder_writes import finish_publish, publish, staging_folder
from .runner_checks import CANDIDATES, MANIFEST_NAME, confined_file, read_manifest

# What ONNX Runtime logs (on the root logger) at every quantize_dynamic of a graph without its pre-processing
# (onnxruntime.quantization.shape_inference.quant_pre_process: shape inference and graph optimisation).  On
# an exported DynamicConv encoder-decoder that pre-processing left the same nodes quantized with the same int8
# weights (only the graphs' shape annotations differed), so it is not run and this advice alone is not shown.
PREPROCESSING_ADVICE = "Please consider to run pre-processing before quantization"


def quantize_exported(folder: str | Path) -> list[str]:
    """Quantize every graph with weights of the exported ``folder`` to int8 weights, all or nothing.

    The manifest is checked first (each ``files`` entry a file of the folder, `read_manifest`); every
    graph is quantized into a staging folder inside ``folder``, and only when all are, renamed into
    place with the manifest (which records ``"int8"``) last.  On any error before the renames the folder
    stays as it was; a quantization (or export) that stopped during them is finished first
    (`folder_writes.finish_publish`), a quantization then returning as done.

    Returns:
        The quantized graphs' file names.

    Raises:
        ValueError: the folder is already int8; a graph is not a valid ONNX model (naming its file and
            manifest field); an unfinished folder cannot be finished (`folder_writes.finish_publish`).
        OSError: a rename failed (the folder is refused until this function runs again).
        FileNotFoundError / ValueError: no valid export in ``folder`` (`read_manifest`).
        ImportError: onnxruntime's quantization tools are missing.
    """
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    folder = Path(folder)
    finished = finish_publish(folder)
    manifest = read_manifest(folder)
    graphs = {role: name for role, name in manifest["files"].items() if role != CANDIDATES}
    if manifest.get("int8") and finished:  # the quantization that stopped midway
        return list(graphs.values())
    if manifest.get("int8"):
        raise ValueError(f"{folder} is already int8 ({MANIFEST_NAME} says so): quantize a float32 export")
    with staging_folder(folder) as staging:
        for role, name in graphs.items():
            graph = confined_file(folder, f"files.{role}", name)
            try:
                convolutions = [node.name for node in onnx.load(graph).graph.node if node.op_type == "Conv"]
                with dropping_records(logging.getLogger(), _is_preprocessing_advice):
                    quantize_dynamic(graph, staging / name, weight_type=QuantType.QInt8, nodes_to_exclude=convolutions)
            except Exception as error:  # onnx's DecodeError / ValidationError, ONNX Runtime's errors: one message
                raise ValueError(
                    f"{graph} ({MANIFEST_NAME} field files.{role}) could not be quantized, so {folder} was left as it "
                    f"was: {type(error).__name__}: {str(error).strip().rstrip('.')}. Re-export the model (python -m talk_hf.export)"
                ) from error
        manifest["int8"] = {"method": "onnxruntime.quantization.quantize_dynamic", "weight_type": "QInt8"}
        (staging / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
        publish(staging, folder, [*graphs.values(), MANIFEST_NAME], writer="quantize_exported")
    return list(graphs.values())


def _is_preprocessing_advice(record: logging.LogRecord) -> bool:
    return record.getMessage().startswith(PREPROCESSING_ADVICE)
