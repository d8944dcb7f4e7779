"""talk_hf.ops.linear: the C++ few-row kernel matches F.linear in every dtype, runs exactly where
the module docstring says, and leaves autograd, autocast and large inputs to F.linear."""

import pytest
import torch
import torch.nn.functional as F

import talk_hf
from talk_hf.layers.linear_layer import Linear
from talk_hf.ops import _extension
from talk_hf.ops import linear as linear_module
from talk_hf.ops.linear import MAX_ROWS, linear

from .helpers import TOLERANCES


@pytest.fixture(autouse=True)
def _needs_cpu_extension():
    try:
        _extension.preflight("cpu")
    except _extension.ExtensionUnavailable as error:
        pytest.skip(str(error))


class KernelCalled(Exception):
    pass


@pytest.fixture
def kernel_spy(monkeypatch):
    """Make the kernel raise `KernelCalled`, to see which calls reach it."""

    class Spy:
        def few_rows_linear(self, *args):
            raise KernelCalled

    monkeypatch.setattr(linear_module._extension, "load", lambda kind: Spy())


@pytest.mark.parametrize("dtype", list(TOLERANCES))
@pytest.mark.parametrize("rows", [1, 3, 4, 5, MAX_ROWS])
@pytest.mark.parametrize("in_features", [1, 37, 512])
def test_kernel_matches_the_float64_product(dtype, rows, in_features):
    x = torch.randn(rows, in_features, dtype=dtype)
    # 27 outputs: the kernel's groups of 8 weight rows, then a remainder of 3 read one at a time
    weight = torch.randn(27, in_features, dtype=dtype) / in_features**0.5
    bias = torch.randn(27, dtype=dtype)
    assert linear_module._kernels_for(x, weight, bias) is not None
    expected = x.double() @ weight.double().T + bias.double()
    atol, rtol = TOLERANCES[dtype]
    torch.testing.assert_close(linear(x, weight, bias).double(), expected, atol=4 * atol, rtol=4 * rtol)
    assert linear(x, weight, bias).dtype == dtype


def test_kernel_without_bias_with_leading_dims_and_a_strided_input():
    weight = torch.randn(30, 16, dtype=torch.float64)
    wide = torch.randn(2, 1, 32, dtype=torch.float64)
    x = wide[..., ::2]  # (2, 1, 16), not contiguous
    assert linear_module._kernels_for(x, weight, None) is not None
    out = linear(x, weight)
    assert out.shape == (2, 1, 30)
    torch.testing.assert_close(out, F.linear(x, weight), atol=1e-12, rtol=1e-12)


def test_kernel_gives_the_same_result_on_one_and_two_threads():
    x, weight, bias = torch.randn(2, 64), torch.randn(4096, 64), torch.randn(4096)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one_thread = linear(x, weight, bias)
        torch.set_num_threads(2)
        two_threads = linear(x, weight, bias)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one_thread, two_threads)  # every output owns one fixed summation order


def test_eligible_calls_reach_the_kernel(kernel_spy):
    with pytest.raises(KernelCalled):
        linear(torch.randn(1, 1, 8), torch.randn(4, 8), torch.randn(4))


@pytest.mark.parametrize(
    "case",
    [
        "too many rows",
        "grad",
        "non-contiguous weight",
        "mixed dtypes",
        "integer",
        "autocast",
        "torch backend",
        "cuda backend",
        "empty input",
        "wrong width",
        "wrong bias length",
        "bias on another device",
    ],
)
def test_other_calls_go_to_F_linear(case, kernel_spy, monkeypatch):
    x, weight, bias = torch.randn(2, 8), torch.randn(4, 8), torch.randn(4)
    if case == "too many rows":
        x = torch.randn(MAX_ROWS + 1, 8)
    elif case == "grad":
        weight.requires_grad_(True)
    elif case == "non-contiguous weight":
        weight = torch.randn(8, 4).T
    elif case == "mixed dtypes":
        bias = bias.double()
    elif case == "integer":
        x, weight, bias = x.long(), weight.long(), bias.long()
    elif case in ("torch backend", "cuda backend"):  # a CUDA-only choice leaves CPU layers to F.linear
        monkeypatch.setenv("TALK_HF_BACKEND", case.split()[0])
    elif case == "empty input":
        x = torch.randn(0, 8)
    elif case == "wrong width":
        x = torch.randn(2, 7)
    elif case == "wrong bias length":
        bias = torch.randn(5)
    elif case == "bias on another device":
        bias = bias.to("meta")
    if case in ("mixed dtypes", "wrong width", "wrong bias length", "bias on another device"):
        with pytest.raises(RuntimeError):  # F.linear's own error, not the kernel
            linear(x, weight, bias)
        return
    if case == "autocast":
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert linear(x, weight, bias).dtype == torch.bfloat16  # autocast applied, as to F.linear
        return
    torch.testing.assert_close(linear(x, weight, bias), F.linear(x, weight, bias), atol=0, rtol=0)


