"""What a model `talk_hf.quantize_int8` converted cannot do raises, naming the operation, before
anything changes (`talk_hf.int8_model`); compiled decoding works with ``method="weight_only"``."""

from __future__ import annotations

import copy
import io

import huggingface_hub
import pytest
import torch
from torch import nn
from transformers import CompileConfig, PreTrainedModel

import talk_hf
from talk_hf.export import export_onnx

from ..models.helpers import CASES, PAD, generation_prompt, model_inputs

SEQ2SEQ, LM = CASES[0], CASES[1]
METHODS = ["dynamic", "weight_only"]
REFUSED = "was converted to int8 by talk_hf.quantize_int8"


def _int8_model(case=LM, method: str = "dynamic") -> nn.Module:
    if method == "weight_only":
        pytest.importorskip("torchao")
    model = case.model(init_std=0.1)
    talk_hf.quantize_int8(model, method=method)
    return model


def _count_forwards(model: nn.Module) -> list:
    calls = []
    model.register_forward_pre_hook(lambda module, args: calls.append(1))
    return calls


def _greedy(model: nn.Module, case, **settings) -> torch.Tensor:
    prompt = generation_prompt(case, batch=2)
    return model.generate(**prompt, max_new_tokens=5, min_new_tokens=5, pad_token_id=PAD, do_sample=False, **settings)


# --- compiled decoding ---------------------------------------------------------------------------


@pytest.mark.parametrize("case", [SEQ2SEQ, LM], ids=["seq2seq", "lm"])
def test_weight_only_compiled_decoding_equals_eager(case):
    """The torchao weight traces through ``F.linear`` (talk_hf::linear takes plain tensors only)."""
    model = _int8_model(case, "weight_only")
    eager = _greedy(model, case)
    compiled = _greedy(model, case, compile_config=CompileConfig(fullgraph=True, dynamic=False, backend="eager"))
    assert torch.equal(compiled, eager)


def test_dynamic_compile_config_is_refused_before_the_first_step():
    model = _int8_model(LM, "dynamic")
    forwards = _count_forwards(model)
    with pytest.raises(ValueError, match=r"generate\(compile_config=...\): .*method='dynamic'.*method='weight_only'"):
        _greedy(model, LM, compile_config=CompileConfig(fullgraph=True, backend="eager"))
    assert forwards == []
    assert _greedy(model, LM).shape == (2, 10)  # eager decoding is unaffected


def test_dynamic_compiled_forward_names_the_method():
    """The beam recipe ``torch.compile(model.forward)``: a full graph is refused with the reason; without
    ``fullgraph`` the int8 layers run eagerly between graphs, with the eager logits."""
    model = _int8_model(LM, "dynamic")
    inputs = model_inputs(LM)
    with torch.no_grad():
        expected = model(**inputs).logits
        with pytest.raises(torch._dynamo.exc.Unsupported, match=r"quantize_int8\(method='dynamic'\)"):
            torch.compile(model.forward, fullgraph=True, backend="eager")(**inputs)
        torch._dynamo.reset()
        logits = torch.compile(model.forward, backend="eager")(**inputs).logits
    assert torch.equal(logits, expected)


# --- training ------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
def test_training_is_refused(method):
    model = _int8_model(LM, method)
    for start_training in (model.train, lambda: model.train(True)):
        with pytest.raises(RuntimeError, match=rf"TaLKForCausalLM.train\(\): this TaLKForCausalLM {REFUSED}"):
            start_training()
        assert not model.training


def test_evaluation_that_restores_the_mode_works():
    """An evaluation loop that puts the model back in the mode it found (examples' evaluate, Trainer's)."""
    model = _int8_model()
    was_training = model.training
    model.eval()
    with torch.no_grad():
        model(**model_inputs(LM))
    model.train(was_training)
    assert model.train(False) is model and not model.training


def test_a_model_in_training_mode_is_left_in_eval_mode():
    model = LM.model(init_std=0.1).train()
    talk_hf.quantize_int8(model)
    assert not model.training and not any(module.training for module in model.modules())


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("with_norm", [True, False], ids=["with-float-parameters", "int8-layers-only"])
def test_a_plain_module_refuses_training_and_casts(method, with_norm):
    if method == "weight_only":
        pytest.importorskip("torchao")
    model = nn.Sequential(nn.Linear(4, 4), *([nn.LayerNorm(4)] if with_norm else []))
    talk_hf.quantize_int8(model, method=method)
    with pytest.raises(RuntimeError, match=rf"Sequential.train\(\): this Sequential {REFUSED}"):
        model.train()
    with pytest.raises(RuntimeError, match="casting Sequential to torch.float16"):
        model.half()
    assert type(model).__name__ == "Sequential" and isinstance(model, nn.Sequential)


