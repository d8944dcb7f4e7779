"""Inputs, tolerances, the CUDA-against-reference comparison and a spy on the compiled ops' kernels,
shared by the operator tests."""

import torch

from talk_hf.ops._compiled_op import CompiledOp

# Tolerances (atol, rtol) of each dtype against the float64 definition, for inputs of unit scale.
TOLERANCES = {
    torch.float64: (1e-10, 1e-10),
    torch.float32: (2e-5, 2e-5),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (1.6e-2, 1.6e-2),
}


def offsets_off_the_grid(shape, max_offset, dtype=torch.float64, generator=None):
    """Relative offsets in (0, 1) whose window edges t -/+ offset * max_offset sit at least 0.1
    tokens away from an integer, where the derivative would be one-sided (safe for gradcheck)."""
    if max_offset == 0:
        return torch.rand(shape, dtype=dtype, generator=generator)
    whole = torch.randint(0, max_offset, shape, generator=generator).to(dtype)
    fraction = 0.1 + 0.8 * torch.rand(shape, dtype=dtype, generator=generator)
    return (whole + fraction) / max_offset


def assert_close_to_reference(actual, expected, dtype, scale=1.0):
    """Compare a result computed in ``dtype`` with the float64 definition."""
    atol, rtol = TOLERANCES[dtype]
    torch.testing.assert_close(actual.double(), expected.double(), atol=atol * scale, rtol=rtol)


def misaligned(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of ``tensor`` whose data starts one element past a 16-byte boundary."""
    flat = torch.empty(tensor.numel() + 1, dtype=tensor.dtype, device=tensor.device)
    copy = flat[1:].view(tensor.shape)
    copy.copy_(tensor)
    assert copy.is_contiguous() and copy.data_ptr() % 16 != 0
    return copy


def compare_with_reference(op_cuda, op_reference, inputs, dtype, grad_scales, shift=False):
    """Forward and backward of ``op_cuda`` against ``op_reference`` in float64; with ``shift``, x (the
    first input) and the output's gradient are misaligned copies (cloning would align them)."""
    low = [
        (misaligned(t.detach()) if shift and i == 0 else t.detach().clone()).requires_grad_()
        for i, t in enumerate(inputs)
    ]
    high = [t.detach().double().requires_grad_() for t in inputs]
    out_low, out_high = op_cuda(*low), op_reference(*high)
    assert out_low.dtype == dtype and out_low.device.type == "cuda"
    assert_close_to_reference(out_low, out_high, dtype)
    grad_out = torch.randn_like(out_high)
    out_low.backward(misaligned(grad_out.to(dtype)) if shift else grad_out.to(dtype))
    out_high.backward(grad_out)
    for tensor_low, tensor_high, scale in zip(low, high, grad_scales, strict=True):
        assert tensor_low.grad.dtype == dtype
        assert_close_to_reference(tensor_low.grad, tensor_high.grad, dtype, scale=scale)


def record_kernel_calls(monkeypatch) -> list[tuple[str, str, str]]:
    """Patch `CompiledOp.kernel` (through ``monkeypatch``) to record, in the list returned, the
    (op name, device type, direction) of each kernel that a compiled op looks up to run."""
    calls = []
    kernel = CompiledOp.kernel

    def recording_kernel(self, tensor, direction):
        calls.append((self.name, tensor.device.type, direction))
        return kernel(self, tensor, direction)

    monkeypatch.setattr(CompiledOp, "kernel", recording_kernel)
    return calls
