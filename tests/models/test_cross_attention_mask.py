"""The cross-attention's source mask, broadcast once per decoder forward (`broadcast_source_mask`) and
read by every layer: each block masks as a per-layer (B, S) -> (B, 1, 1, S) conversion did (forward and
backward, both attention paths), a source row of padding only attends to nothing on both paths, and
one decoder forward hands its layers one mask tensor."""

from __future__ import annotations

import math

import torch

from talk_hf.layers.cross_attention import CrossAttentionBlock, broadcast_source_mask

from .helpers import CASES, random_tokens

HEADS, D_MODEL = 2, 8


def _block_and_inputs(seed: int = 0, dtype: torch.dtype = torch.float64):
    """A block in train mode without dropout, decoder states (3, 2, d), encoder output (3, 5, d) and its
    mask: row 0 whole, row 1 with its last two tokens padding, row 2 all padding."""
    torch.manual_seed(seed)
    block = CrossAttentionBlock(D_MODEL, HEADS, attention_dropout=0.0, dropout=0.0, normalize_before=True).to(dtype)
    hidden = torch.randn(3, 2, D_MODEL, dtype=dtype, requires_grad=True)
    encoder_hidden = torch.randn(3, 5, D_MODEL, dtype=dtype, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [0, 0, 0, 0, 0]])
    return block, hidden, encoder_hidden, mask


def _reference_attended(block, hidden, encoder_hidden, mask) -> torch.Tensor:
    """(B, T, d) block output written out: scaled scores, the lowest value at padding, softmax over the
    source; a row of padding only attends to nothing (zero weights: SDPA's result)."""

    def split(x):
        return x.view(x.shape[0], x.shape[1], HEADS, D_MODEL // HEADS).transpose(1, 2)

    queries = split(block.q_proj(block.residual.pre(hidden)))
    keys, values = split(block.k_proj(encoder_hidden)), split(block.v_proj(encoder_hidden))
    scores = queries @ keys.transpose(-1, -2) / math.sqrt(D_MODEL // HEADS)
    real = mask.bool()[:, None, None, :]
    weights = torch.softmax(scores.masked_fill(~real, torch.finfo(scores.dtype).min), dim=-1)
    weights = weights * real.any(-1, keepdim=True)
    attended = (weights @ values).transpose(1, 2).reshape(hidden.shape)
    return block.residual.post(block.out_proj(attended), hidden)


def _gradients(output: torch.Tensor, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    weights = torch.linspace(-1, 1, output.numel(), dtype=output.dtype).view_as(output)
    return torch.autograd.grad((output * weights).sum(), tensors)


def test_the_broadcast_mask_is_the_per_layer_conversion():
    mask = torch.tensor([[1, 1, 0], [0, 1, 1]])
    assert torch.equal(broadcast_source_mask(mask), mask[:, None, None, :].to(torch.bool))
    assert broadcast_source_mask(mask).shape == (2, 1, 1, 3) and broadcast_source_mask(None) is None


def test_both_attention_paths_mask_as_written_out_forward_and_backward():
    """SDPA and the weights path of ``output_attentions`` give the written-out masked attention, in
    float32 and float64 (the weights path's softmax runs in float64 there: no -inf, no NaN), and a source
    of padding only attends to nothing on both (``output_attentions`` never changes the output)."""
    for output_attentions in (False, True):
        for dtype in (torch.float32, torch.float64):
            block, hidden, encoder_hidden, mask = _block_and_inputs(dtype=dtype)
            source_mask = broadcast_source_mask(mask)
            found, weights = block(hidden, encoder_hidden, source_mask, output_attentions=output_attentions)
            expected = _reference_attended(block, hidden, encoder_hidden, mask)
            torch.testing.assert_close(found, expected)
            parameters = (hidden, encoder_hidden, *block.parameters())
            for got, want in zip(_gradients(found, *parameters), _gradients(expected, *parameters), strict=True):
                assert torch.isfinite(got).all()
                torch.testing.assert_close(got, want)
            if output_attentions:
                assert weights.dtype == dtype
                assert torch.all(weights[1, :, :, 3:] == 0) and torch.all(weights[2] == 0)
                torch.testing.assert_close(weights[:2].sum(-1), torch.ones_like(weights[:2].sum(-1)))


def test_the_masked_block_passes_gradcheck():
    block, hidden, encoder_hidden, mask = _block_and_inputs(seed=1)
    source_mask = broadcast_source_mask(mask[:2])
    assert torch.autograd.gradcheck(
        lambda states, source: block(states, source, source_mask)[0], (hidden[:2], encoder_hidden[:2])
    )


def test_one_decoder_forward_hands_every_layer_one_mask():
    case = next(case for case in CASES if case.is_seq2seq and case.name.startswith("talk"))
    model = case.model()
    source, target = random_tokens(2, 6, seed=1), random_tokens(2, 3, seed=2)
    mask = torch.ones_like(source)
    mask[1, :2] = 0
    seen = []
    hooks = [
        layer.cross_attention.register_forward_pre_hook(lambda module, args: seen.append(args[2]))
        for layer in model.get_decoder().layers
    ]
    try:
        model(input_ids=source, attention_mask=mask, decoder_input_ids=target)
    finally:
        for hook in hooks:
            hook.remove()
    assert len(seen) == len(model.get_decoder().layers) >= 2
    assert all(found is seen[0] for found in seen) and torch.equal(seen[0], broadcast_source_mask(mask))