# --- casts ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(
    ("cast", "dtype"),
    [
        (lambda model: model.half(), torch.float16),
        (lambda model: model.bfloat16(), torch.bfloat16),
        (lambda model: model.double(), torch.float64),
        (lambda model: model.to(torch.float16), torch.float16),
        (lambda model: model.to(dtype=torch.bfloat16), torch.bfloat16),
    ],
    ids=["half", "bfloat16", "double", "to-positional", "to-keyword"],
)
def test_dtype_casts_are_refused_and_change_nothing(cast, dtype, method):
    model = _int8_model(LM, method)
    with torch.no_grad():
        expected = model(**model_inputs(LM)).logits
        with pytest.raises(RuntimeError, match=rf"casting TaLKForCausalLM to {dtype}.*cast the floating-point model"):
            cast(model)
        assert torch.equal(model(**model_inputs(LM)).logits, expected)
    assert {parameter.dtype for parameter in model.parameters() if type(parameter) is nn.Parameter} == {torch.float32}


def test_casts_that_change_nothing_pass():
    model = _int8_model()
    assert model.float() is model and model.to("cpu") is model and model.cpu() is model


def test_dynamic_refuses_to_leave_the_cpu():
    model = _int8_model(LM, "dynamic")
    with pytest.raises(RuntimeError, match="moving TaLKForCausalLM to meta: .*run on the CPU only"):
        model.to("meta")
    assert model.get_input_embeddings().weight.device.type == "cpu"


# --- weights: tying, resizing -------------------------------------------------------------------


@pytest.mark.parametrize("case", [SEQ2SEQ, LM], ids=["seq2seq", "lm"])
def test_tie_weights_and_resize_are_refused(case):
    model = _int8_model(case)
    vocabulary = model.get_input_embeddings().weight.shape[0]
    name = case.head.__name__
    with pytest.raises(RuntimeError, match=rf"{name}.tie_weights\(\): this {name} {REFUSED}.*then quantize it"):
        model.tie_weights()
    with pytest.raises(RuntimeError, match=rf"{name}.resize_token_embeddings\(\): .*resize the floating-point"):
        model.resize_token_embeddings(vocabulary + 8)
    assert model.get_input_embeddings().weight.shape[0] == vocabulary


# --- saving, uploading, exporting ---------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("bound", [True, False], ids=["bound", "unbound"])
def test_save_pretrained_writes_nothing(tmp_path, bound, method):
    """Unbound, transformers' own save_pretrained runs: it refuses before creating the folder."""
    model = _int8_model(SEQ2SEQ, method)
    folder = tmp_path / "int8"
    save = model.save_pretrained if bound else lambda path: PreTrainedModel.save_pretrained(model, path)
    with pytest.raises(RuntimeError, match=f"save_pretrained: this TaLKForConditionalGeneration {REFUSED}"):
        save(folder)
    assert not folder.exists()


def test_push_to_hub_is_refused_before_the_network(monkeypatch):
    reached = []

    def create_repo(*args, **kwargs):
        reached.append(args)
        raise ConnectionError("the Hub was reached")

    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", create_repo)
    with pytest.raises(ConnectionError, match="the Hub was reached"):  # what a floating-point model reaches
        LM.model().push_to_hub("user/tiny")
    reached.clear()
    model = _int8_model()
    with pytest.raises(
        RuntimeError, match=f"push_to_hub: this TaLKForCausalLM {REFUSED}.*nothing was written or uploaded"
    ):
        model.push_to_hub("user/tiny")
    assert reached == []


def test_export_onnx_is_refused(tmp_path):
    model = _int8_model(SEQ2SEQ)
    with pytest.raises(
        RuntimeError, match=f"export_onnx: this TaLKForConditionalGeneration {REFUSED}.*quantize_exported"
    ):
        export_onnx(model, tmp_path / "onnx")
    assert not (tmp_path / "onnx").exists()


def test_the_int8_class_keeps_the_name_and_is_shared():
    first, second = _int8_model(), _int8_model()
    assert type(first) is type(second)
    assert type(first).__name__ == "TaLKForCausalLM" and isinstance(first, talk_hf.TaLKForCausalLM)
    assert type(LM.model()) is talk_hf.TaLKForCausalLM  # the model class itself is untouched


@pytest.mark.filterwarnings("ignore:TypedStorage is deprecated")  # torch's, unpickling the packed int8 weights
def test_copies_and_pickles_keep_the_refusals():
    """``copy.deepcopy`` and ``torch.save(model)`` rebuild the int8 class from the model's own class."""
    model = _int8_model()
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    for copied in (copy.deepcopy(model), torch.load(buffer, weights_only=False)):
        assert type(copied) is type(model) and copied.int8_quantization == model.int8_quantization
        with torch.no_grad():
            assert torch.equal(copied(**model_inputs(LM)).logits, model(**model_inputs(LM)).logits)
        with pytest.raises(RuntimeError, match=rf"TaLKForCausalLM.train\(\): this TaLKForCausalLM {REFUSED}"):
            copied.train()
