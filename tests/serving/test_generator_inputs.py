"""`OnnxGenerator.step`, `encode`, `read_prompt` and `candidates` refuse arrays the graph cannot take, naming
the argument and what it must be (`runner_inputs.GraphInputs`), before ONNX Runtime runs: a wrong dtype or
rank, a size the graph fixes, rows that differ in number between the ids, positions, mask and states,
step rows that are no multiple of the source's rows (each source row serves n consecutive step rows, its
sentence's beams), rows that differ in number between the source's arrays, the source's
length differing between its arrays, another count of states or source arrays, token ids outside the
vocabulary (ONNX Runtime's Gather fails on an id >= V in its own words and reads row V + id of an id < 0
without one), ``encode`` of a causal LM; and the candidates' beam scores of no batch row or no beam,
logits rows that are not batch * beams, a count outside [1, beams * V] (ONNX Runtime's TopK fails on it,
or gives nothing for 0).

The tests read the session's exports of the tiny DynamicConv encoder-decoder and causal LM
(`exported.SharedExports`).
"""

from __future__ import annotations

import numpy as np
import pytest

from talk_hf.export import OnnxGenerator

from ..models.helpers import VOCAB
from .exported import EXPORTED

pytest.importorskip("onnxruntime")

SEQ2SEQ = EXPORTED["dynamic-seq2seq"]  # DynamicConv: two decoder states, cross-attention keys and values per layer
ROWS = 2


@pytest.fixture(scope="module")
def generator(shared_exports) -> OnnxGenerator:
    return OnnxGenerator(shared_exports(SEQ2SEQ.name).folder, threads=1)


def _source_batch() -> tuple[np.ndarray, np.ndarray]:
    """(ROWS, 5) source ids and mask, row 1 right-padded."""
    ids = np.array([[5, 6, 7, 8, 9], [5, 6, 7, 1, 1]], np.int64)
    return ids, np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], np.int64)


def _step_arguments(generator: OnnxGenerator) -> dict:
    """Valid arguments of ``step``: the decoder start token of every row, zero states, the source's inputs."""
    start = np.full((ROWS, 1), SEQ2SEQ.config().decoder_start_token_id, np.int64)
    return dict(
        ids=start,
        positions=np.zeros_like(start),
        token_mask=np.ones_like(start),
        states=generator.new_states(ROWS),
        source=generator.encode(*_source_batch()),
    )


def _replace(name: str, change):
    """An edit of ``step``'s arguments: the argument ``name`` (``states.0``: the first state) changed by ``change``."""

    def edit(arguments: dict) -> None:
        argument, _, index = name.partition(".")
        if index:
            arguments[argument] = list(arguments[argument])
            arguments[argument][int(index)] = change(arguments[argument][int(index)])
        else:
            arguments[argument] = change(arguments[argument])

    return edit


