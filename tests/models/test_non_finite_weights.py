"""A checkpoint whose weights hold NaN or inf loads with a warning that names the folder and the weights."""

import warnings

import pytest
import torch
from safetensors.torch import load_file, save_file

from talk_hf.models.non_finite_weights import NonFiniteWeightsWarning

from .helpers import CASE_IDS, CASES


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_loading_nan_or_inf_weights_warns_naming_the_folder_and_the_weights(case, tmp_path):
    case.model().save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    names = sorted(name for name, tensor in weights.items() if tensor.dim() >= 2 and "embed" not in name)
    nan_name, inf_name = names[0], names[-1]
    weights[nan_name].view(-1)[:3] = float("nan")
    weights[inf_name].view(-1)[-1] = -float("inf")
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})

    with pytest.warns(NonFiniteWeightsWarning) as caught:
        model = case.head.from_pretrained(tmp_path)
    message = str(caught[0].message)
    assert f"loaded from {tmp_path} hold NaN or infinite values" in message
    assert f"{nan_name} (3 of {weights[nan_name].numel()})" in message
    assert f"{inf_name} (1 of {weights[inf_name].numel()})" in message
    assert message.count("(") == 2, message  # no other weight named
    assert torch.isnan(model.state_dict()[nan_name]).sum() == 3


@pytest.mark.parametrize("case", CASES[:2], ids=CASE_IDS[:2])
def test_finite_weights_load_without_the_warning(case, tmp_path):
    case.model().save_pretrained(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NonFiniteWeightsWarning)
        model, info = case.head.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"]
    assert all(torch.isfinite(tensor).all() for tensor in model.state_dict().values())
