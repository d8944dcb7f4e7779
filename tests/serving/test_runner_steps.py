"""`OnnxGenerator.bind_steps`: a request's steps on buffers of their own (`runner_steps.BoundSteps`) give
`OnnxGenerator.step`'s logits and states, through beam search's reorderings (the beams in place, moved,
one beam copied to several rows), from arrays of any memory layout; they refuse what ``step`` refuses,
naming it: the states and source when bound, the ids, positions and token mask at every step, against
them.  And a generator's requests one after another, of other batch sizes and source lengths, each
decode ``generate``'s tokens.

The tests read the session's exports of the tiny DynamicConv encoder-decoder (two decoder states, of
histories 2 and 3), TaLK encoder-decoder and DynamicConv LM (`exported.SharedExports`).
"""

from __future__ import annotations

import numpy as np
import pytest

from talk_hf.export import OnnxGenerator

from .test_generator_inputs import BAD_STEPS, IDS_ROWS, ONE_ROW, ROWS, SEQ2SEQ, _step_arguments

pytest.importorskip("onnxruntime")

# Each reordering of the ROWS = 2 rows, and the step's token per row after it.
REORDERINGS = [([0, 1], [5, 9]), ([1, 0], [7, 7]), ([1, 1], [4, 8]), ([0, 0], [6, 5])]


@pytest.fixture(scope="module")
def generator(shared_exports) -> OnnxGenerator:
    return OnnxGenerator(shared_exports(SEQ2SEQ.name).folder, threads=1)


def _as_fortran(arrays: list[np.ndarray]) -> list[np.ndarray]:
    """The same values in Fortran order: memory that a binding must not read as C order."""
    return [np.asfortranarray(array) for array in arrays]


@pytest.mark.parametrize("layout", ["c-order", "fortran-order"])
def test_bound_steps_give_the_steps_logits_and_states_through_reorderings(generator, layout):
    """The first step from the start token, then a step after each reordering of `REORDERINGS`, against
    ``step`` fed the windows that fancy indexing reorders; the windows alternate between two sets of
    arrays, never new ones."""
    arguments = _step_arguments(generator)
    logits, states = generator.step(**arguments)
    source = arguments["source"]
    bound_states, bound_source = (states, source) if layout == "c-order" else (_as_fortran(states), _as_fortran(source))
    steps = generator.bind_steps(bound_states, bound_source)
    two_sets = {id(window) for window in steps.windows[0] + steps.windows[1]}
    np.testing.assert_array_equal(steps.states[1], states[1])
    positions, mask = np.ones((ROWS, 1), np.int64), np.ones((ROWS, 1), np.int64)
    for rows, tokens in REORDERINGS:
        rows, ids = np.array(rows), np.array(tokens)[:, None]
        steps.reorder(rows)
        states = [state[rows] for state in states]
        for found, expected in zip(steps.states, states, strict=True):
            np.testing.assert_array_equal(found, expected)
        logits, states = generator.step(ids, positions, mask, states, source)
        np.testing.assert_array_equal(steps.step(ids, positions, mask), logits)
        for found, expected in zip(steps.states, states, strict=True):
            np.testing.assert_array_equal(found, expected)
        assert {id(window) for window in steps.states} <= two_sets
        positions = positions + 1


@pytest.mark.parametrize("layout", ["c-order", "fortran-order"])
def test_the_source_is_bound_where_it_lies_when_c_ordered(generator, layout):
    """A C-ordered source of the graph's dtypes (the encoder's outputs, beam search's repeats of them) is
    bound in its own memory, not copied; one of another layout is bound from a C-ordered copy of it."""
    arguments = _step_arguments(generator)
    source = arguments["source"] if layout == "c-order" else _as_fortran(arguments["source"])
    steps = generator.bind_steps(arguments["states"], source)
    names = generator.source_inputs
    assert list(steps.source) == names
    assert all(array.flags.c_contiguous == (layout == "c-order") for array in source)
    for name, array in zip(names, source, strict=True):
        bound = steps.source[name]
        assert bound.flags.c_contiguous and np.shares_memory(bound, array) == (layout == "c-order")
        np.testing.assert_array_equal(bound, array)


