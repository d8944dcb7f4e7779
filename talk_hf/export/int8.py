"""int8 of an exported folder: ONNX Runtime's dynamic quantization of its graphs, in place.

``onnxruntime.quantization.quantize_dynamic`` stores every MatMul/Gemm weight in int8 (one scale per
tensor) and quantizes the activations at each call (``DynamicQuantizeLinear`` + ``MatMulInteger``);
the window sums and the convolutions stay float32 (ONNX Runtime's CPU provider has no
``ConvInteger`` for int8 weights: a ``conv1d`` of the model's forward, such as LightConv's encoder or
SliceNet's regular convolutions over a source, keeps its float weights), and ``beam_candidates.onnx``,
which has no weights, is left as it is.  The manifest records it (``"int8"``), and a folder already quantized is refused:
quantize a float32 export.

One scale per tensor: ``per_channel=True`` made a decoding step slower for a small gain in accuracy,
and ``reduce_range=True`` was less accurate at the same speed (docs/serving.md, "Exported to ONNX";
the speed of the int8 export: benchmarks/README.md, "Serving against CTranslate2").
"""

from __future__ import annotations

import json
from pathlib import Path

from .folder_writes import publish, staging_folder
from .runner_checks import CANDIDATES, MANIFEST_NAME, confined_file, read_manifest


def quantize_exported(folder: str | Path) -> list[str]:
    """Quantize every graph with weights of the exported ``folder`` to int8 weights, all or nothing.

    The manifest is checked first (each ``files`` entry a file of the folder, `read_manifest`); every
    graph is quantized into a staging folder inside ``folder``, and only when all are, renamed into
    place with the manifest (which records ``"int8"``) last.  On any error the folder stays as it was.

    Returns:
        The quantized graphs' file names.

    Raises:
        ValueError: the folder is already int8; a graph is not a valid ONNX model (naming its file and
            manifest field).
        FileNotFoundError / ValueError: no valid export in ``folder`` (`read_manifest`).
        ImportError: onnxruntime's quantization tools are missing.
    """
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    folder = Path(folder)
    manifest = read_manifest(folder)
    if manifest.get("int8"):
        raise ValueError(f"{folder} is already int8 ({MANIFEST_NAME} says so): quantize a float32 export")
    graphs = {role: name for role, name in manifest["files"].items() if role != CANDIDATES}
    with staging_folder(folder) as staging:
        for role, name in graphs.items():
            graph = confined_file(folder, f"files.{role}", name)
            try:
                convolutions = [node.name for node in onnx.load(graph).graph.node if node.op_type == "Conv"]
                quantize_dynamic(graph, staging / name, weight_type=QuantType.QInt8, nodes_to_exclude=convolutions)
            except Exception as error:  # onnx's DecodeError / ValidationError, ONNX Runtime's errors: one message
                raise ValueError(
                    f"{graph} ({MANIFEST_NAME} field files.{role}) could not be quantized, so {folder} was left as it "
                    f"was: {type(error).__name__}: {str(error).strip().rstrip('.')}. Re-export the model (python -m talk_hf.export)"
                ) from error
        manifest["int8"] = {"method": "onnxruntime.quantization.quantize_dynamic", "weight_type": "QInt8"}
        (staging / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
        publish(staging, folder, [*graphs.values(), MANIFEST_NAME])
    return list(graphs.values())
