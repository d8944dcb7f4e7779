"""Mixed-precision (autocast) training steps on the CPU and on CUDA, and CUDA models against the CPU.

`accelerate launch --mixed_precision bf16` (or fp16) runs the model under `torch.autocast`: the
linear layers then produce bf16/fp16 activations while parameters stay float32, so every mixer
core must hand the ops tensors of one dtype.
"""

import copy

import pytest
import torch

from ..tolerances import assert_tensor_sets_close
from .helpers import ALL_CASES, ALL_IDS, PAD, generation_prompt, training_inputs

AUTOCAST = [
    pytest.param("cpu", torch.bfloat16, id="cpu-bf16"),
    pytest.param("cuda", torch.bfloat16, id="cuda-bf16", marks=pytest.mark.gpu),
    pytest.param("cuda", torch.float16, id="cuda-fp16", marks=pytest.mark.gpu),
]


def _loss(case, model, device):
    """The training loss of `model` on the case's inputs."""
    inputs, labels = training_inputs(case, device=device)
    return model(**inputs, labels=labels).loss


def _gradients(model):
    return {name: parameter.grad.detach().float().cpu() for name, parameter in model.named_parameters()}


def _flat(gradients):
    return torch.cat([gradient.flatten() for gradient in gradients.values()])


@pytest.mark.parametrize("device,dtype", AUTOCAST)
@pytest.mark.parametrize("case", ALL_CASES, ids=ALL_IDS)
def test_autocast_training_step_follows_float32(case, device, dtype):
    # dropout 0: train mode is deterministic.  init_std 0.1, not the helpers' 0.5: at 0.5 the tiny
    # DynamicConv's kernel softmax saturates and bf16 rounding of its logits alone (on the PyTorch
    # path too) turns the gradient by 25 degrees.
    model = case.model(init_std=0.1).train().to(device)
    _loss(case, model, device).backward()
    expected_loss, expected = _loss(case, model, device).item(), _flat(_gradients(model))
    model.zero_grad(set_to_none=True)
    with torch.autocast(device, dtype=dtype):
        loss = _loss(case, model, device)
    loss.backward()
    gradients = _gradients(model)
    assert all(parameter.grad.dtype == torch.float32 for parameter in model.parameters())
    assert torch.isfinite(loss) and loss.item() == pytest.approx(expected_loss, rel=0.05)
    cosine = torch.nn.functional.cosine_similarity(_flat(gradients), expected, dim=0)
    assert cosine > 0.99, f"gradients under {dtype} autocast point elsewhere (cosine {cosine:.4f})"


@pytest.mark.gpu
@pytest.mark.parametrize("case", ALL_CASES, ids=ALL_IDS)
def test_cuda_model_matches_the_cpu_model(case):
    """float32 loss, every parameter's gradient and greedy generation agree across devices."""
    on_cpu = case.model().train()
    on_cuda = copy.deepcopy(on_cpu).cuda()
    loss_cpu, loss_cuda = _loss(case, on_cpu, "cpu"), _loss(case, on_cuda, "cuda")
    loss_cpu.backward()
    loss_cuda.backward()
    torch.testing.assert_close(loss_cuda.cpu(), loss_cpu, rtol=1e-5, atol=1e-5)
    assert_tensor_sets_close(_gradients(on_cuda), _gradients(on_cpu), rtol=1e-4, context=f"{case.name} on CUDA")

    prompt = generation_prompt(case)
    settings = dict(max_new_tokens=8, do_sample=False, num_beams=3, pad_token_id=PAD)
    expected = on_cpu.eval().generate(**prompt, **settings)
    generated = on_cuda.eval().generate(**{name: tensor.cuda() for name, tensor in prompt.items()}, **settings)
    assert torch.equal(generated.cpu(), expected)
