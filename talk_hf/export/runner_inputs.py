"""The arrays of a call of ``OnnxGenerator.step`` or ``encode`` against the inputs its graph declares, and
the token ids and mask of a ``generate`` request (`checked_inputs`).

Copied beside ``runner.py`` into every exported folder, so like it this file imports nothing but numpy
and the runner's files beside it.  `GraphInputs.feed` refuses, naming the argument and what it must be,
what ONNX Runtime would refuse with its own error or, worse, run: a wrong dtype, rank or fixed size,
rows that differ in number between the arrays (step rows that are no multiple of the source's rows:
each source row serves n consecutive step rows), another count of states or source arrays, token ids
outside the vocabulary (ONNX Runtime's Gather fails on an id >= V and reads the row V + id of an id < 0).  `checked_inputs` refuses what transformers'
``generate`` refuses of a request's inputs (ids outside the vocabulary, a mask of other values than 0 and 1,
float ids, an empty batch).
"""

from __future__ import annotations

import numpy as np

from .runner_settings import is_int

# ONNX Runtime's names of the graphs' input types, as numpy dtypes.
_DTYPES = {"tensor(int64)": np.dtype(np.int64), "tensor(float)": np.dtype(np.float32), "tensor(bool)": np.dtype(bool)}


class GraphInputs:
    """The inputs one graph declares, to check the arrays of each call against before ONNX Runtime runs.

    Each array must be a numpy array of the input's dtype and rank, with its fixed sizes; a size the graph
    names (a symbolic dimension: the step's rows, the source's length) must be equal in every input that
    names it.  A few compares per input, cheap enough for every decoding step; `check` takes some of the
    inputs at a time, against the sizes of those checked before, so that a request's steps check the
    arrays that stay the same (its states' buffers, its source) once (`runner_steps.BoundSteps`).

    Args:
        session: the graph's ONNX Runtime session.
        call: the method that feeds it, for messages (``"OnnxGenerator.step"``).
        parameters: each parameter of ``call``, in its order -> the graph input its array feeds, or the
            list of graph inputs its sequence of arrays feeds, in order.
        token_ids: the graph inputs that hold token ids -> the vocabulary size V their ids lie below (one
            max of the ids per call: 2-3 microseconds for a step's (B, 1)).
        rows_per_source: (a step input, a source input), both with named rows (dimension 0), the first's
            a multiple of the second's (each source row serves n consecutive step rows: one, or its
            sentence's beams); None: no such pair.
    """

    def __init__(
        self,
        session,
        call: str,
        parameters: dict[str, str | list[str]],
        token_ids: dict[str, int],
        rows_per_source: tuple[str, str] | None = None,
    ):
        self.call, self.parameters, self.token_ids = call, parameters, token_ids
        self.labels = {}  # each graph input -> the argument of ``call`` that feeds it, for messages
        for parameter, names in parameters.items():
            if isinstance(names, str):
                self.labels[names] = parameter if parameter == names else f"{parameter} ({names})"
            else:
                self.labels.update({name: f"{parameter}[{i}] ({name})" for i, name in enumerate(names)})
        # Each input's dtype (None: unchecked), rank, (axis, size) of its fixed and named sizes, and all that in words.
        self.declared = {
            x.name: (
                _DTYPES.get(x.type),
                len(x.shape),
                [(axis, size) for axis, size in enumerate(x.shape) if is_int(size)],
                [(axis, size) for axis, size in enumerate(x.shape) if isinstance(size, str)],
                f"dtype {_DTYPES.get(x.type, x.type)} and shape ({', '.join(str(s) if is_int(s) else 'any' for s in x.shape)})",
            )
            for x in session.get_inputs()
        }
        if sorted(self.labels) != sorted(self.declared):
            raise ValueError(f"{call} feeds the inputs {list(self.labels)}, but its graph takes {list(self.declared)}")
        # the named sizes of the rows of ``rows_per_source``'s two inputs (their dimension 0), or None
        self.row_sizes = None if rows_per_source is None else tuple(self._rows_name(name) for name in rows_per_source)

    def _rows_name(self, name: str) -> str:
        """The named size of graph input ``name``'s dimension 0 (its rows)."""
        named = dict(self.declared[name][3])
        if 0 not in named:
            raise ValueError(f"{self.call}: the graph's input {name} has no named rows (dimension 0)")
        return named[0]

    def _check_rows_per_source(self, sizes: dict, call: str) -> None:
        """With ``rows_per_source``, refuse rows that are no multiple of the source's rows, once both are set."""
        if self.row_sizes is None:
            return
        rows, sources = (sizes.get(size) for size in self.row_sizes)
        if rows is not None and sources is not None and (sources[0] == 0 or rows[0] % sources[0]):
            raise ValueError(
                f"{call}: the {rows[0]} rows of {self.labels[rows[1]]} must be a multiple of the {sources[0]} rows "
                f"of {self.labels[sources[1]]}: each source row serves the same number of consecutive step rows "
                "(one, or its sentence's beams)"
            )

    def feed(self, *values) -> dict[str, np.ndarray]:
        """The session's feed {graph input: array} of ``values``, the arguments of ``call`` in the order of
        ``parameters``; ValueError naming the argument and what it must be, before anything runs."""
        feed = self.named(dict(zip(self.parameters, values, strict=True)))
        self.check(feed)
        return feed

    def named(self, values: dict, call: str | None = None) -> dict[str, np.ndarray]:
        """{graph input: array} of ``values`` ({parameter: its argument}, some or all of ``parameters``);
        ValueError where a parameter of several inputs is not given a list or tuple of as many arrays
        (``call``: the method named in messages; None: ``self.call``)."""
        feed = {}
        for parameter, value in values.items():
            names = self.parameters[parameter]
            if isinstance(names, str):
                feed[names] = value
            elif isinstance(value, (list, tuple)) and len(value) == len(names):
                feed.update(zip(names, value, strict=True))
            else:
                got = f"{len(value)} of them" if isinstance(value, (list, tuple)) else type(value).__name__
                raise ValueError(
                    f"{call or self.call}: {parameter} must be a list of {len(names)} arrays ({names}), got {got}"
                )
        return feed

    def check(self, feed: dict[str, np.ndarray], sizes: dict | None = None, call: str | None = None) -> dict:
        """Refuse the arrays of ``feed`` (graph input -> array, some or all of the graph's inputs) that the graph
        cannot take: ValueError naming the argument and what it must be (``call``: the method named in
        messages; None: ``self.call``).

        ``sizes``: the named sizes that arrays checked before set (a named size -> (its value, the graph
        input and dimension that set it)), which these arrays must then have too; None: none yet.  Returns
        ``sizes`` with those that ``feed`` set, so that the arrays which stay the same from call to call (a
        request's source) are checked once and the others each call against them."""
        call, sizes = call or self.call, dict(sizes or {})
        for name, value in feed.items():
            dtype, rank, fixed, named, expected = self.declared[name]
            wrong_dtype = type(value) is not np.ndarray or (dtype is not None and value.dtype != dtype)
            if wrong_dtype or value.ndim != rank:
                got = (
                    f"dtype {value.dtype} and shape {value.shape}"
                    if isinstance(value, np.ndarray)
                    else type(value).__name__
                )
                raise ValueError(f"{call}: {self.labels[name]} must be a numpy array of {expected}, got {got}")
            shape = value.shape
            for axis, size in fixed:
                if shape[axis] != size:
                    raise ValueError(f"{call}: {self.labels[name]} must be of {expected}, got shape {shape}")
            for axis, symbol in named:
                first = sizes.get(symbol)
                if first is None:
                    sizes[symbol] = (shape[axis], name, axis)
                elif first[0] != shape[axis]:
                    raise ValueError(
                        f"{call}: {self.labels[name]} has shape {shape}, but its dimension {axis} must equal dimension "
                        f"{first[2]} of {self.labels[first[1]]} ({first[0]}): the graph takes them of one size"
                    )
        self._check_rows_per_source(sizes, call)
        for name, vocab_size in self.token_ids.items():
            ids = feed.get(name)  # int64 (checked above): as uint64, an id < 0 is >= 2**63, so one max finds both
            if ids is not None and ids.size and ids.view(np.uint64).max() >= vocab_size:
                raise ValueError(
                    f"{call}: {self.labels[name]} must hold token ids in [0, {vocab_size}), "
                    f"got values from {ids.min()} to {ids.max()}"
                )
        return sizes


