"""fairseq state dict -> talk_hf state dict: parameter names, layouts and shape checks.

Names (per layer ``i`` of ``encoder`` or ``decoder``; see the fixtures' README for every key):

==================================================  ===============================================
fairseq                                             talk_hf (under ``model.<stack>.layers.i.``)
==================================================  ===============================================
``linear1`` / ``linear2``                           ``mixer.in_proj`` / ``mixer.out_proj``
``conv.weight`` (LightConv, (H, 1, K) or (H, K))    ``mixer.core.weight`` (H, K)
``conv.weight_linear`` (DynamicConv)                ``mixer.core.weight_proj``
``conv.offsets`` (TaLK)                             ``mixer.core.offset_proj``
``layer_norms.0`` / ``conv_layer_norm``             ``mixer.residual.layer_norm``
``encoder_attn.{q,k,v,out}_proj``                   ``cross_attention.{q,k,v,out}_proj``
``encoder_attn.in_proj_{weight,bias}`` (fairseq     split into ``cross_attention.{q,k,v}_proj``
≤ 0.6: q, k, v stacked)
``encoder_attn_layer_norm``                         ``cross_attention.residual.layer_norm``
``fc1`` / ``fc2``                                   ``ffn.fc1`` / ``ffn.fc2``
``layer_norms.1`` / ``final_layer_norm``            ``ffn.residual.layer_norm``
==================================================  ===============================================

Outside the layers: ``<stack>.embed_tokens`` -> ``model.<stack>.embed_tokens``, ``<stack>.layer_norm``
-> ``model.<stack>.final_layer_norm``, ``decoder.embed_out`` -> ``lm_head.weight`` (the decoder's
embeddings when they are shared).  ``*.version`` and ``*.embed_positions._float_tensor`` hold no
weights (the sinusoidal table is recomputed).
"""

from __future__ import annotations

import re

import torch
from torch import nn

_LAYER_MODULES = {
    "linear1": "mixer.in_proj",
    "linear2": "mixer.out_proj",
    "conv": "mixer.core",  # LightConv: conv.weight
    "conv.weight_linear": "mixer.core.weight_proj",
    "conv.offsets": "mixer.core.offset_proj",
    "layer_norms.0": "mixer.residual.layer_norm",
    "conv_layer_norm": "mixer.residual.layer_norm",
    **{f"encoder_attn.{name}": f"cross_attention.{name}" for name in ("q_proj", "k_proj", "v_proj", "out_proj")},
    "encoder_attn_layer_norm": "cross_attention.residual.layer_norm",
    "fc1": "ffn.fc1",
    "fc2": "ffn.fc2",
    "layer_norms.1": "ffn.residual.layer_norm",
    "final_layer_norm": "ffn.residual.layer_norm",
}
# The layer modules that only one family's convolutions have (LightConv's kernel, DynamicConv's and TaLK's projections).
_FAMILY_MODULES = {"conv": "lightconv", "conv.weight_linear": "lightconv", "conv.offsets": "talk"}
_STACK_MODULES = {"embed_tokens": "embed_tokens", "layer_norm": "final_layer_norm"}
_NO_WEIGHTS = re.compile(r"(encoder|decoder)\.(version|embed_positions\._float_tensor)")
_LAYER_KEY = re.compile(r"(encoder|decoder)\.layers\.(\d+)\.(.+)\.(weight|bias)")
_STACK_KEY = re.compile(r"(encoder|decoder)\.(.+)\.(weight|bias)")