ONE_ROW = "its dimension 0 must equal dimension 0 of ids \\(input_ids\\) \\(2\\)"
IDS_ROWS = "the 2 rows of ids \\(input_ids\\)"
BAD_STEPS = {
    "ids-int32": (
        _replace("ids", lambda ids: ids.astype(np.int32)),
        r"ids \(input_ids\) must be a numpy array of dtype int64 and shape \(any, 1\), got dtype int32",
    ),
    "ids-a-list": (
        _replace("ids", lambda ids: ids.tolist()),
        r"ids \(input_ids\) must be a numpy array .* got list",
    ),
    "positions-rank-1": (
        _replace("positions", lambda positions: positions[:, 0]),
        r"positions must be a numpy array of dtype int64 and shape \(any, 1\), got dtype int64 and shape \(2,\)",
    ),
    "ids-beyond-the-vocabulary": (  # ONNX Runtime's Gather: "indices element out of data bounds"
        _replace("ids", lambda ids: np.array([[3], [VOCAB]])),
        rf"ids \(input_ids\) must hold token ids in \[0, {VOCAB}\), got values from 3 to {VOCAB}$",
    ),
    "ids-negative": (  # ONNX Runtime's Gather reads the embedding of the id VOCAB - 1
        _replace("ids", lambda ids: np.array([[-1], [3]])),
        rf"ids \(input_ids\) must hold token ids in \[0, {VOCAB}\), got values from -1 to 3$",
    ),
    "token-mask-two-columns": (
        _replace("token_mask", lambda mask: np.ones((ROWS, 2), np.int64)),
        r"token_mask must be of dtype int64 and shape \(any, 1\), got shape \(2, 2\)",
    ),
    "token-mask-one-row": (
        _replace("token_mask", lambda mask: mask[:1]),
        f"token_mask has shape \\(1, 1\\), but {ONE_ROW}",
    ),
    "state-float64": (
        _replace("states.1", lambda state: state.astype(np.float64)),
        r"states\[1\] \(state_1\) must be a numpy array of dtype float32 and shape \(any, 3, 16\), got dtype float64",
    ),
    "state-history": (
        _replace("states.0", lambda state: np.zeros((ROWS, 3, 16), np.float32)),
        r"states\[0\] \(state_0\) must be of dtype float32 and shape \(any, 2, 16\), got shape \(2, 3, 16\)",
    ),
    "state-three-rows": (
        _replace("states.1", lambda state: np.zeros((3, 3, 16), np.float32)),
        f"states\\[1\\] \\(state_1\\) has shape \\(3, 3, 16\\), but {ONE_ROW}",
    ),
    "a-state-missing": (
        _replace("states", lambda states: states[:1]),
        r"states must be a list of 2 arrays \(\['state_0', 'state_1'\]\), got 1 of them",
    ),
    "states-an-array": (
        _replace("states", lambda states: states[0]),
        "states must be a list of 2 arrays .* got ndarray",
    ),
    "source-missing": (
        _replace("source", lambda source: []),
        r"source must be a list of 5 arrays .* got 0 of them",
    ),
    "source-three-rows": (  # two step rows cannot share three sources
        _replace("source", lambda source: [np.concatenate([array, array[:1]]) for array in source]),
        f"{IDS_ROWS} must be a multiple of the 3 rows of source\\[0\\] \\(cross_key_0\\)",
    ),
    "source-mask-one-row": (
        _replace("source.4", lambda mask: mask[:1]),
        r"source\[4\] \(encoder_attention_mask\) has shape \(1, 5\), but its dimension 0 must equal dimension 0 "
        r"of source\[0\] \(cross_key_0\) \(2\)",
    ),
    "source-mask-shorter": (
        _replace("source.4", lambda mask: mask[:, :3]),
        r"source\[4\] \(encoder_attention_mask\) has shape \(2, 3\), but its dimension 1 must equal dimension 2 "
        r"of source\[0\] \(cross_key_0\) \(5\)",
    ),
}


@pytest.mark.parametrize("name", BAD_STEPS)
def test_a_bad_step_argument_is_named(generator, name):
    edit, message = BAD_STEPS[name]
    arguments = _step_arguments(generator)
    edit(arguments)
    with pytest.raises(ValueError, match=f"^OnnxGenerator\\.step: {message}"):
        generator.step(**arguments)


def test_a_source_row_serving_consecutive_step_rows_is_the_source_repeated(generator):
    """Beam search's layout: each source row serves its sentence's beams, consecutive step rows, and
    the step's logits and states are those of the source repeated for every row."""
    arguments = _step_arguments(generator)
    beams = 3
    arguments.update(
        ids=np.repeat(arguments["ids"], beams, axis=0),
        positions=np.repeat(arguments["positions"], beams, axis=0),
        token_mask=np.repeat(arguments["token_mask"], beams, axis=0),
        states=generator.new_states(ROWS * beams),
    )
    grouped = generator.step(**arguments)
    arguments["source"] = [np.repeat(array, beams, axis=0) for array in arguments["source"]]
    repeated = generator.step(**arguments)
    for found, expected in zip([grouped[0], *grouped[1]], [repeated[0], *repeated[1]], strict=True):
        np.testing.assert_allclose(found, expected, rtol=1e-5, atol=1e-6)


def test_checked_arguments_reach_the_graph_by_name(generator):
    """The step's logits and states are the graph's for the same inputs fed by name directly (the logits
    (B, V), a view of the graph's (B, 1, V))."""
    arguments = _step_arguments(generator)
    logits, states = generator.step(**arguments)
    values = [
        arguments["ids"],
        arguments["positions"],
        arguments["token_mask"],
        *arguments["states"],
        *arguments["source"],
    ]
    direct = generator.sessions["decoder_step"].run(None, dict(zip(generator.step_inputs, values, strict=True)))
    assert direct[0].shape == (len(logits), 1, logits.shape[1])
    direct[0] = direct[0][:, 0]
    for found, expected in zip([logits, *states], direct, strict=True):
        np.testing.assert_array_equal(found, expected)


