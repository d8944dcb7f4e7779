"""SliceNet's attention to a padded source (`attention_bias`, `simple_attention`): it gives the written-out
masked attention (forward and backward, float32 and float64), and a source row of padding only attends
to nothing (zero weights, a zero output), as the other families' cross-attention does."""

from __future__ import annotations

import math

import torch

from talk_hf.layers.slicenet_attention import SliceAttention, attention_bias, simple_attention

from .helpers import CASES, random_tokens

D_MODEL = 8
SLICENET = next(case for case in CASES if case.name == "slicenet")


def _inputs(dtype: torch.dtype, seed: int = 0):
    """queries (3, 2, d), the source (3, 5, d) and its mask: row 0 whole, row 1 with its last two tokens
    padding, row 2 all padding."""
    generator = torch.Generator().manual_seed(seed)
    query = torch.randn(3, 2, D_MODEL, dtype=dtype, generator=generator, requires_grad=True)
    source = torch.randn(3, 5, D_MODEL, dtype=dtype, generator=generator, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [0, 0, 0, 0, 0]])
    return query, source, mask


def _reference(query, source, mask):
    """``(attended (B, T, d), weights (B, T, S))`` written out: scaled scores, the lowest value at padding,
    softmax over the source; a row of padding only attends to nothing (zero weights)."""
    scores = query @ source.transpose(1, 2) / math.sqrt(query.shape[-1])
    real = mask.bool()[:, None, :]
    weights = torch.softmax(scores.masked_fill(~real, torch.finfo(scores.dtype).min), dim=-1)
    weights = weights * real.any(-1, keepdim=True)
    return weights @ source, weights


def _gradients(output: torch.Tensor, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    weights = torch.linspace(-1, 1, output.numel(), dtype=output.dtype).view_as(output)
    return torch.autograd.grad((output * weights).sum(), tensors)


def test_the_attention_masks_as_written_out_forward_and_backward():
    for dtype in (torch.float32, torch.float64):
        query, source, mask = _inputs(dtype)
        attended, weights = simple_attention(query, source, attention_bias(source, mask))
        expected, expected_weights = _reference(query, source, mask)
        torch.testing.assert_close(attended, expected)
        torch.testing.assert_close(weights, expected_weights)
        for got, want in zip(_gradients(attended, query, source), _gradients(expected, query, source), strict=True):
            assert torch.isfinite(got).all()
            torch.testing.assert_close(got, want)
        assert weights.dtype == dtype and torch.all(weights[1, :, 3:] == 0)
        assert torch.all(weights[2] == 0) and torch.all(attended[2] == 0)
        torch.testing.assert_close(weights[:2].sum(-1), torch.ones_like(weights[:2].sum(-1)))


def test_the_masked_attention_passes_gradcheck():
    query, source, mask = _inputs(torch.float64, seed=1)
    assert torch.autograd.gradcheck(lambda q, s: simple_attention(q, s, attention_bias(s, mask))[0], (query, source))


def test_a_block_over_a_source_of_padding_only_adds_nothing():
    """The t2t block returns LN(x + Attend): for a row of padding only, LN(x)."""
    torch.manual_seed(0)
    block = SliceAttention(D_MODEL, [3], [1], [0], residual="t2t", eps=1e-6).double()
    for module in block.modules():  # the convolutions are allocated uninitialised: the model fills them
        if hasattr(module, "init_weights"):
            module.init_weights()
    x, source, mask = _inputs(torch.float64)
    out, _ = block(x, torch.zeros_like(x), source, attention_bias(source, mask))
    torch.testing.assert_close(out[2], block.norm(x[2]))


def test_a_model_gives_a_source_of_padding_only_zero_attention():
    model = SLICENET.model()
    source = random_tokens(2, 6)
    mask = torch.ones_like(source)
    mask[1] = 0
    outputs = model(
        input_ids=source, attention_mask=mask, decoder_input_ids=random_tokens(2, 3, seed=2), output_attentions=True
    )
    for weights in outputs.cross_attentions:
        assert torch.all(weights[1] == 0)
        torch.testing.assert_close(weights[0].sum(-1), torch.ones_like(weights[0].sum(-1)))
