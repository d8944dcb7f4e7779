"""talk_conv against its definition: forward, backward, dtypes, edge cases, properties."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from talk_hf.ops import DocumentEdges, talk_conv
from talk_hf.ops.talk_conv.talk_naive import naive_talk_conv
from talk_hf.ops.talk_conv.talk_torch import MIN_BLOCK

from .helpers import assert_close_to_reference, offsets_off_the_grid

pytestmark = pytest.mark.usefixtures("each_backend")


def make_inputs(batch, length, channels, heads, max_left, max_right, dtype=torch.float64):
    x = torch.randn(batch, length, channels, dtype=dtype)
    offset_left = offsets_off_the_grid((batch, length, heads), max_left, dtype)
    offset_right = offsets_off_the_grid((batch, length, heads), max_right, dtype) if max_right > 0 else None
    return x, offset_left, offset_right


@pytest.mark.parametrize(
    "batch,length,channels,heads,max_left,max_right",
    [
        (2, 17, 8, 2, 3, 4),  # bidirectional
        (2, 17, 8, 2, 5, 0),  # causal
        (1, 1, 4, 1, 3, 3),  # T = 1
        (1, 9, 3, 1, 2, 2),  # B*H = 1, odd head size
        (2, 6, 6, 3, 20, 20),  # windows clipped at both ends
        (1, 12, 4, 2, 0, 3),  # max_left = 0
        (1, 12, 4, 4, 0, 0),  # max_left = max_right = 0: identity / 1
    ],
)
def test_forward_matches_definition(batch, length, channels, heads, max_left, max_right):
    x, offset_left, offset_right = make_inputs(batch, length, channels, heads, max_left, max_right)
    out = talk_conv(x, offset_left, offset_right, max_left, max_right)
    expected = naive_talk_conv(x, offset_left, offset_right, max_left, max_right)
    assert_close_to_reference(out, expected, torch.float64)


@pytest.mark.parametrize("max_left,max_right", [(3, 4), (4, 0), (0, 2)])
def test_gradcheck_float64(max_left, max_right):
    x, offset_left, offset_right = make_inputs(2, 11, 6, 3, max_left, max_right)
    inputs = [x.requires_grad_(), offset_left.requires_grad_()]
    if offset_right is not None:
        inputs.append(offset_right.requires_grad_())

    def op(x, offset_left, offset_right=None):
        return talk_conv(x, offset_left, offset_right, max_left, max_right)

    assert torch.autograd.gradcheck(op, inputs, eps=1e-6, atol=1e-7)


def test_offset_gradient_formula():
    """d out / d offset_left = max_left * x[floor(a)] / K summed over the head's channels."""
    x, offset_left, offset_right = make_inputs(1, 10, 4, 1, 3, 2)
    offset_left.requires_grad_()
    talk_conv(x, offset_left, offset_right, 3, 2).sum().backward()
    time = torch.arange(10, dtype=torch.float64)
    left = time - offset_left.detach()[0, :, 0] * 3
    inside = left > 0
    expected = torch.zeros(10, dtype=torch.float64)
    floors = left.floor().long().clamp(min=0)
    expected[inside] = 3 * x[0, floors[inside]].sum(-1)[...] / 6
    torch.testing.assert_close(offset_left.grad[0, :, 0], expected)


@pytest.mark.parametrize("value", [0.0, 1.0])
def test_offsets_exactly_zero_and_one(value):
    x = torch.randn(2, 13, 8, dtype=torch.float64)
    offsets = torch.full((2, 13, 2), value, dtype=torch.float64)
    for max_right, offset_right in ((3, offsets), (0, None)):
        out = talk_conv(x, offsets, offset_right, 4, max_right)
        expected = naive_talk_conv(x, offsets, offset_right, 4, max_right)
        assert_close_to_reference(out, expected, torch.float64)


