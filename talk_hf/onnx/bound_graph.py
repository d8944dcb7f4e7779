"""Running an exported graph on torch tensors in place.

`BoundGraph.run` hands ONNX Runtime the memory of the given torch tensors (``IOBinding``): it reads
the inputs and writes the outputs where the tensors lie, so a decoding step's states and logits are
never copied through numpy.  CPU tensors only (the sessions run on ONNX Runtime's CPU provider).

Binding a name through onnxruntime's Python API costs several microseconds (a graph's decoding step,
about a millisecond), and a decoding step gives mostly the memory of the step before (the source, the
positions): a `Binding` rebinds only the names whose memory (address, shape) changed since its last
run, and copies small inputs that are new at every step (the token ids) into buffers of its own,
bound once.
"""

from __future__ import annotations

import threading
from collections.abc import Collection

import numpy as np
import onnxruntime as ort
import torch

# The element types the exported graphs use: ONNX Runtime's name -> torch's and numpy's.
_TORCH_TYPES = {"tensor(float)": torch.float32, "tensor(int64)": torch.int64}
_NUMPY_TYPES = {torch.float32: np.float32, torch.int64: np.int64}


class Binding:
    """One ``IOBinding`` of a session, the memory bound to each name (address, shape) and its own
    buffers of staged inputs.
    Not shared between threads: each thread runs on its own (`BoundGraph.run`)."""

    def __init__(self, session: ort.InferenceSession):
        self.io = session.io_binding()
        self.bound: dict[str, tuple[int, torch.Size]] = {}
        self.staged: dict[str, torch.Tensor] = {}

    def bind_input(self, name: str, tensor: torch.Tensor) -> None:
        """Bind ``tensor`` (contiguous, of the graph's dtype), unless its memory is bound already."""
        memory = (tensor.data_ptr(), tensor.shape)
        if self.bound.get(name) == memory:
            return
        if tensor.numel() == 0:  # a window of 0 rows: no memory to hand over, an empty array of the shape
            self.io.bind_cpu_input(name, tensor.numpy())
        else:
            self.io.bind_input(name, "cpu", 0, _NUMPY_TYPES[tensor.dtype], tuple(tensor.shape), memory[0])
        self.bound[name] = memory

    def stage_input(self, name: str, tensor: torch.Tensor, dtype: torch.dtype) -> None:
        """Copy ``tensor`` (any layout, converted to ``dtype``) into this binding's buffer of ``name``, bound
        once per shape: cheaper than binding a new small tensor."""
        buffer = self.staged.get(name)
        if buffer is None or buffer.shape != tensor.shape:
            buffer = self.staged[name] = torch.empty(tensor.shape, dtype=dtype)
        buffer.copy_(tensor)
        self.bind_input(name, buffer)

    def bind_output(self, name: str, tensor: torch.Tensor) -> None:
        """Have the run write ``tensor`` (contiguous, of the graph's dtype), unless it does already."""
        memory = (tensor.data_ptr(), tensor.shape)
        if self.bound.get(name) == memory:
            return
        if tensor.numel() == 0:  # nothing to write: ONNX Runtime allocates the empty output itself
            self.io.bind_output(name, "cpu")
        else:
            self.io.bind_output(name, "cpu", 0, _NUMPY_TYPES[tensor.dtype], tuple(tensor.shape), memory[0])
        self.bound[name] = memory


class BoundGraph:
    """One ONNX Runtime session, run on torch tensors (`run`).

    Args:
        session: a CPU session of one exported graph, whose inputs and outputs are float32 or int64.
        path: the graph's file, for messages.
    """

    def __init__(self, session: ort.InferenceSession, path: str):
        self.session, self.path = session, path
        declared = [*session.get_inputs(), *session.get_outputs()]
        unknown = {value.name: value.type for value in declared if value.type not in _TORCH_TYPES}
        if unknown:
            raise ValueError(f"{path} declares inputs or outputs of types no export writes: {unknown}; re-export it")
        self.input_types = {value.name: _TORCH_TYPES[value.type] for value in session.get_inputs()}
        self.output_names = [value.name for value in session.get_outputs()]
        self._threads = threading.local()  # .binding: each thread's own `Binding`

    def new_binding(self) -> Binding:
        return Binding(self.session)

    def run(
        self,
        inputs: dict[str, torch.Tensor],
        outputs: dict[str, torch.Tensor],
        binding: Binding | None = None,
        staged: Collection[str] = (),
    ) -> None:
        """Run the graph on ``inputs`` (every input by name), writing each output into the tensor of its
        name in ``outputs`` (allocated by the caller in the output's shape, float32 or int64).

        Inputs of another dtype or layout are converted first (a copy only then); the outputs must be
        contiguous CPU tensors of the graph's types, as the caller allocates them.  Every name is bound
        to the memory given in this call before the run.

        Args:
            binding: the `Binding` to run on (one the caller keeps for a decoding); None: this thread's.
            staged: names of small inputs to copy into the binding's own buffers (`Binding.stage_input`).
        """
        if binding is None:
            binding = getattr(self._threads, "binding", None)
            if binding is None:
                binding = self._threads.binding = self.new_binding()
        bound, kept = binding.bound, []  # kept: the converted inputs, alive until the run ends
        for name, dtype in self.input_types.items():
            tensor = inputs[name]
            if name in staged:
                binding.stage_input(name, tensor, dtype)
                continue
            if tensor.dtype != dtype or not tensor.is_contiguous():
                tensor = tensor.to(dtype).contiguous()
                kept.append(tensor)
            if bound.get(name) != (tensor.data_ptr(), tensor.shape):
                binding.bind_input(name, tensor)
        for name in self.output_names:
            tensor = outputs[name]
            if bound.get(name) != (tensor.data_ptr(), tensor.shape):
                binding.bind_output(name, tensor)
        self.session.run_with_iobinding(binding.io)