BOUND_ONE_ROW = "its dimension 0 must equal dimension 0 of states\\[0\\] \\(state_0\\) \\(2\\)"
BOUND_ROWS = "the 2 rows of states\\[0\\] \\(state_0\\)"
HELD = ("states", "source")  # the arguments that bind_steps checks once; the others, each step


@pytest.mark.parametrize("name", BAD_STEPS)
def test_a_bad_argument_of_the_bound_steps_is_named(generator, name):
    """Each fault of test_generator_inputs.py's `BAD_STEPS`, refused by bind_steps (states, source) or by
    the bound step (ids, positions, token mask), with step's message (rows compared with the states')."""
    edit, message = BAD_STEPS[name]
    message = message.replace(ONE_ROW, BOUND_ONE_ROW).replace(IDS_ROWS, BOUND_ROWS)
    arguments = _step_arguments(generator)
    valid = dict(arguments)
    edit(arguments)
    held = {argument: arguments.pop(argument) for argument in HELD}
    if any(held[argument] is not valid[argument] for argument in HELD):
        with pytest.raises(ValueError, match=f"^OnnxGenerator\\.bind_steps: {message}"):
            generator.bind_steps(**held)
    else:
        steps = generator.bind_steps(**held)
        with pytest.raises(ValueError, match=f"^BoundSteps\\.step: {message}"):
            steps.step(**arguments)


def test_a_bound_step_refuses_rows_other_than_its_states_after_steps(generator):
    """The rows the states fixed hold at every step, not only the first."""
    arguments = _step_arguments(generator)
    steps = generator.bind_steps(arguments.pop("states"), arguments.pop("source"))
    steps.step(**arguments)
    three_rows = {name: np.ones((3, 1), np.int64) for name in arguments}
    with pytest.raises(
        ValueError, match=f"^BoundSteps\\.step: ids \\(input_ids\\) has shape \\(3, 1\\), but {BOUND_ONE_ROW}"
    ):
        steps.step(**three_rows)


@pytest.mark.parametrize("name", ["talk-seq2seq", "dynamic-lm"])
def test_requests_one_after_another_decode_generates_tokens(shared_exports, name):
    """One generator, requests of 3, 1 and 2 rows with sources (prompts) of other lengths, greedy and
    beam search: each gives generate's tokens, nothing of one request's buffers in the next."""
    shared = shared_exports(name)
    model, generator = shared.model(), OnnxGenerator(shared.folder, threads=1)
    requests = [
        (shared.ids, shared.mask),
        (shared.ids[1:2, 3:], shared.mask[1:2, 3:]),
        (shared.ids[::2, :5], shared.mask[::2, :5]),
    ]
    for settings in (dict(num_beams=1), dict(num_beams=3)):
        for ids, mask in requests:
            expected = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=6, do_sample=False, **settings)
            tokens = generator.generate(ids.numpy(), mask.numpy(), max_new_tokens=6, **settings)
            np.testing.assert_array_equal(tokens, expected.numpy())


@pytest.mark.parametrize(
    "rows, message",
    [
        (np.array([0, 2]), r"rows must be rows of the windows, in \[0, 2\), got values from 0 to 2$"),
        (np.array([-1, 0]), r"rows must be rows of the windows, in \[0, 2\), got values from -1 to 0$"),
        (
            np.array([0, 1, 1]),
            r"rows must be a numpy array of integers of shape \(2,\), got dtype int64 and shape \(3,\)",
        ),
        (np.array([0.0, 1.0]), r"rows must be a numpy array of integers of shape \(2,\), got dtype float64"),
        ([1, 0], r"rows must be a numpy array of integers of shape \(2,\), got list"),
    ],
    ids=["beyond-the-rows", "negative", "three-rows", "float", "a-list"],
)
def test_a_bad_reordering_is_named_and_changes_nothing(generator, rows, message):
    """A row outside the windows would be clipped into them (numpy's take, as the reordering runs it)."""
    arguments = _step_arguments(generator)
    steps = generator.bind_steps(arguments.pop("states"), arguments.pop("source"))
    before = [window.copy() for window in steps.states]
    with pytest.raises(ValueError, match=f"^BoundSteps\\.reorder: {message}"):
        steps.reorder(rows)
    for found, expected in zip(steps.states, before, strict=True):
        np.testing.assert_array_equal(found, expected)
