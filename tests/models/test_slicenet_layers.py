"""SliceNet's building blocks: the convolution types against t2t's ``subseparable_conv`` written out
part by part, their one-position decoding steps, Table 1's parameter counts, TensorFlow's orthogonal
initialisation, the steps' reach, and the timing signal."""

import math

import pytest
import torch

from talk_hf import ConvCache
from talk_hf.layers import slicenet_step
from talk_hf.layers.slicenet_attention import TimingSignal
from talk_hf.layers.slicenet_conv import ConvInit, ConvStep, SliceConv
from talk_hf.layers.slicenet_step import depthwise_taps, keeping_step_weights

SEPARABILITIES = [0, 1, 4, 16, -1, -2, -3]


def _taps_conv(x, kernel, dilation):
    """A "VALID" convolution written as a sum over taps: x (B, L, c_in), kernel (k, c_in, c_out)."""
    length = x.shape[1] - (kernel.shape[0] - 1) * dilation
    return sum(x[:, j * dilation : j * dilation + length] @ kernel[j] for j in range(kernel.shape[0]))


def _taps_separable(x, depthwise, pointwise, dilation):
    """TF's ``separable_conv2d``: depthwise (k, c_in) per channel, then pointwise (c_in, c_out)."""
    length = x.shape[1] - (depthwise.shape[0] - 1) * dilation
    spatial = sum(x[:, j * dilation : j * dilation + length] * depthwise[j] for j in range(depthwise.shape[0]))
    return spatial @ pointwise


def t2t_subseparable_conv(conv: SliceConv, x: torch.Tensor) -> torch.Tensor:
    """t2t's ``subseparable_conv`` (common_layers.py, June 2017) on ``conv``'s weights, read in
    TensorFlow's per-part layout: split the channels, convolve each part, concatenate, [1x1]."""
    s = conv.separability
    spatial, pointwise = conv.spatial_weight, conv.pointwise_weight
    if s == 0:
        return _taps_separable(x, spatial[:, 0].t(), pointwise[:, :, 0].t(), conv.dilation)
    parts = x.chunk(abs(s), dim=-1)
    outputs = []
    for index, part in enumerate(parts):
        if s > 0:  # a regular convolution per part: TF kernel [k, 1, c_in / s, c_out / s]
            rows = spatial.chunk(s)[index]
            outputs.append(_taps_conv(part, rows.permute(2, 1, 0), conv.dilation))
        else:  # a separable convolution per part
            depthwise = spatial.chunk(-s)[index][:, 0].t()
            outputs.append(_taps_separable(part, depthwise, pointwise.chunk(-s)[index][:, :, 0].t(), conv.dilation))
    out = torch.cat(outputs, dim=-1)
    if s > 1:  # the 1x1 mixing convolution, with bias
        out = out @ pointwise[:, :, 0].t() + conv.pointwise_bias
    return out


def _random_conv(in_channels, out_channels, kernel_size, dilation, separability, seed=0):
    torch.manual_seed(seed)
    conv = SliceConv(in_channels, out_channels, kernel_size, dilation, separability).double()
    for parameter in conv.parameters():
        torch.nn.init.normal_(parameter)
    return conv


