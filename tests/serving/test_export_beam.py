"""`talk_hf.export.beam_graph`: the beam candidates graph ranks like a full stable sort of the (batch,
beams * V) sums ``log_softmax(logits) + beam score`` (largest first, equal sums lowest index first),
with the same float32 sums, for vocabularies a multiple of the chunk or padded, one chunk per row or
one value per chunk, tied and distinct logits, and any count up to beams * V; a folder exported
without it decodes greedily and names the re-export for beam search.  (Beam tokens equal to
``generate``'s: test_export.py.)"""

from __future__ import annotations

import json

import numpy as np
import pytest

from talk_hf.export import OnnxGenerator
from talk_hf.export.beam_graph import candidates_graph, chunk_size, model_at_oldest_ir

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")


def _session(model) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    """(N, V) -> ONNX Runtime's LogSoftmax of it (the graph's own kernel, so that the sums are its sums)."""
    node = onnx.helper.make_node("LogSoftmax", ["x"], ["y"], axis=-1)
    value = onnx.helper.make_tensor_value_info
    graph = onnx.helper.make_graph(
        [node], "log_softmax", [value("x", onnx.TensorProto.FLOAT, None)], [value("y", onnx.TensorProto.FLOAT, None)]
    )
    model = model_at_oldest_ir(graph, 18)  # as candidates_graph's
    return _session(model).run(None, {"x": logits})[0]


@pytest.mark.parametrize("vocab, chunk", [(40, 5), (43, 5), (40, 64), (7, 1), (1000, 64)])
@pytest.mark.parametrize("batch, beams", [(3, 2), (2, 4), (1, 1)])
@pytest.mark.parametrize("ties", [False, True])
def test_candidates_equal_a_full_sort(vocab, chunk, batch, beams, ties):
    rng = np.random.default_rng(vocab + batch + beams)
    logits = rng.standard_normal((batch * beams, vocab)).astype(np.float32) * 3
    scores = rng.standard_normal((batch, beams)).astype(np.float32)
    if ties:  # equal logits within each row, equal rows and equal scores across beams
        logits, scores = np.round(logits), np.round(scores)
        logits[1::2] = logits[: len(logits) // 2 * 2 : 2]
    sums = (_log_softmax(logits).reshape(batch, beams, vocab) + scores[:, :, None]).reshape(batch, -1)
    session = _session(candidates_graph(vocab, chunk))
    for count in sorted({1, 2 * beams, 3 * beams + 1, beams * vocab}):
        expected = np.argsort(-sums, axis=1, kind="stable")[:, :count]
        top_scores, top_indices = session.run(
            None, {"logits": logits, "beam_scores": scores, "count": np.array([count])}
        )
        np.testing.assert_array_equal(top_indices, expected)
        np.testing.assert_array_equal(top_scores, np.take_along_axis(sums, expected, axis=1))


@pytest.mark.parametrize("vocab", [40, 43, 1000])
@pytest.mark.parametrize("ties", [False, True])
def test_candidates_rank_as_generates_log_softmax_plus_score(vocab, ties):
    """Against what transformers' beam search ranks, torch's float32 ``log_softmax(logits) + beam score``
    sorted stably: the same indices (ties lowest index first), the sums to within their rounding.

    The graph's log-softmax is ONNX Runtime's, whose sum of exponentials rounds apart from torch's in
    some rows (about 1 in 9 of the top sums differs from torch's in its last bit), so the ties here are
    those that hold in any rounding: equal logits within a row, and equal rows under equal beam scores.
    Sums equal only in exact arithmetic (equal rows under scores 2 apart, tokens whose logits are 2 apart)
    can round apart in one and tie in the other, and then rank apart."""
    torch = pytest.importorskip("torch")
    batch, beams = 4, 3
    rng = np.random.default_rng(vocab)
    logits = rng.standard_normal((batch * beams, vocab)).astype(np.float32) * 3
    scores = rng.standard_normal((batch, beams)).astype(np.float32)
    if ties:  # equal logits within each row; equal rows under equal scores
        logits, scores = np.round(logits), np.repeat(np.round(scores[:, :1]), beams, axis=1)
        logits[1::2] = logits[: len(logits) // 2 * 2 : 2]
    log_probs = torch.log_softmax(torch.from_numpy(logits), dim=-1).numpy()
    sums = (log_probs.reshape(batch, beams, vocab) + scores[:, :, None]).reshape(batch, -1)
    count = 2 * beams
    expected = np.argsort(-sums, axis=1, kind="stable")[:, :count]
    session = _session(candidates_graph(vocab, chunk_size(vocab)))
    feed = {"logits": logits, "beam_scores": scores, "count": np.array([count])}
    top_scores, top_indices = session.run(None, feed)
    np.testing.assert_array_equal(top_indices, expected)
    np.testing.assert_allclose(top_scores, np.take_along_axis(sums, expected, axis=1), rtol=0, atol=1e-5)


def test_the_graph_carries_the_oldest_ir_version_of_its_opset():
    """IR 8 for opset 18, whatever onnx writes by default (IR 14 from onnx 1.23, which ONNX Runtime
    before 1.32 refuses): any runtime that runs the opset loads the file."""
    assert candidates_graph(40, 5).ir_version == 8


def test_chunk_size_leaves_eight_chunks_to_rank_in_small_vocabularies():
    assert [chunk_size(vocab) for vocab in (8000, 512, 40, 3)] == [64, 64, 5, 1]


def test_a_folder_without_the_candidates_graph_decodes_greedily_and_names_the_re_export(shared_exports, tmp_path):
    """A folder without beam_candidates.onnx (no such file or manifest entry): greedy decoding runs, beam
    search is refused with the command that re-exports the model."""
    exported = shared_exports("dynamic-lm")
    folder = exported.copy(tmp_path / "export")
    ids, mask = exported.ids.numpy(), exported.mask.numpy()
    greedy = OnnxGenerator(folder, threads=1).generate(ids, mask)
    (folder / "beam_candidates.onnx").unlink()
    manifest = json.loads((folder / "manifest.json").read_text())
    del manifest["files"]["beam_candidates"], manifest["graphs"]["beam_candidates"]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    older = OnnxGenerator(folder, threads=1)
    np.testing.assert_array_equal(older.generate(ids, mask), greedy)
    with pytest.raises(
        ValueError, match=r"has no beam_candidates.onnx .* re-export the model \(python -m talk_hf.export"
    ):
        older.generate(ids, mask, num_beams=2)
    logits = np.zeros((2, older.manifest["vocab_size"]), np.float32)
    with pytest.raises(ValueError, match=r"^OnnxGenerator\.candidates: .* has no beam_candidates\.onnx"):
        older.candidates(logits, np.zeros((1, 2), np.float32), 2)
