"""int8 inference: `quantize_int8` converts every linear layer of a model to int8, in place.

``torch.ao.quantization.quantize_dynamic(model)`` converts none of our layers (it matches exact
module types, and ours are `talk_hf.layers.linear_layer.Linear`, a subclass of ``nn.Linear``) and
says nothing; `quantize_int8` converts every ``nn.Linear`` of the model, subclasses included, or
raises.

Methods (measured on the 2-core AMD EPYC development machine (AVX-512 VNNI), one thread, the
``small`` TaLK shape, d 256, 3 + 3 layers, FFN 1024, vocabulary 8000; see the issue #44 notes):

``"dynamic"`` (the default)
    PyTorch's dynamic int8 quantization (fbgemm / x86 engine): weights int8 per output channel,
    the activations quantized per tensor at each call, an int8 product with int32 sums.  Each
    layer becomes a ``torch.ao.nn.quantized.dynamic.Linear``.  CPU and float32 only.  The fastest
    on the CPU: batch-1 greedy and batch-32 beam-5 decoding both run faster than float32, where
    torchao's int8 configurations run slower than float32 on the CPU (their kernels are not tuned
    for it).
``"weight_only"``
    torchao's ``Int8WeightOnlyConfig``: int8 weights per output channel, products in the model's
    dtype; the weight becomes a torchao tensor subclass (``talk_hf.ops.linear`` then runs
    ``F.linear``).  Any device and floating dtype: the method for GPUs and half precision, a 4x
    smaller weight than float32; on the CPU it is slower than float32.  Needs torchao
    (``pip install talk-hf[serving]``).

The tied output projection (``lm_head``, the decoder's embedding matrix) is converted too: the
largest matrix of a small-vocabulary-free model, it is most of a decoding step's weights; the
embedding itself stays in floating point (the two are no longer tied).

A converted model generates as before (greedy, beam, sampling) but can no longer be saved:
``save_pretrained`` (and ``push_to_hub``) raise, since its state dict holds packed int8 weights
that no ``from_pretrained`` loads.  Save the floating-point model and quantize after loading.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass

import torch
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantizedLinear

METHODS = ("dynamic", "weight_only")
# Where `quantize_int8` records what it did on the model.
RECORD_ATTRIBUTE = "int8_quantization"


@dataclass(frozen=True)
class Int8Quantization:
    """What `quantize_int8` did to a model: the method and the converted layers' names."""

    method: str
    layers: tuple[str, ...]


def quantize_int8(model: nn.Module, method: str = "dynamic") -> int:
    """Convert every linear layer (``nn.Linear`` and its subclasses) of ``model`` to int8, in place.

    Args:
        model: any module; every ``nn.Linear`` in it is converted.
        method: ``"dynamic"`` (int8 weights and activations, CPU float32) or ``"weight_only"`` (int8
            weights, torchao; any device and floating dtype).  See the module docstring.

    Returns:
        The number of layers converted (at least 1); ``model.int8_quantization`` records the method
        and the layers' names (`Int8Quantization`).

    Raises:
        ValueError: ``method`` is unknown; ``model`` was quantized already or has no linear layer;
            a layer's device or dtype is one the method does not run on.
        ImportError: ``"weight_only"`` without torchao.
    """
    if method not in METHODS:
        raise ValueError(f"quantize_int8: method={method!r} is not one of {', '.join(map(repr, METHODS))}")
    model_name = type(model).__name__
    previous = getattr(model, RECORD_ATTRIBUTE, None)
    if isinstance(previous, Int8Quantization):
        raise ValueError(
            f"quantize_int8: {model_name} is already int8 (method={previous.method!r}, "
            f"{len(previous.layers)} layers); quantize the floating-point model once"
        )
    linears = {name: module for name, module in model.named_modules() if isinstance(module, nn.Linear)}
    if not linears:
        raise ValueError(f"quantize_int8: {model_name} has no linear layer (nn.Linear) to convert to int8")
    for name, module in linears.items():
        _check_layer(model_name, name, module, method)
    if method == "dynamic":
        for name, module in linears.items():
            parent_name, _, child_name = name.rpartition(".")
            setattr(model.get_submodule(parent_name), child_name, _dynamic_int8_linear(module))
    else:
        from torchao.quantization import Int8WeightOnlyConfig, quantize_

        config = Int8WeightOnlyConfig(set_inductor_config=False)  # leave torch._inductor's settings alone
        quantize_(model, config, filter_fn=lambda module, name: isinstance(module, nn.Linear))
    setattr(model, RECORD_ATTRIBUTE, Int8Quantization(method, tuple(linears)))
    if hasattr(model, "save_pretrained"):
        model.save_pretrained = functools.partial(_refuse_to_save, model_name, method)
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
        return torch.ops.quantized.linear_dynamic(input, self._packed_params._packed_params, self.reduce_range)


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


def _refuse_to_save(model_name: str, method: str, *args, **kwargs) -> None:
    """``save_pretrained`` of a model `quantize_int8` converted."""
    raise RuntimeError(
        f"save_pretrained: this {model_name} was converted to int8 by talk_hf.quantize_int8(method={method!r}) "
        "and its packed int8 weights would not load back with from_pretrained; save the floating-point "
        "model and call quantize_int8 after loading it"
    )
