"""One request's decoding steps on buffers of their own: `BoundSteps`.

Copied beside ``runner.py`` into every exported folder (numpy and ONNX Runtime only).  ``session.run``
wraps each input anew and hands each output over in memory of its own, and reordering the beams by
fancy indexing makes new windows at every step.  `BoundSteps` runs the step graph through ONNX
Runtime's ``IOBinding`` instead, on two sets of windows: a step reads one set and writes the other, and
beam search's reordering gathers the windows back into the set the step just read, so that the steps
allocate no windows or logits.  The request's source is bound once; the token ids, positions and token
mask are copied into buffers bound once.  The arrays are checked as ``OnnxGenerator.step`` checks them
(`runner_inputs.GraphInputs`): the states and the source once, when bound, and the ids, positions and
token mask at every step, against them.
"""

from __future__ import annotations

import numpy as np

PER_STEP = ("ids", "positions", "token_mask")  # the parameters of ``OnnxGenerator.step`` that change every step


class BoundSteps:
    """The step graph of one request, bound to its windows, source and buffers (`step`, `reorder`).

    Args:
        session: the step graph's ONNX Runtime session.
        inputs: its `runner_inputs.GraphInputs`, of the parameters ``ids``, ``positions``, ``token_mask``,
            ``states`` and ``source`` (`OnnxGenerator.step`'s).
        vocab_size: the logits' size V.
        states: each layer's (B, history, C) float32 window before the first step (copied);
            source: the step's source inputs, one row per source (each serving n consecutive step rows:
            its beams; empty for a causal LM), bound as they are (a copy of one that is not C-contiguous).

    Raises:
        ValueError: states or source that ``OnnxGenerator.step`` refuses, naming them.
    """

    def __init__(self, session, inputs, vocab_size: int, states: list[np.ndarray], source: list[np.ndarray]):
        self.session, self.inputs, self.vocab_size = session, inputs, vocab_size
        held = inputs.named(dict(states=states, source=source), "OnnxGenerator.bind_steps")
        self.sizes = inputs.check(held, call="OnnxGenerator.bind_steps")  # what every step's arrays must match
        state_inputs, self.step_inputs = inputs.parameters["states"], [inputs.parameters[name] for name in PER_STEP]
        self.source = {name: np.ascontiguousarray(array) for name, array in held.items() if name not in state_inputs}
        windows = [np.array(window, order="C") for window in states]  # C-contiguous copies of the checked float32
        self.windows = (windows, [np.empty_like(window) for window in windows])
        self.reads = 0  # the set of windows that the next step reads
        output_names = [output.name for output in session.get_outputs()]
        self.logits_name, state_outputs = output_names[0], output_names[1:]
        self.staged: dict[str, np.ndarray] = {}  # the ids, positions and token mask (B, 1), copied in at each step
        self.logits = None  # (B, 1, V), written by every step
        self.bindings = (session.io_binding(), session.io_binding())  # binding i reads windows[i], writes the other
        for reads, binding in enumerate(self.bindings):
            for name, array in self.source.items():
                _bind(binding.bind_input, name, array)
            read, written = self.windows[reads], self.windows[1 - reads]
            for name, output, window, new_window in zip(state_inputs, state_outputs, read, written, strict=True):
                _bind(binding.bind_input, name, window)
                _bind(binding.bind_output, output, new_window)

    @property
    def states(self) -> list[np.ndarray]:
        """Each layer's (B, history, C) window after the last step (or the reorder after it); the step
        after next writes into these arrays: copy one to keep it."""
        return self.windows[self.reads]

    def step(self, ids: np.ndarray, positions: np.ndarray, token_mask: np.ndarray) -> np.ndarray:
        """One token per row: ids, positions, token_mask (B, 1) int64 -> the logits (B, V), which the next
        step overwrites; the new windows become `states`.  Arrays ``OnnxGenerator.step`` refuses (of
        another dtype or shape, rows other than the states' and the source's, ids outside the
        vocabulary) are refused, naming them."""
        arguments = dict(zip(self.step_inputs, (ids, positions, token_mask), strict=True))
        self.inputs.check(arguments, self.sizes, call="BoundSteps.step")
        if self.logits is None or len(self.logits) != len(ids):  # the first step, or (no states or source) new rows
            self._bind_rows(len(ids))
        for name, array in arguments.items():
            np.copyto(self.staged[name], array)
        self.session.run_with_iobinding(self.bindings[self.reads])
        self.reads = 1 - self.reads
        return self.logits[:, 0]

    def reorder(self, rows: np.ndarray) -> None:
        """Beam search's reordering of the windows: each one's row i becomes its row ``rows[i]``, gathered
        into the set the last step read (not needed any more); nothing to do where ``rows`` is 0, 1, ...,
        B - 1 (the beams stayed where they were).

        Raises:
            ValueError: ``rows`` not a (B,) integer array of rows in [0, B).
        """
        if not self.windows[0]:  # a model without windows: nothing to reorder
            return
        batch = len(self.windows[0][0])
        if not isinstance(rows, np.ndarray) or rows.dtype.kind not in "iu" or rows.shape != (batch,):
            got = f"dtype {rows.dtype} and shape {rows.shape}" if isinstance(rows, np.ndarray) else type(rows).__name__
            raise ValueError(
                f"BoundSteps.reorder: rows must be a numpy array of integers of shape ({batch},), got {got}"
            )
        if batch and (rows.min() < 0 or rows.max() >= batch):
            raise ValueError(
                f"BoundSteps.reorder: rows must be rows of the windows, in [0, {batch}), got values from {rows.min()} to {rows.max()}"
            )
        if (rows == np.arange(batch)).all():
            return
        for window, reordered in zip(self.windows[self.reads], self.windows[1 - self.reads], strict=True):
            # the rows are in range: mode "clip" changes none ("raise" would gather through a temporary copy)
            np.take(window, rows, axis=0, out=reordered, mode="clip")
        self.reads = 1 - self.reads

    def _bind_rows(self, rows: int) -> None:
        """Buffers of ``rows`` rows for the ids, positions, token mask and logits, bound in both bindings."""
        self.logits = np.empty((rows, 1, self.vocab_size), np.float32)
        self.staged = {name: np.empty((rows, 1), np.int64) for name in self.step_inputs}
        for binding in self.bindings:
            for name, buffer in self.staged.items():
                _bind(binding.bind_input, name, buffer)
            _bind(binding.bind_output, self.logits_name, self.logits)


def _bind(bind, name: str, array: np.ndarray) -> None:
    """``bind`` (an IOBinding's ``bind_input`` or ``bind_output``) the graph's ``name`` to the memory of the
    C-contiguous ``array``, which the caller keeps alive while the binding runs."""
    bind(name, "cpu", 0, array.dtype, array.shape, array.ctypes.data)