def test_offsets_above_one_from_dropout():
    x, offset_left, offset_right = make_inputs(2, 30, 4, 2, 5, 3)
    offset_left, offset_right = offset_left / 0.7, offset_right / 0.7  # dropout rescaling
    out = talk_conv(x, offset_left, offset_right, 5, 3)
    assert_close_to_reference(out, naive_talk_conv(x, offset_left, offset_right, 5, 3), torch.float64)


def test_spans_several_blocks():
    """Longer than one block, so windows cross from one block of the PyTorch path's prefix sums into the next."""
    length = 2 * MIN_BLOCK + 37
    x, offset_left, offset_right = make_inputs(1, length, 2, 1, 7, 9)
    out = talk_conv(x, offset_left, offset_right, 7, 9)
    assert_close_to_reference(out, naive_talk_conv(x, offset_left, offset_right, 7, 9), torch.float64)


@pytest.mark.parametrize("max_right", [0, 3])
def test_windows_longer_than_a_block(max_right):
    """Offsets far above 1 make windows that span three or more blocks of the PyTorch path (it sums the
    blocks in between from their running totals); forward as the definition's, gradients checked
    numerically along a random direction."""
    length, max_left = 3 * MIN_BLOCK + 11, 4
    x, offset_left, offset_right = make_inputs(1, length, 2, 1, max_left, max_right)
    offset_left = offset_left * (2.5 * MIN_BLOCK / max_left)  # reaches up to 2.5 blocks back
    offset_right = None if offset_right is None else offset_right * (MIN_BLOCK / max_right)
    out = talk_conv(x, offset_left, offset_right, max_left, max_right)
    expected = naive_talk_conv(x, offset_left, offset_right, max_left, max_right)
    assert_close_to_reference(out, expected, torch.float64)

    def op(*inputs):
        return talk_conv(*inputs, max_left, max_right) if max_right else talk_conv(*inputs, None, max_left, 0)

    inputs = [t.requires_grad_() for t in (x, offset_left, offset_right) if t is not None]
    assert torch.autograd.gradcheck(op, inputs, eps=1e-6, atol=1e-7, fast_mode=True)
    # Traced, the PyTorch path cannot read the offsets' maximum and takes the long-window sum always.
    compiled = torch.compile(op, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(*inputs), out)


class TaLKCore(torch.nn.Module):
    """talk_conv with fixed reaches over packed rows, as a module to trace."""

    def __init__(self, max_left, max_right):
        super().__init__()
        self.max_left, self.max_right = max_left, max_right

    def forward(self, x, offset_left, offset_right, position_ids):
        edges = DocumentEdges(position_ids)
        return talk_conv(x, offset_left, offset_right, self.max_left, self.max_right, document_edges=edges)