@pytest.mark.parametrize("separability", SEPARABILITIES)
@pytest.mark.parametrize("channels", [(48, 48), (96, 48)], ids=["48-48", "96-48"])
def test_slice_conv_is_t2t_subseparable_conv(separability, channels):
    generator = torch.Generator().manual_seed(separability + 100)
    kernel_size = int(torch.randint(1, 4, (), generator=generator)) * 2 + 1
    dilation = int(torch.randint(1, 4, (), generator=generator))
    conv = _random_conv(*channels, kernel_size, dilation, separability)
    x = torch.randn(2, conv.history_size + 11, channels[0], dtype=torch.float64, generator=generator)
    expected = t2t_subseparable_conv(conv, x)
    torch.testing.assert_close(conv(x), expected, rtol=1e-10, atol=1e-10)
    # A single position (a decoding step) takes the O(k C) path and gives the same output.
    torch.testing.assert_close(conv(x[:, -conv.history_size - 1 :]), expected[:, -1:], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("separability", [0, -2])
def test_decoding_step_of_a_beam_sized_batch_sums_its_taps_one_by_one(separability):
    conv = _random_conv(48, 48, 9, 2, separability)
    batch = slicenet_step.TAP_PRODUCT_ELEMENTS // (9 * 48) + 1  # B k C_in taps: one product would be too large
    x = torch.randn(batch, conv.history_size + 1, 48, dtype=torch.float64)
    torch.testing.assert_close(conv(x), t2t_subseparable_conv(conv, x), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(
    "batch", [2, slicenet_step.TAP_PRODUCT_ELEMENTS // (5 * 16) + 1], ids=["product", "tap-by-tap"]
)
def test_depthwise_taps_accumulate_bf16_in_float32(batch):
    taps, kernel = torch.randn(batch, 5, 16).bfloat16(), torch.randn(5, 16)
    out = depthwise_taps(taps, kernel)
    assert out.shape == (batch, 1, 16) and out.dtype == torch.float32
    expected = (taps.double() * kernel.double()).sum(1, keepdim=True)
    torch.testing.assert_close(out.double(), expected, rtol=1e-6, atol=1e-6)


def test_step_weights_are_kept_only_within_keeping_step_weights():
    conv = _random_conv(8, 8, 3, 1, 0).float()
    x = torch.randn(1, conv.history_size + 1, 8)
    assert conv.step_weights(torch.float32) is not conv.step_weights(torch.float32)  # derived at every step
    with torch.no_grad(), keeping_step_weights(conv):
        kept = conv.step_weights(torch.float32)
        assert conv.step_weights(torch.float32) is kept
        assert kept.spatial.shape == (3, 8) and kept.spatial.is_contiguous()  # the depthwise kernel, tap-major
        torch.testing.assert_close(conv(x), t2t_subseparable_conv(conv, x))
    assert conv.kept_step_weights is None and not conv.keeps_step_weights
    with torch.no_grad():
        conv.spatial_weight.mul_(2.0)  # a step after the block sees the new weights
        torch.testing.assert_close(conv(x), t2t_subseparable_conv(conv, x))


@pytest.mark.parametrize("separability", [0, 1, 2, -2])
def test_conv_step_gradients_in_float64(separability):
    step = ConvStep(4, 4, 3, 2, separability, causal=True, eps=1e-6).double()
    for parameter in step.parameters():
        torch.nn.init.normal_(parameter)
    names = [name for name, _ in step.named_parameters()]
    x = torch.randn(2, 7, 4, dtype=torch.float64, requires_grad=True)

    def run(x, *parameters):
        return torch.func.functional_call(step, dict(zip(names, parameters, strict=True)), (x,))

    parameters = [parameter.detach().clone().requires_grad_() for parameter in step.parameters()]
    assert torch.autograd.gradcheck(run, (x, *parameters))


@pytest.mark.parametrize(
    "separability, expected",
    [
        (1, lambda c, k, g: k * c * c),  # non-separable
        (0, lambda c, k, g: k * c + c * c),  # fully separable
        (4, lambda c, k, g: k * c * c // g + c * c + c),  # g-sub-separable (+ the 1x1's bias)
        (-4, lambda c, k, g: k * c + c * c // g),  # g-super-separable
    ],
    ids=["none", "full", "sub-4", "super-4"],
)
def test_parameter_counts_follow_table_1(separability, expected):
    channels, kernel_size = 48, 7
    conv = SliceConv(channels, channels, kernel_size, 1, separability)
    assert sum(p.numel() for p in conv.parameters()) == expected(channels, kernel_size, abs(separability))


@pytest.mark.parametrize("separability", [0, 1, 4, -3])
def test_orthogonal_init_has_tensorflows_orientation(separability):
    """TF flattens each part's kernel [k, 1, c_in, c_out] to (k c_in, c_out) and makes it orthogonal."""
    channels, kernel_size, gain = 24, 5, 1.5
    conv = SliceConv(channels, channels, kernel_size, 1, separability, ConvInit("orthogonal", gain, std=0.02))
    conv.init_weights()
    parts = max(abs(separability), 1)
    if separability <= 0:  # each part's depthwise kernel is one column: a vector of norm `gain`
        norms = [part.norm() for part in conv.spatial_weight.chunk(parts)]
        torch.testing.assert_close(torch.stack(norms), torch.full((parts,), gain))
        matrices = [w[:, :, 0].t() for w in conv.pointwise_weight.chunk(parts)]  # (c_in / g, c_out / g) each
    else:
        matrices = [w.permute(2, 1, 0).reshape(-1, w.shape[0]) for w in conv.spatial_weight.chunk(parts)]
    for matrix in matrices:  # more rows than columns: orthogonal columns of norm `gain`
        torch.testing.assert_close(matrix.t() @ matrix, gain**2 * torch.eye(matrix.shape[1]), rtol=1e-5, atol=1e-5)


def _step(*args, causal: bool) -> ConvStep:
    """A ConvStep(in, out, k, dilation, separability) with t2t's initialisation."""
    step = ConvStep(*args, causal=causal, eps=1e-6, conv_init=ConvInit("orthogonal", 1.0, std=0.02)).eval()
    step.conv.init_weights()
    return step


def test_causal_step_reads_only_its_window_of_the_past():
    step = _step(6, 6, 3, 4, 0, causal=True)
    x = torch.randn(1, 30, 6)
    out = step(x)
    for position in (10, 20):
        changed = x.clone()
        changed[:, position] += 1.0
        moved = (step(changed) != out).any(-1)[0].nonzero().flatten()
        assert moved.min() == position and moved.max() == position + step.history_size  # (k - 1) * dilation = 8


def test_encoder_step_is_centred():
    step = _step(6, 6, 5, 2, 0, causal=False)
    x = torch.randn(1, 30, 6)
    changed = x.clone()
    changed[:, 15] += 1.0
    moved = (step(changed) != step(x)).any(-1)[0].nonzero().flatten()
    assert moved.tolist() == [11, 13, 15, 17, 19]  # the taps, (k - 1) / 2 * dilation = 4 to each side


@pytest.mark.parametrize("separability", [0, 1, 3, -2])
def test_causal_step_with_a_cache_equals_the_full_step(separability):
    step = _step(6, 6, 5, 3, separability, causal=True)
    step.cache_index = 0
    x = torch.randn(2, 40, 6)  # longer than the window (12)
    cache = ConvCache([step.history_size])
    chunks = [step(x[:, :3], cache=cache)] + [step(x[:, t : t + 1], cache=cache) for t in range(3, 20)]
    chunks.append(step(x[:, 20:], cache=cache))
    torch.testing.assert_close(torch.cat(chunks, dim=1), step(x), rtol=1e-5, atol=1e-5)


def test_timing_signal_is_t2ts():
    timing = TimingSignal(40, 16, 1.0, 1.0e4)
    signal = timing(torch.tensor([[0, 1, 7]]))[0]
    assert signal.shape == (3, 40) and not signal[:, 32:].any()
    increment = math.log(1.0e4) / 15
    for row, position in enumerate((0, 1, 7)):
        for channel in (0, 1, 5, 15):
            frequency = math.exp(-channel * increment)
            assert signal[row, channel].item() == pytest.approx(math.sin(position * frequency), abs=1e-6)
            assert signal[row, 16 + channel].item() == pytest.approx(math.cos(position * frequency), abs=1e-6)
    assert signal[1, 15].item() == pytest.approx(math.sin(1.0e-4), abs=1e-9)  # the slowest timescale is 1e4


def test_paper_timing_signal_interleaves_the_whole_depth():
    depth = 10
    signal = TimingSignal(depth, None, 1.0, 1.0e4)(torch.tensor([[3]]))[0, 0]
    for pair in range(depth // 2):
        angle = 3 / 1.0e4 ** (2 * pair / depth)
        assert signal[2 * pair].item() == pytest.approx(math.sin(angle), abs=1e-6)
        assert signal[2 * pair + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)