def split_fused_attention(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """fairseq ≤ 0.6 stored the cross-attention's q, k, v projections stacked as ``in_proj_weight``
    (3d, d) and ``in_proj_bias`` (3d,); later versions (``upgrade_state_dict_named``) split them
    into ``q_proj``, ``k_proj``, ``v_proj`` in that order.  Returns a new dict in the later layout."""
    split = {}
    for name, tensor in state_dict.items():
        prefix, fused, kind = name.rpartition(".in_proj_")
        if not fused or kind not in ("weight", "bias"):
            split[name] = tensor
            continue
        for projection, part in zip(("q_proj", "k_proj", "v_proj"), tensor.chunk(3, dim=0), strict=True):
            split[f"{prefix}.{projection}.{kind}"] = part
    return split


def parameter_families(state_dict: dict[str, torch.Tensor]) -> dict[str, str]:
    """family (``"lightconv"``, ``"talk"``) -> the first fairseq parameter of ``state_dict`` that only that
    family's convolutions have; none for a family without such parameters."""
    found = {}
    for name in state_dict:
        layer = _LAYER_KEY.fullmatch(name)
        if layer and layer.group(3) in _FAMILY_MODULES:
            found.setdefault(_FAMILY_MODULES[layer.group(3)], name)
    return found


def rename(fairseq_name: str) -> str | None:
    """The talk_hf name of a fairseq parameter; None for keys without weights.

    Raises:
        ValueError: the parameter has no talk_hf counterpart (an unsupported module).
    """
    if _NO_WEIGHTS.fullmatch(fairseq_name):
        return None
    if fairseq_name == "decoder.embed_out":
        return "lm_head.weight"
    layer = _LAYER_KEY.fullmatch(fairseq_name)
    if layer and layer.group(3) in _LAYER_MODULES:
        stack, index, module, kind = layer.groups()
        return f"model.{stack}.layers.{index}.{_LAYER_MODULES[module]}.{kind}"
    outside = _STACK_KEY.fullmatch(fairseq_name)
    if outside and outside.group(2) in _STACK_MODULES:
        stack, module, kind = outside.groups()
        return f"model.{stack}.{_STACK_MODULES[module]}.{kind}"
    raise ValueError(f"fairseq parameter {fairseq_name!r} has no talk_hf counterpart")


def convert_state_dict(state_dict: dict[str, torch.Tensor], tie_word_embeddings: bool) -> dict[str, torch.Tensor]:
    """fairseq names and layouts -> talk_hf's (see the module docstring).

    Args:
        state_dict: the checkpoint's ``model`` entry.
        tie_word_embeddings: the LM head is the decoder's embedding matrix (no ``decoder.embed_out``).

    Raises:
        ValueError: listing every parameter without a talk_hf counterpart.
    """
    converted, unknown = {}, []
    for name, tensor in split_fused_attention(state_dict).items():
        try:
            target = rename(name)
        except ValueError:
            unknown.append(f"{name} {tuple(tensor.shape)}")
            continue
        if target is not None:
            # A GPU-trained LightConv kernel is (H, K); the CPU module's is (H, 1, K).
            converted[target] = tensor.squeeze(1) if target.endswith("core.weight") and tensor.dim() == 3 else tensor
    if unknown:
        raise ValueError(f"fairseq parameters with no talk_hf counterpart: {', '.join(unknown)}")
    if tie_word_embeddings and "lm_head.weight" in converted:
        raise ValueError(
            "the arguments share the decoder's input and output embeddings, but the checkpoint holds "
            "a separate decoder.embed_out"
        )
    if tie_word_embeddings and "model.decoder.embed_tokens.weight" in converted:
        converted["lm_head.weight"] = converted["model.decoder.embed_tokens.weight"]
    return converted


def load_converted(model: nn.Module, converted: dict[str, torch.Tensor]) -> None:
    """Copy ``converted`` into ``model`` after checking that names and shapes match exactly.

    Raises:
        ValueError: naming the missing and unexpected parameters, or each shape that differs
            (with the shape the configuration expects).
    """
    expected = model.state_dict()
    missing = sorted(set(expected) - set(converted))
    unexpected = sorted(set(converted) - set(expected))
    if missing or unexpected:
        raise ValueError(
            f"the converted weights do not fit the model built from the checkpoint's arguments: "
            f"missing {missing}, unexpected {unexpected}"
        )
    mismatched = [
        f"{name}: checkpoint {tuple(converted[name].shape)}, expected {tuple(tensor.shape)}"
        for name, tensor in expected.items()
        if converted[name].shape != tensor.shape
    ]
    if mismatched:
        raise ValueError("shapes differ from the checkpoint's arguments: " + "; ".join(mismatched))
    model.load_state_dict(converted, strict=True)
