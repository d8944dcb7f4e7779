"""ONNX export of the models (TaLK, DynamicConv, LightConv, SliceNet) for serving engines: the encoder
and one decoding step with the fixed-size state as explicit inputs and outputs (`export_onnx`), and a
runner that generates from the exported files with ONNX Runtime and numpy only (`OnnxGenerator`).
CLI: ``python -m talk_hf.export``.
"""

from .decoder_step import DecoderStepForExport, EncoderForExport
from .graphs import check_exportable, export_graphs
from .int8 import quantize_exported
from .onnx_files import export_onnx
from .runner import OnnxGenerator
from .runner_checks import read_manifest
from .slicenet_step import SliceNetEncoderForExport, SliceNetStepForExport