BAD_SOURCES = {
    "ids-int32": (
        lambda ids, mask: (ids.astype(np.int32), mask),
        r"input_ids must be a numpy array of dtype int64 and shape \(any, any\), got dtype int32 and shape \(2, 5\)",
    ),
    "ids-rank-1": (
        lambda ids, mask: (ids[0], mask[0]),
        r"input_ids must be a numpy array .* got dtype int64 and shape \(5,\)",
    ),
    "ids-beyond-the-vocabulary": (
        lambda ids, mask: (ids + VOCAB - 9, mask),
        rf"input_ids must hold token ids in \[0, {VOCAB}\), got values from {VOCAB - 8} to {VOCAB}$",
    ),
    "ids-negative": (
        lambda ids, mask: (ids - 6, mask),
        rf"input_ids must hold token ids in \[0, {VOCAB}\), got values from -5 to 3$",
    ),
    "mask-float": (
        lambda ids, mask: (ids, mask.astype(np.float32)),
        "attention_mask must be a numpy array of dtype int64",
    ),
    "mask-shorter": (
        lambda ids, mask: (ids, mask[:, :4]),
        r"attention_mask has shape \(2, 4\), but its dimension 1 must equal dimension 1 of input_ids \(5\)",
    ),
    "mask-one-row": (
        lambda ids, mask: (ids, mask[:1]),
        r"attention_mask has shape \(1, 5\), but its dimension 0 must equal",
    ),
}


@pytest.mark.parametrize("name", BAD_SOURCES)
def test_a_bad_source_is_named(generator, name):
    change, message = BAD_SOURCES[name]
    with pytest.raises(ValueError, match=f"^OnnxGenerator\\.encode: {message}"):
        generator.encode(*change(*_source_batch()))


def test_a_causal_lm_has_no_encoder(shared_exports):
    folder = shared_exports("dynamic-lm").folder
    lm = OnnxGenerator(folder, threads=1)
    with pytest.raises(ValueError, match=f"OnnxGenerator.encode: {folder} holds a causal LM, which has no encoder"):
        lm.encode(*_source_batch())
    with pytest.raises(
        ValueError, match=r"OnnxGenerator.step: source must be a list of 0 arrays \(\[\]\), got 1 of them"
    ):
        lm.step(*(np.ones((ROWS, 1), np.int64) for _ in range(3)), lm.new_states(ROWS), [np.ones((ROWS, 5), np.int64)])


@pytest.mark.parametrize("token", [VOCAB, -1], ids=["beyond-the-vocabulary", "negative"])
def test_a_prompt_id_outside_the_vocabulary_is_named(shared_exports, token):
    """A causal LM's prompt graph, as step and encode."""
    lm = OnnxGenerator(shared_exports("dynamic-lm").folder, threads=1)
    ids = np.array([[5, 6, token]], np.int64)
    with pytest.raises(
        ValueError,
        match=rf"^OnnxGenerator\.read_prompt: input_ids must hold token ids in \[0, {VOCAB}\), got values from {min(token, 5)} to {max(token, 6)}$",
    ):
        lm.read_prompt(ids, np.ones_like(ids))


def _candidates_arguments(generator: OnnxGenerator) -> dict:
    """Valid arguments of ``candidates``: the logits of the first step of ROWS rows, as 1 batch row of ROWS beams."""
    logits, _ = generator.step(**_step_arguments(generator))
    return dict(logits=logits, beam_scores=np.array([[0.0, -1.5]], np.float32), count=4)


