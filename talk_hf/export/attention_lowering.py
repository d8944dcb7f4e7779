"""How an export writes ``aten.scaled_dot_product_attention`` in ONNX: one transposed product ONNX Runtime fuses.

The exporter's default lowering (onnxscript's torch_lib, opset 18) transposes the keys through a
reshape to 3-D (nine shape nodes) and scales the transposed keys as well as the queries, so each call
copies and rescales all keys.  In a decoding step the keys are the source's cross-attention keys,
(rows, heads, S, head_dim) per layer: at 32 sentences x 5 beams that copy was a tenth of the step's
time.  `scaled_dot_product_attention` writes the same function as

    Softmax(MatMul(Mul(query, scale), Transpose(key, [0, 1, 3, 2])) + bias) @ value

(bias: 0 where a boolean mask is True and the dtype's lowest value where it is False, as the default
lowering writes it; a float mask is added as it is), which ONNX Runtime fuses into one
``FusedMatMul`` with a transposed right operand and the scale as its alpha.  A query whose boolean
mask is False at every key attends to nothing (its output is zeros), as torch's own kernels do: the
default lowering would average the values instead.  A decoding step's queries (one per row, or a
source's n beams as one query of n: `layers.cross_attention.per_source`; a length the graph knows only
when it runs) take the keys as the left operand instead, ``Transpose(MatMul(key, Transpose(query)))``,
so that no key is moved at all.  Calls it does not cover
(dropout, ``is_causal``, grouped-query heads: none in an eval-mode model of this package's families)
keep the default lowering.

This is a lowering of one aten op, as torch_lib's own: the models state attention once, in
``layers.cross_attention``, and the export traces it.
"""

from __future__ import annotations

import math

import torch
from onnxscript import ir
from onnxscript import opset18 as op
from onnxscript.function_libs.torch_lib.ops.nn import aten_scaled_dot_product_attention as default_lowering


def scaled_dot_product_attention(
    query,
    key,
    value,
    attn_mask=None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
):
    """query (B, H, T, E), key (B, H, S, E), value (B, H, S, Ev), attn_mask None, bool or float
    broadcastable to (B, H, T, S) -> (B, H, T, Ev), as ``torch.nn.functional.scaled_dot_product_attention``."""
    if dropout_p != 0.0 or is_causal or enable_gqa:
        return default_lowering(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    # A decoding step's few queries per source: one, or its n beams (a length known when it runs).
    length = None if query.shape is None else query.shape[2]
    dtype, few_queries = query.dtype, length is not None and not (isinstance(length, int) and length > 1)
    query = op.Mul(query, op.CastLike(scale, query))
    if few_queries:  # keys @ query^T: no key moved
        scores = op.Transpose(op.MatMul(key, op.Transpose(query, perm=[0, 1, 3, 2])), perm=[0, 1, 3, 2])
    else:
        scores = op.MatMul(query, op.Transpose(key, perm=[0, 1, 3, 2]))
    any_key = None  # a boolean mask's (..., 1): 0 where a row may attend to no key, else 1
    if attn_mask is not None:
        if attn_mask.dtype == ir.DataType.BOOL:
            zero, lowest = (
                op.Constant(value=ir.tensor(0.0, dtype=dtype)),
                op.Constant(value=ir.tensor(dtype.min, dtype=dtype)),
            )
            any_key = op.ReduceMax(op.CastLike(attn_mask, zero), op.Constant(value_ints=[-1]), keepdims=1)
            attn_mask = op.Where(attn_mask, zero, lowest)
        scores = op.Add(scores, attn_mask)
    attended = op.MatMul(op.Softmax(scores, axis=-1), value)
    return attended if any_key is None else op.Mul(attended, any_key)


# The export's custom translations (``torch.onnx.export(custom_translation_table=...)``).
TRANSLATIONS = {torch.ops.aten.scaled_dot_product_attention.default: scaled_dot_product_attention}
