"""int8 inference: `quantize_int8` converts every linear layer of a model to int8, in place.

``torch.ao.quantization.quantize_dynamic(model)`` converts none of our layers (it matches exact
module types, and ours are `talk_hf.layers.linear_layer.Linear`, a subclass of ``nn.Linear``) and
says nothing; `quantize_int8` converts every ``nn.Linear`` of the model, subclasses included, or
raises.

``"dynamic"`` (the default): PyTorch's dynamic int8 quantization (fbgemm, x86 engine).  Weights
int8 with one scale per output row, activations quantized per tensor at each call (8 bits with
AVX-512 VNNI, else 7: `full_range_activations`), int8 products summed in int32.  Each layer
becomes a `DynamicInt8Linear`.  CPU and float32 only.  It is the default because it alone decoded
faster than float32 in every measured setting, where torchao's CPU kernels were slower
(benchmarks/README.md, "int8 methods and ONNX exporters"); batches gain the most.  On a TaLK
``small`` trained on Multi30k, int8 translates within 0.2 BLEU of float32 (docs/serving.md,
``benchmarks/bleu_serving.py``).

``"weight_only"``: torchao's ``Int8WeightOnlyConfig`` (int8 weights, one scale per output row,
products in the model's dtype); the weight becomes a torchao tensor subclass, which
``talk_hf.ops.linear`` hands to ``F.linear``.  Any device and floating dtype: the method for GPUs
and half precision (not measured there).  Needs torchao (the ``serving`` extra).

The output projection ``lm_head`` is converted too (the largest matrix of a decoding step); when
tied, the input embedding stays in floating point and the two are untied.

A converted model is for inference: it is left in eval mode and generates as the float model does
(greedy, beam, sampling; compiled too with ``"weight_only"``).  What it cannot do raises, naming the
operation (`talk_hf.int8_model`): training, dtype casts, tying or resizing weights, ``save_pretrained`` and
``push_to_hub`` (no ``from_pretrained`` would load its int8 weights right), compiled decoding with
``"dynamic"``.  Save, cast or resize the floating-point model and quantize after.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantizedLinear

from .int8_model import Int8Quantization, int8_record, mark_int8

METHODS = ("dynamic", "weight_only")


def quantize_int8(model: nn.Module, method: str = "dynamic") -> int:
    """Convert every linear layer (``nn.Linear`` and its subclasses) of ``model`` to int8, in place.

    Args:
        model: a module holding linear layers; every ``nn.Linear`` in it is converted.
        method: ``"dynamic"`` (int8 weights and activations, CPU float32) or ``"weight_only"`` (int8
            weights, torchao; any device and floating dtype).  See the module docstring.

    Returns:
        The number of layers converted (at least 1); ``model.int8_quantization`` records the method
        and the layers' names (`Int8Quantization`).  The model is left in eval mode, and refuses
        training, casts and saving (`talk_hf.int8_model`).

    Raises:
        ValueError: ``method`` is unknown; ``model`` was quantized already or has no linear layer;
            a layer's device or dtype is one the method does not run on.
        ImportError: ``"weight_only"`` without torchao.
    """
    if method not in METHODS:
        raise ValueError(f"quantize_int8: method={method!r} is not one of {', '.join(map(repr, METHODS))}")
    model_name = type(model).__name__
    previous = int8_record(model)
    if previous is not None:
        raise ValueError(
            f"quantize_int8: {model_name} is already int8 (method={previous.method!r}, "
            f"{len(previous.layers)} layers); quantize the floating-point model once"
        )
    if isinstance(model, nn.Linear):
        raise ValueError(
            "quantize_int8: model is itself an nn.Linear, which cannot be replaced in place; pass its parent"
        )
    linears = {name: module for name, module in model.named_modules() if isinstance(module, nn.Linear)}
    if not linears:
        int8_layers = sum(isinstance(module, DynamicQuantizedLinear) for module in model.modules())
        already = f" (its {int8_layers} dynamic int8 linear layers are int8 already)" if int8_layers else ""
        raise ValueError(f"quantize_int8: {model_name} has no linear layer (nn.Linear) to convert to int8{already}")
    for name, module in linears.items():
        _check_layer(model_name, name, module, method)
    if method == "dynamic":
        for name, module in linears.items():
            parent_name, _, child_name = name.rpartition(".")
            setattr(model.get_submodule(parent_name), child_name, _dynamic_int8_linear(module))
    else:
        try:
            from torchao.quantization import Int8WeightOnlyConfig, quantize_
        except ImportError as error:
            raise ImportError(
                "quantize_int8: method='weight_only' needs torchao (pip install torchao, or the serving extra: pip install -e '<talk_hf clone>[serving]')"
            ) from error
        # version=2: Int8Tensor weights (what the tests and measurements saw), named so that a later
        # torchao default does not change the format; set_inductor_config: torch._inductor's settings stay.
        config = Int8WeightOnlyConfig(version=2, set_inductor_config=False)
        quantize_(model, config, filter_fn=lambda module, name: isinstance(module, nn.Linear))
    model.eval()
    mark_int8(model, Int8Quantization(method, tuple(linears)))
    return len(linears)


def _check_layer(model_name: str, name: str, module: nn.Linear, method: str) -> None:
    """Raise ValueError naming the layer if ``method`` cannot convert ``module``."""
    weight = module.weight
    if type(weight) not in (torch.Tensor, nn.Parameter):
        raise ValueError(
            f"quantize_int8: layer {name!r} of {model_name} has a {type(weight).__name__} weight, "
            "already quantized; quantize the floating-point model"
        )
    if not weight.dtype.is_floating_point:
        raise ValueError(
            f"quantize_int8: layer {name!r} of {model_name} has a {weight.dtype} weight, not floating point"
        )
    if method == "dynamic" and (weight.device.type != "cpu" or weight.dtype != torch.float32):
        raise ValueError(
            f"quantize_int8: method='dynamic' runs on the CPU in float32, and layer {name!r} of {model_name} "
            f"is {weight.dtype} on {weight.device}: convert the model with .float().cpu(), or use "
            "method='weight_only' (any device and floating dtype)"
        )


class DynamicInt8Linear(DynamicQuantizedLinear):
    """``torch.ao.nn.quantized.dynamic.Linear`` that calls the fbgemm kernel directly, without the
    parent's per-call checks (~4 of a batch-1 step's ~20 microseconds per layer), and quantizes the
    activations to the full 8 bits where the CPU has AVX-512 VNNI (`full_range_activations`).
    Built by `quantize_int8` (qint8 weights)."""

    def __init__(self, in_features: int, out_features: int, bias: bool) -> None:
        super().__init__(in_features, out_features, bias_=bias, dtype=torch.qint8)
        self.reduce_range = not full_range_activations()

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        """(..., in_features) float32 -> (..., out_features) float32."""
        if torch.compiler.is_compiling():
            return _untraceable_int8_linear(input, self._packed_params._packed_params, self.reduce_range)
        return torch.ops.quantized.linear_dynamic(input, self._packed_params._packed_params, self.reduce_range)


@torch.compiler.disable(
    reason="talk_hf.quantize_int8(method='dynamic'): torch.compile cannot trace fbgemm's packed int8 weights; "
    "decode eagerly, or quantize with method='weight_only', which compiles"
)
def _untraceable_int8_linear(input: torch.Tensor, packed_weight, reduce_range: bool) -> torch.Tensor:
    """`DynamicInt8Linear.forward` where torch.compile traces it: a graph break, whose reason
    ``fullgraph=True`` reports (``generate(compile_config=...)`` refuses such a model first)."""
    return torch.ops.quantized.linear_dynamic(input, packed_weight, reduce_range)


def full_range_activations() -> bool:
    """Whether the int8 kernel may quantize activations to 8 bits rather than 7 (``reduce_range``):
    with AVX-512 VNNI its products sum in int32; without, pairs of uint8 x int8 products sum in
    int16, which 8-bit activations can overflow.  8 bits halve the logits' error (tests/serving)."""
    is_vnni_supported = getattr(torch.cpu, "_is_vnni_supported", None)  # torch's own check, private
    return is_vnni_supported is not None and is_vnni_supported()


def _dynamic_int8_linear(module: nn.Linear) -> DynamicInt8Linear:
    """``module`` as a `DynamicInt8Linear`: its (out, in) weight rounded to int8 with one symmetric
    scale per output row (max |w| / 127), its bias kept in float32."""
    weight = module.weight.detach()
    scales = (weight.abs().amax(dim=1) / 127).clamp_min(torch.finfo(torch.float32).eps).double()
    zero_points = torch.zeros(weight.shape[0], dtype=torch.long)
    bias = None if module.bias is None else module.bias.detach()
    with warnings.catch_warnings():
        # torch 2.13 deprecates creating qint8 tensors, which the packed weights still start from.
        warnings.filterwarnings("ignore", message="torch.quantize_per_tensor, torch.quantize_per_channel")
        quantized_weight = torch.quantize_per_channel(weight, scales, zero_points, 0, torch.qint8)
        converted = DynamicInt8Linear(module.in_features, module.out_features, bias is not None)
        converted.set_weight_bias(quantized_weight, bias)
    return converted
