"""The set-scale comparison of tests/tolerances.py passes rounding noise and catches real errors."""

import pytest
import torch

from .tolerances import NOISE_FLOOR, assert_tensor_sets_close


def _gradients():
    generator = torch.Generator().manual_seed(0)
    return {"weight": torch.randn(8, 8, generator=generator), "bias": torch.zeros(8)}


def test_noise_on_an_exactly_zero_tensor_passes():
    expected = _gradients()
    noisy = {name: tensor.clone() for name, tensor in expected.items()}
    noisy["bias"] += 10 * torch.finfo(torch.float32).eps * noisy["weight"].abs().max()
    assert_tensor_sets_close(noisy, expected, rtol=1e-3, context="noise")


def test_an_error_on_a_tensors_own_scale_fails_and_keeps_torchs_report():
    expected = _gradients()
    wrong = {name: tensor.clone() for name, tensor in expected.items()}
    wrong["weight"] *= 2  # e.g. a gradient summed twice
    with pytest.raises(AssertionError, match=r"(?s)step 1: weight \(noise floor .*\).*Greatest absolute difference"):
        assert_tensor_sets_close(wrong, expected, rtol=1e-3, context="step 1")


def test_an_error_above_the_noise_floor_on_a_zero_tensor_fails():
    expected = _gradients()
    wrong = {name: tensor.clone() for name, tensor in expected.items()}
    wrong["bias"][0] = 10 * NOISE_FLOOR * expected["weight"].abs().max()
    with pytest.raises(AssertionError, match="bias"):
        assert_tensor_sets_close(wrong, expected, rtol=1e-3)


def test_different_names_fail():
    expected = _gradients()
    with pytest.raises(AssertionError, match="names differ: \\['bias'\\]"):
        assert_tensor_sets_close({"weight": expected["weight"]}, expected, rtol=1e-3)