BAD_CANDIDATES = {
    "logits-float64": (
        _replace("logits", lambda logits: logits.astype(np.float64)),
        rf"logits must be a numpy array of dtype float32 and shape \(any, {VOCAB}\), got dtype float64",
    ),
    "logits-of-the-graph": (  # the graph's own (B, 1, V): step gives (B, V)
        _replace("logits", lambda logits: logits[:, None]),
        rf"logits must be a numpy array .* got dtype float32 and shape \(2, 1, {VOCAB}\)",
    ),
    "logits-one-column-short": (
        _replace("logits", lambda logits: logits[:, 1:].copy()),
        rf"logits must be of dtype float32 and shape \(any, {VOCAB}\), got shape \(2, {VOCAB - 1}\)",
    ),
    "beam-scores-rank-1": (
        _replace("beam_scores", lambda scores: scores[0]),
        r"beam_scores must be a numpy array of dtype float32 and shape \(any, any\), got dtype float32 and shape \(2,\)",
    ),
    "beam-scores-of-three-beams": (  # ONNX Runtime's broadcast error in its Add
        _replace("beam_scores", lambda scores: np.zeros((1, 3), np.float32)),
        r"logits has 2 rows, but beam_scores of shape \(1, 3\) needs batch \* beams = 3 of them",
    ),
    "beam-scores-of-two-batch-rows": (
        _replace("beam_scores", lambda scores: np.zeros((2, 2), np.float32)),
        r"logits has 2 rows, but beam_scores of shape \(2, 2\) needs batch \* beams = 4 of them",
    ),
    "beam-scores-of-no-beam": (  # the count's range would be [1, 0]
        lambda arguments: arguments.update(logits=arguments["logits"][:0], beam_scores=np.zeros((1, 0), np.float32)),
        r"beam_scores must be \(batch, beams\) with batch >= 1 and beams >= 1, got shape \(1, 0\)$",
    ),
    "beam-scores-of-no-batch-row": (  # ONNX Runtime's Reshape fails in its own words
        lambda arguments: arguments.update(logits=arguments["logits"][:0], beam_scores=np.zeros((0, 2), np.float32)),
        r"beam_scores must be \(batch, beams\) with batch >= 1 and beams >= 1, got shape \(0, 2\)$",
    ),
    "count-0": (  # ONNX Runtime gives (B, 0) candidates
        _replace("count", lambda count: 0),
        rf"count must be in \[1, {2 * VOCAB}\] \(beams \* vocab_size\), got 0$",
    ),
    "count-beyond-every-candidate": (  # ONNX Runtime's TopK: "k argument should not be greater"
        _replace("count", lambda count: 2 * VOCAB + 1),
        rf"count must be in \[1, {2 * VOCAB}\] \(beams \* vocab_size\), got {2 * VOCAB + 1}$",
    ),
    "count-negative": (
        _replace("count", lambda count: -1),
        rf"count must be in \[1, {2 * VOCAB}\] \(beams \* vocab_size\), got -1$",
    ),
}


@pytest.mark.parametrize("name", BAD_CANDIDATES)
def test_a_bad_candidates_argument_is_named(generator, name):
    edit, message = BAD_CANDIDATES[name]
    arguments = _candidates_arguments(generator)
    edit(arguments)
    with pytest.raises(ValueError, match=f"^OnnxGenerator\\.candidates: {message}"):
        generator.candidates(**arguments)


def test_a_count_of_candidates_that_is_not_an_int_is_named(generator):
    """A float count would reach the graph truncated (2.5: 2 candidates)."""
    arguments = _candidates_arguments(generator)
    with pytest.raises(TypeError, match=r"^OnnxGenerator\.candidates: count must be an int, got 2\.5 \(float\)$"):
        generator.candidates(**{**arguments, "count": 2.5})


def test_checked_candidates_are_the_graphs(generator):
    """Every candidate (count = beams * V, a numpy int) is the graph's for the same inputs fed directly."""
    arguments = {**_candidates_arguments(generator), "count": np.int64(2 * VOCAB)}
    scores, indices = generator.candidates(**arguments)
    direct = generator.sessions["beam_candidates"].run(None, {**arguments, "count": np.array([2 * VOCAB], np.int64)})
    np.testing.assert_array_equal(scores, direct[0])
    np.testing.assert_array_equal(indices, direct[1])
    assert indices.shape == (1, 2 * VOCAB)


@pytest.mark.parametrize(
    "batch, error, message",
    [
        (0, ValueError, "must be >= 1, got 0"),
        (-1, ValueError, "must be >= 1, got -1"),
        ("2", TypeError, "must be an int"),
    ],
)
def test_new_states_of_a_bad_batch_are_named(generator, batch, error, message):
    """numpy's 'negative dimensions are not allowed' and "'str' object cannot be interpreted as an integer"."""
    with pytest.raises(error, match=f"^OnnxGenerator.new_states: batch {message}"):
        generator.new_states(batch)