def checked_inputs(input_ids, attention_mask, vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(B, S) ``input_ids`` and ``attention_mask`` (None: all ones) as int64 arrays, refused as ``generate``
    refuses them: not (batch, length) with both >= 1, non-integer ids, ids outside [0, vocab_size), a mask
    of another shape or of values other than 0 and 1 (bool, integer or float)."""
    ids = _array("input_ids", input_ids)
    if ids.ndim != 2 or 0 in ids.shape:
        raise ValueError(f"input_ids must be (batch, length) with batch and length >= 1, got shape {ids.shape}")
    if ids.dtype.kind not in "iu":
        raise ValueError(f"input_ids must hold integer token ids, got dtype {ids.dtype}")
    if ids.min() < 0 or ids.max() >= vocab_size:
        raise ValueError(
            f"input_ids must hold token ids in [0, {vocab_size}), got values from {ids.min()} to {ids.max()}"
        )
    if attention_mask is None:
        return ids.astype(np.int64), np.ones(ids.shape, np.int64)
    mask = _array("attention_mask", attention_mask)
    if mask.shape != ids.shape:
        raise ValueError(f"attention_mask has shape {mask.shape} but input_ids {ids.shape}")
    if mask.dtype.kind not in "biuf" or not np.isin(mask, (0, 1)).all():
        values = np.unique(mask[~np.isin(mask, (0, 1))])[:5].tolist() if mask.dtype.kind in "biuf" else mask.dtype
        raise ValueError(f"attention_mask must hold only 0 (padding) and 1 (real token), got {values}")
    return ids.astype(np.int64), mask.astype(np.int64)


def _array(name: str, value) -> np.ndarray:
    try:
        return np.asarray(value)
    except ValueError as error:  # ragged rows
        raise ValueError(f"{name} must be a (batch, length) array, rows of equal length: {error}") from None
