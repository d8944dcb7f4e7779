"""`torch.compile` of whole models: one graph for a training step, the same loss and gradients
(aot_eager: tracing and autograd; inductor: generated code around the custom ops).

Nothing in a forward breaks the graph, with the compiled kernels (the ops are custom ops with fake
kernels) or on the PyTorch path (as where no compiler builds the kernels).
"""

import pytest
import torch

from talk_hf.ops import _extension

from ..tolerances import assert_tensor_sets_close
from .helpers import CASE_IDS, CASES, training_inputs


@pytest.fixture
def compiled_kernels(monkeypatch):
    try:
        _extension.preflight("cpu")
    except _extension.ExtensionUnavailable as error:
        pytest.skip(str(error))
    monkeypatch.setenv("TALK_HF_BACKEND", "auto")


def _training_step(case, model):
    """Loss and gradients of one forward/backward of `model` (called eager or compiled)."""
    inputs, labels = training_inputs(case)
    model.zero_grad(set_to_none=True)
    loss = model(**inputs, labels=labels).loss
    loss.backward()
    parameters = getattr(model, "_orig_mod", model).named_parameters()  # the compiled wrapper prefixes names
    return loss.detach(), {name: p.grad.clone() for name, p in parameters if p.grad is not None}


def _assert_compiled_step_matches_eager(case, backend: str, context: str) -> None:
    """One fullgraph compile of the case's model (fails on any graph break): its training step gives
    the eager step's loss and gradients."""
    torch._dynamo.reset()
    model = case.model().train()  # dropout 0
    expected_loss, expected = _training_step(case, model)
    loss, gradients = _training_step(case, torch.compile(model, backend=backend, fullgraph=True))
    torch.testing.assert_close(loss, expected_loss, rtol=1e-5, atol=1e-6)
    assert_tensor_sets_close(gradients, expected, rtol=1e-4, context=context)


@pytest.mark.parametrize("backend", ["aot_eager", pytest.param("inductor", marks=pytest.mark.slow)])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_compiled_training_step_is_one_graph_and_matches_eager(case, backend, compiled_kernels):
    if backend == "inductor" and case.is_seq2seq:
        pytest.skip("inductor takes 20-50 s per seq2seq model on the CPU; the LMs compile the same blocks")
    _assert_compiled_step_matches_eager(case, backend, f"{case.name} under {backend}")


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_training_step_on_the_pytorch_path_is_one_graph(case, monkeypatch):
    monkeypatch.setenv("TALK_HF_BACKEND", "torch")
    _assert_compiled_step_matches_eager(case, "aot_eager", f"{case.name} on the PyTorch path")
