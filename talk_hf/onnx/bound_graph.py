"""Running an exported graph on torch tensors in place.

`BoundGraph.run` hands ONNX Runtime the memory of the given torch tensors (``IOBinding``): it reads
the inputs and writes the outputs where the tensors lie, so a decoding step's states and logits are
never copied through numpy.  CPU tensors only (the sessions run on ONNX Runtime's CPU provider).
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import torch

# The element types the exported graphs use: ONNX Runtime's name -> torch's and numpy's.
_TORCH_TYPES = {"tensor(float)": torch.float32, "tensor(int64)": torch.int64}
_NUMPY_TYPES = {torch.float32: np.float32, torch.int64: np.int64}


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
        self.output_ranks = {value.name: len(value.shape) for value in session.get_outputs()}

    def run(self, inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor]) -> None:
        """Run the graph on ``inputs`` (every input by name), writing each output into the tensor of its
        name in ``outputs`` (allocated by the caller in the output's shape, float32 or int64).

        Inputs of another dtype or layout are converted first (a copy only then); the outputs must be
        contiguous CPU tensors of the graph's types, as the caller allocates them.
        """
        binding = self.session.io_binding()
        kept = []  # the converted inputs, alive until the run ends
        for name, dtype in self.input_types.items():
            tensor = inputs[name].to(dtype).contiguous()
            kept.append(tensor)
            if tensor.numel() == 0:  # no memory to hand over (a window of 0 rows): an empty array of the shape
                binding.bind_cpu_input(name, tensor.numpy())
            else:
                binding.bind_input(name, "cpu", 0, _NUMPY_TYPES[dtype], tuple(tensor.shape), tensor.data_ptr())
        for name in self.output_names:
            tensor = outputs[name]
            if tensor.numel() == 0:  # nothing to write: ONNX Runtime allocates the empty output itself
                binding.bind_output(name, "cpu")
            else:
                shape, pointer = tuple(tensor.shape), tensor.data_ptr()
                binding.bind_output(name, "cpu", 0, _NUMPY_TYPES[tensor.dtype], shape, pointer)
        self.session.run_with_iobinding(binding)
