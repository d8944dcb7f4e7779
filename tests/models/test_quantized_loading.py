"""transformers' own quantized loading, ``from_pretrained(..., quantization_config=TorchAoConfig(...))``, of
talk_hf's models: it loads (talk_hf's non-finite-weights check reads torchao's weights through their
``dequantize``), generates the float model's tokens, and the check still names a NaN weight."""

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import TorchAoConfig

from talk_hf.models.non_finite_weights import NonFiniteWeightsWarning

from .helpers import CASES, generation_prompt

quantization = pytest.importorskip("torchao.quantization")  # the serving extra


def torchao_int8_load(case, folder):
    return case.head.from_pretrained(folder, quantization_config=TorchAoConfig(quantization.Int8WeightOnlyConfig()))


# SliceNet has no linear layer but its output projection, which transformers keeps in float (below)
WITH_LINEAR_LAYERS = [case for case in CASES if case.name != "slicenet"]


@pytest.mark.parametrize("case", WITH_LINEAR_LAYERS, ids=[case.name for case in WITH_LINEAR_LAYERS])
def test_torchao_int8_load_generates_the_float_models_tokens(case, tmp_path):
    # init_std 0.02 (the default) keeps the logits' margins far above int8's per-row rounding of the weights (at
    # most half a step of max|w|/127): greedy tokens are then the float model's exactly.
    float_model = case.model(init_std=0.02)
    float_model.save_pretrained(tmp_path)
    quantized = torchao_int8_load(case, tmp_path)
    # every linear layer but the output projection, which transformers keeps (its modules_to_not_convert)
    linear = {
        name: type(module.weight) for name, module in quantized.named_modules() if isinstance(module, torch.nn.Linear)
    }
    assert linear.pop("lm_head") is torch.nn.Parameter
    assert set(linear.values()) == {quantization.Int8Tensor}
    prompt = generation_prompt(case)
    with torch.no_grad():
        expected = float_model.generate(**prompt, max_new_tokens=8, do_sample=False)
        tokens = quantized.generate(**prompt, max_new_tokens=8, do_sample=False)
    assert torch.equal(tokens, expected)


def test_torchao_int8_load_of_nan_weights_warns_naming_them(tmp_path):
    case = CASES[0]
    case.model().save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    name = next(name for name, tensor in sorted(weights.items()) if tensor.dim() == 2 and "embed" not in name)
    weights[name][0, :3] = float("nan")
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})

    with pytest.warns(NonFiniteWeightsWarning) as caught:
        model = torchao_int8_load(case, tmp_path)
    assert isinstance(model.state_dict()[name], quantization.Int8Tensor)
    row = weights[name].shape[1]  # the NaN spreads over its row's int8 scale
    assert f"{name} ({row} of {weights[name].numel()})" in str(caught[0].message)
    assert str(caught[0].message).count("(") == 1
