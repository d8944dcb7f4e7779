"""ONNX export of the models (TaLK, DynamicConv, LightConv, SliceNet, and any registered family) for
serving engines: the encoder (encoder-decoders) or a whole prompt (causal LMs) and one decoding step,
traced from the model's own forward with the fixed-size state as explicit inputs and outputs
(`export_onnx`, `traced_forward`), and a runner that generates from the exported files with ONNX
Runtime and numpy only (`OnnxGenerator`).  `talk_hf.onnx` loads an exported folder as a transformers
model that ``generate`` and ``pipeline`` drive.  CLI: ``python -m talk_hf.export``.
"""

from .graphs import check_exportable, trace_graphs
from .int8 import quantize_exported
from .onnx_files import export_onnx
from .runner import OnnxGenerator
from .runner_checks import read_manifest
from .traced_forward import DecodingStepGraph, EncoderGraph, PromptGraph, graph_layout
