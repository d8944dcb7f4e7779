"""Which modules a model exports as its graphs: `export_graphs`, and `check_exportable` for a yes or a reason.

Each family has its encoder and step modules (`decoder_step` for TaLK, DynamicConv and LightConv,
`slicenet_step` for SliceNet), which describe their graphs alike for `onnx_files`: the encoder's
``outputs`` and the step's ``source_inputs`` (names, each with the axis of its source length) and
the step's ``state_shapes`` ((history_size, channels) of each fixed-size history).
"""

from __future__ import annotations

from torch import nn

from ..models.conv_modeling import ConvForConditionalGeneration
from ..models.slicenet.modeling_slicenet import SliceNetForConditionalGeneration
from .decoder_step import DecoderStepForExport, EncoderForExport
from .slicenet_step import SliceNetEncoderForExport, SliceNetStepForExport


def export_graphs(model) -> tuple[nn.Module | None, nn.Module]:
    """The encoder's module (encoder-decoders; None for a causal LM) and the decoding step's.

    Raises:
        ValueError: naming what the export does not support in ``model`` (its head class, a layer's
            core), or a model in training mode.
    """
    if isinstance(model, SliceNetForConditionalGeneration):
        encoder, step = SliceNetEncoderForExport(model), SliceNetStepForExport(model)
    else:
        step = DecoderStepForExport(model)  # refuses what it cannot express
        encoder = EncoderForExport(model) if isinstance(model, ConvForConditionalGeneration) else None
    if model.training:
        raise ValueError(f"export a model in eval mode: call {type(model).__name__}.eval() first (dropout is on)")
    return encoder, step


def check_exportable(model) -> None:
    """Raise the ValueError of `export_graphs` when ``model`` cannot be exported; return None when it can."""
    export_graphs(model)