def test_without_the_extension_auto_falls_back_once_and_cpu_raises(monkeypatch):
    def unavailable(kind):
        raise _extension.ExtensionUnavailable(kind, "no C++ compiler", "install one")

    monkeypatch.setattr(linear_module._extension, "load", unavailable)
    monkeypatch.setattr(_extension, "_warned", set())
    x, weight = torch.randn(1, 8), torch.randn(4, 8)
    with pytest.warns(_extension.BackendFallbackWarning, match=r"no C\+\+ compiler") as caught:
        for _ in range(2):
            torch.testing.assert_close(linear(x, weight), F.linear(x, weight), atol=0, rtol=0)
    assert len(caught) == 1 and caught[0].filename == __file__  # points at linear's caller
    monkeypatch.setenv("TALK_HF_BACKEND", "cpu")
    with pytest.raises(_extension.ExtensionUnavailable, match=r"no C\+\+ compiler"):
        linear(x, weight)


def test_no_grad_takes_the_kernel_and_grad_mode_keeps_autograd(kernel_spy):
    layer = Linear(8, 4)
    x = torch.randn(1, 8)
    with torch.no_grad(), pytest.raises(KernelCalled):
        layer(x)
    out = layer(x)  # grad mode: weights require grad, so autograd records F.linear
    out.sum().backward()
    assert layer.weight.grad is not None and layer.bias.grad is not None


def test_linear_module_is_an_nn_linear_with_its_state_dict():
    layer = Linear(8, 4)
    assert isinstance(layer, torch.nn.Linear)
    assert set(layer.state_dict()) == {"weight", "bias"}


@pytest.mark.parametrize(
    "head, config",
    [
        (
            talk_hf.TaLKForCausalLM,
            talk_hf.TaLKLMConfig(
                vocab_size=50,
                d_model=32,
                decoder_layers=2,
                decoder_ffn_dim=64,
                decoder_conv_heads=4,
                decoder_max_offsets=[2, 5],
            ),
        ),
        (
            talk_hf.TaLKForConditionalGeneration,
            talk_hf.TaLKConfig(
                vocab_size=50,
                d_model=32,
                encoder_layers=2,
                decoder_layers=2,
                encoder_ffn_dim=64,
                decoder_ffn_dim=64,
                encoder_conv_heads=4,
                decoder_conv_heads=4,
                decoder_attention_heads=4,
                encoder_max_offsets=[2, 5],
                decoder_max_offsets=[2, 5],
                decoder_start_token_id=2,
            ),
        ),
    ],
)
def test_generation_with_the_kernel_gives_the_tokens_and_scores_of_F_linear(head, config, monkeypatch):
    torch.manual_seed(0)
    model = head(config).eval()
    prompt = torch.randint(3, 50, (1, 6))
    settings = dict(max_new_tokens=12, do_sample=False, output_scores=True, return_dict_in_generate=True)
    extension, calls = _extension.load("cpu"), []

    class Counting:  # the extension, counting the kernel's calls
        def __getattr__(self, name):
            return getattr(extension, name)

        def few_rows_linear(self, *args):
            calls.append(args[0].shape[0])
            return extension.few_rows_linear(*args)

    monkeypatch.setattr(linear_module._extension, "load", lambda kind: Counting())
    with_kernel = model.generate(prompt, num_beams=3, **settings)
    assert 3 in calls  # the decoding steps: one row per beam
    monkeypatch.setattr(linear_module, "_kernels_for", lambda *args: None)
    with_f_linear = model.generate(prompt, num_beams=3, **settings)
    assert torch.equal(with_kernel.sequences, with_f_linear.sequences)
    torch.testing.assert_close(torch.stack(with_kernel.scores), torch.stack(with_f_linear.scores), atol=1e-4, rtol=1e-4)