@pytest.mark.parametrize("max_right", [0, 2])
def test_exported_for_every_length(max_right):
    """Traced by torch.export with a symbolic T, as an export traces it, the PyTorch path cuts blocks
    of twice the longest window (8 or 12 rows here) and reads zero rows for the block pieces a window
    lacks: offsets up to 3 make windows inside one block, crossing into the next and spanning three or
    more, in packed rows (documents of 9 and the rest) and a plain one; forward as the definition's at
    three lengths of one graph, gradients checked numerically."""
    max_left = 3

    def inputs(length):
        x, _, _ = make_inputs(2, length, 4, 2, max_left, max_right)
        offsets = [
            3 * offsets_off_the_grid((2, length, 2), 3 * reach) if reach else None for reach in (max_left, max_right)
        ]
        position_ids = torch.stack([torch.cat([torch.arange(9), torch.arange(length - 9)]), torch.arange(length)])
        return x, *offsets, position_ids

    example = inputs(23)
    length = torch.export.Dim("length", min=9)
    dynamic_shapes = [None if tensor is None else {1: length} for tensor in example]
    program = torch.export.export(  # as talk_hf.export traces
        TaLKCore(max_left, max_right),
        example,
        dynamic_shapes=dynamic_shapes,
        strict=False,
        prefer_deferred_runtime_asserts_over_guards=True,
    )
    traced = program.module()
    for length in (12, 23, 40):
        x, offset_left, offset_right, position_ids = inputs(length)
        expected = naive_talk_conv(x, offset_left, offset_right, max_left, max_right, position_ids)
        assert_close_to_reference(traced(x, offset_left, offset_right, position_ids), expected, torch.float64)
    floats = [tensor.requires_grad_() for tensor in (x, offset_left, offset_right) if tensor is not None]

    def on_floats(*tensors):
        return traced(*tensors, position_ids) if max_right else traced(*tensors, None, position_ids)

    assert torch.autograd.gradcheck(on_floats, floats, eps=1e-6, atol=1e-7, fast_mode=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("max_right", [0, 4])
def test_low_precision_forward_and_backward(dtype, max_right):
    x, offset_left, offset_right = make_inputs(2, 40, 16, 4, 6, max_right)
    x, offset_left = x.to(dtype), offset_left.to(dtype)
    offset_right = None if offset_right is None else offset_right.to(dtype)
    low = [t.clone().requires_grad_() for t in (x, offset_left) + (() if offset_right is None else (offset_right,))]
    high = [t.detach().double().requires_grad_() for t in low]
    out_low = talk_conv(low[0], low[1], low[2] if max_right else None, 6, max_right)
    out_high = talk_conv(high[0], high[1], high[2] if max_right else None, 6, max_right)
    assert out_low.dtype == dtype
    assert_close_to_reference(out_low, out_high, dtype)
    grad_out = torch.randn_like(out_high)
    out_low.backward(grad_out.to(dtype))
    out_high.backward(grad_out)
    for low_tensor, high_tensor in zip(low, high, strict=True):
        assert low_tensor.grad.dtype == dtype
        # Offset gradients sum over the head's channels: scale the tolerance by that count.
        scale = 1.0 if low_tensor is low[0] else 4.0
        assert_close_to_reference(low_tensor.grad, high_tensor.grad, dtype, scale=scale)


def test_non_contiguous_inputs():
    x, offset_left, offset_right = make_inputs(3, 16, 8, 2, 3, 3)
    x_t = x.transpose(0, 1).contiguous().transpose(0, 1)  # same values, permuted strides
    offsets_both = torch.stack([offset_left, offset_right], dim=-1)  # (B, T, H, 2): slices are strided
    out = talk_conv(x_t, offsets_both[..., 0], offsets_both[..., 1], 3, 3)
    assert not x_t.is_contiguous() and not offsets_both[..., 0].is_contiguous()
    torch.testing.assert_close(out, talk_conv(x, offset_left, offset_right, 3, 3))


@pytest.mark.parametrize("max_right", [0, 5])
def test_padding_invariance(max_right):
    """Zeroed left/right padding leaves the outputs at real tokens unchanged."""
    x, offset_left, offset_right = make_inputs(1, 20, 4, 2, 6, max_right)
    out = talk_conv(x, offset_left, offset_right, 6, max_right)
    for pad_left, pad_right in ((3, 0), (0, 4), (7, 9)):
        x_padded = torch.nn.functional.pad(x, (0, 0, pad_left, pad_right))
        noise = torch.rand(1, 20 + pad_left + pad_right, 2, dtype=torch.float64)
        noise[:, pad_left : pad_left + 20] = offset_left
        offset_right_padded = None
        if offset_right is not None:
            offset_right_padded = torch.rand_like(noise)
            offset_right_padded[:, pad_left : pad_left + 20] = offset_right
        out_padded = talk_conv(x_padded, noise, offset_right_padded, 6, max_right)
        torch.testing.assert_close(out_padded[:, pad_left : pad_left + 20], out)


def test_causal_never_looks_ahead():
    x, offset_left, _ = make_inputs(2, 25, 4, 2, 8, 0)
    out = talk_conv(x, offset_left, None, 8, 0)
    for t in (0, 5, 24):
        changed = x.clone()
        changed[:, t + 1 :] += torch.randn_like(changed[:, t + 1 :])
        torch.testing.assert_close(talk_conv(changed, offset_left, None, 8, 0)[:, : t + 1], out[:, : t + 1])


def test_long_bf16_sequence_matches_float64():
    """T = 65,536 in bf16 with a large mean: a single global prefix sum would lose everything."""
    length, max_left, max_right = 65_536, 15, 15
    x = (torch.randn(1, length, 8) + 4.0).bfloat16()
    offset_left = torch.rand(1, length, 2).bfloat16()
    offset_right = torch.rand(1, length, 2).bfloat16()
    out = talk_conv(x, offset_left, offset_right, max_left, max_right)
    exact = talk_conv(x.double(), offset_left.double(), offset_right.double(), max_left, max_right)
    # bf16 keeps 8 significant bits: allow two units in the last place of the result.
    tolerance = 2 * 2.0**-8 * exact.abs().max()
    assert (out.double() - exact).abs().max() <= tolerance

    # Negative control: window sums as differences of one global bf16 prefix sum fail the bound.
    width = max_left + max_right + 1
    prefix_bf16 = torch.nn.functional.pad(x.cumsum(1), (0, 0, 1, 0))
    prefix_exact = torch.nn.functional.pad(x.double().cumsum(1), (0, 0, 1, 0))
    windows_bf16 = (prefix_bf16[:, width:] - prefix_bf16[:, :-width]).double() / width
    windows_exact = (prefix_exact[:, width:] - prefix_exact[:, :-width]) / width
    assert (windows_bf16 - windows_exact).abs().max() > 10 * tolerance


def test_long_float32_sequence_keeps_edge_precision():
    """At T = 70,000 a float32 edge t - offset * max_left keeps only 7 fractional bits; the
    window edges must be formed relative to t so that float32 still matches float64."""
    length, max_left, max_right = 70_000, 7, 5
    x, offset_left, offset_right = make_inputs(1, length, 2, 1, max_left, max_right, dtype=torch.float32)
    inputs = [t.clone().requires_grad_() for t in (x, offset_left, offset_right)]
    exact_inputs = [t.detach().double().requires_grad_() for t in inputs]
    out = talk_conv(*inputs, max_left, max_right)
    exact = talk_conv(*exact_inputs, max_left, max_right)
    assert_close_to_reference(out, exact, torch.float32)
    grad = torch.randn_like(exact)
    out.backward(grad.float())
    exact.backward(grad)
    for approximate, reference in zip(inputs, exact_inputs, strict=True):
        assert_close_to_reference(approximate.grad, reference.grad, torch.float32, scale=max_left + max_right)


@settings(max_examples=30, deadline=None)
@given(
    batch=st.integers(1, 2),
    length=st.integers(1, 24),
    heads=st.integers(1, 3),
    head_size=st.integers(1, 3),
    max_left=st.integers(0, 9),
    max_right=st.integers(0, 9),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    seed=st.integers(0, 2**31 - 1),
)
def test_property_random_shapes(batch, length, heads, head_size, max_left, max_right, dtype, seed):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, length, heads * head_size, generator=generator, dtype=torch.float64)
    offset_left = 1.2 * torch.rand(batch, length, heads, generator=generator, dtype=torch.float64)
    offset_right = (
        1.2 * torch.rand(batch, length, heads, generator=generator, dtype=torch.float64) if max_right else None
    )
    cast = [t if t is None else t.to(dtype) for t in (x, offset_left, offset_right)]
    out = talk_conv(*cast, max_left, max_right)
    expected = naive_talk_conv(*[t if t is None else t.double() for t in cast], max_left, max_right)
    assert out.shape == x.shape and out.dtype == dtype
    assert_close_to_reference(out, expected, dtype)
