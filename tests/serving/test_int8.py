"""`talk_hf.quantize_int8`: every linear layer becomes int8, logits stay close to float32, generation
works for every family, and nothing is ever left silently unconverted or saved wrong."""

from __future__ import annotations

import sys

import pytest
import torch
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantizedLinear

import talk_hf
import talk_hf.quantization

from ..models.helpers import ALL_CASES, ALL_IDS, CASES, PAD, Case, generation_prompt, model_inputs

METHODS = ["dynamic", "weight_only"]


def _model(case: Case) -> nn.Module:
    """The tiny model of ``case`` with weights of a trained model's scale (the helpers' init_std 0.5
    gives activations whose outliers no 8-bit per-tensor scale resolves)."""
    return case.model() if case.name == "slicenet" else case.model(init_std=0.1)


def _needs(method: str) -> None:
    if method == "weight_only":
        pytest.importorskip("torchao")


def _linear_names(model: nn.Module) -> list[str]:
    return [name for name, module in model.named_modules() if isinstance(module, nn.Linear)]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("case", ALL_CASES, ids=ALL_IDS)
def test_every_linear_layer_is_int8(case, method):
    _needs(method)
    model = _model(case)
    names = _linear_names(model)
    assert "lm_head" in names
    assert talk_hf.quantize_int8(model, method=method) == len(names)
    assert model.int8_quantization == talk_hf.quantization.Int8Quantization(method, tuple(names))
    for name in names:
        module = model.get_submodule(name)
        if method == "dynamic":
            assert isinstance(module, DynamicQuantizedLinear), name
            assert module.weight().dtype == torch.qint8, name
        else:
            from torchao.quantization import Int8Tensor

            assert isinstance(module.weight, Int8Tensor), name
            assert module.weight.qdata.dtype == torch.int8, name
    if method == "dynamic":
        assert not _linear_names(model)
    assert model.get_input_embeddings().weight.dtype == torch.float32  # the embedding, once tied, stays float


@pytest.mark.parametrize("full_range", [True, False], ids=["8-bit-activations", "7-bit-activations"])
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("case", ALL_CASES, ids=ALL_IDS)
def test_logits_close_to_float32(case, method, full_range, monkeypatch):
    """Error relative to the logits' spread: about 1% RMS here; wrong scales, a transposed weight or
    overflowing sums are off by the spread itself.  7-bit activations are the CPUs without VNNI."""
    _needs(method)
    if method == "weight_only" and not full_range:
        pytest.skip("weight-only int8 does not quantize the activations")
    monkeypatch.setattr(talk_hf.quantization, "full_range_activations", lambda: full_range)
    model = _model(case)
    inputs = model_inputs(case, batch=4)
    with torch.no_grad():
        expected = model(**inputs).logits
        talk_hf.quantize_int8(model, method=method)
        if method == "dynamic":
            assert model.lm_head.reduce_range is not full_range
        error = model(**inputs).logits - expected
    spread = expected.std()
    assert error.pow(2).mean().sqrt() < 0.03 * spread
    assert error.abs().max() < 0.15 * spread


@pytest.mark.parametrize("mode", ["greedy", "beam", "sample"])
@pytest.mark.parametrize("case", ALL_CASES, ids=ALL_IDS)
def test_generate(case, mode):
    model = _model(case)
    talk_hf.quantize_int8(model)
    settings = {
        "greedy": dict(num_beams=1, do_sample=False),
        "beam": dict(num_beams=3, do_sample=False, num_return_sequences=2),
        "sample": dict(num_beams=1, do_sample=True),
    }[mode]
    prompt = generation_prompt(case, batch=2)
    torch.manual_seed(0)
    output = model.generate(**prompt, max_new_tokens=6, min_new_tokens=6, pad_token_id=PAD, **settings)
    rows = 2 * settings.get("num_return_sequences", 1)
    start = 1 if case.is_seq2seq else prompt["input_ids"].shape[1]
    assert output.shape == (rows, start + 6)
    assert output.min() >= 0 and output.max() < model.config.vocab_size


def test_weight_only_generates():
    """torchao weights go to ``F.linear`` through `talk_hf.ops.linear`, for one seq2seq model and one LM."""
    pytest.importorskip("torchao")
    for case in (CASES[0], CASES[1]):
        model = _model(case)
        talk_hf.quantize_int8(model, method="weight_only")
        output = model.generate(**generation_prompt(case), max_new_tokens=4, min_new_tokens=4, num_beams=2)
        assert output.shape[0] == 2


@pytest.mark.parametrize("method", METHODS)
def test_a_second_call_raises(method):
    _needs(method)
    model = _model(CASES[0])
    talk_hf.quantize_int8(model, method=method)
    with pytest.raises(ValueError, match=f"TaLKForConditionalGeneration is already int8 \\(method='{method}'"):
        talk_hf.quantize_int8(model, method="dynamic")


def test_a_model_quantized_elsewhere_raises():
    pytest.importorskip("torchao")
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    model = _model(CASES[1])
    quantize_(model, Int8WeightOnlyConfig(set_inductor_config=False))
    with pytest.raises(ValueError, match="has a Int8Tensor weight, already quantized"):
        talk_hf.quantize_int8(model)


def test_a_model_without_linear_layers_raises():
    with pytest.raises(ValueError, match="Sequential has no linear layer"):
        talk_hf.quantize_int8(nn.Sequential(nn.LayerNorm(4), nn.ReLU()))


def test_a_model_converted_by_torch_raises():
    model = nn.Sequential(nn.Linear(4, 4))
    model[0] = talk_hf.quantization._dynamic_int8_linear(model[0])
    with pytest.raises(ValueError, match="no linear layer .* \\(its 1 dynamic int8 linear layers are int8 already\\)"):
        talk_hf.quantize_int8(model)


def test_a_bare_linear_layer_raises():
    with pytest.raises(ValueError, match="model is itself an nn.Linear"):
        talk_hf.quantize_int8(nn.Linear(4, 4))


def test_weight_only_without_torchao_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchao.quantization", None)  # import fails as if not installed
    model = _model(CASES[1])
    with pytest.raises(ImportError, match="method='weight_only' needs torchao"):
        talk_hf.quantize_int8(model, method="weight_only")
    assert not hasattr(model, "int8_quantization")


def test_an_unknown_method_is_named():
    with pytest.raises(ValueError, match="method='int4' is not one of 'dynamic', 'weight_only'"):
        talk_hf.quantize_int8(_model(CASES[0]), method="int4")


def test_dynamic_refuses_half_precision_and_converts_nothing():
    """One float16 layer stops the call before any layer is converted."""
    model = _model(CASES[1])
    model.lm_head.half()
    before = _linear_names(model)
    with pytest.raises(ValueError, match="layer 'lm_head' of TaLKForCausalLM is torch.float16 on cpu"):
        talk_hf.quantize_int8(model)
    assert _linear_names(model) == before
    assert not hasattr(model, "int8_quantization")


def test_save_pretrained_refuses(tmp_path):
    model = _model(CASES[0])
    talk_hf.quantize_int8(model)
    with pytest.raises(RuntimeError, match="converted to int8 by talk_hf.quantize_int8"):
        model.save_pretrained(tmp_path / "int8")
    assert not (tmp_path / "int8").exists()
