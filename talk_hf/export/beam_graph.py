"""``beam_candidates.onnx``: each beam search step's work over the (rows, vocabulary) logits, for ONNX Runtime.

Beam search (transformers' ``_beam_search``) ranks, per batch row, the beams x vocabulary sums of a
beam's running score and the log-softmax of its next-token logits, and keeps the best ``count``
(``2 * num_beams``).  `candidates_graph` writes that as one small graph, run on the step graph's
logits, so that the runner's numpy handles only (batch, count) numbers:

    inputs   logits (batch * beams, V) float32, the step's (rows grouped by batch row, beam-major);
             beam_scores (batch, beams) float32, the running beam scores;
             count (1,) int64, how many candidates to keep (at most beams * V)
    outputs  top_scores (batch, count) float32, ``log_softmax(logits) + beam score``, largest first;
             top_indices (batch, count) int64, ``beam * V + token``; equal scores lowest index first

ONNX Runtime's TopK scans its input one value at a time (over a beam search's 32 x 5 x 8,000 logits
it takes longer than the log-softmax), so the graph first takes the maximum of every chunk of
``chunk`` log-probabilities (a vectorised ReduceMax), ranks the chunks by their maxima plus their
beam's score, gathers the best ``count`` chunks in index order, and ranks their values.  That is exact:
the best ``count`` values lie in the ``count`` chunks of largest maxima (each chunk ranked above a
value's own chunk holds a value ranked above it), and since adding a beam's score rounds every value
of a row monotonically, a chunk's maximum plus the score is the maximum of the chunk's sums.  The
values are the same float32 sums as over the whole (batch, beams * V) array, and gathering in index
order keeps TopK's tie order (lowest index first).  A vocabulary that is not a multiple of ``chunk``
is padded with -inf columns, which rank last (the runner never keeps more than the finite values).

The log-softmax is ONNX Runtime's fused LogSoftmax over the whole array, not the raw logits' chunk
maxima with a per-row ``max + log(sum(exp(logits - max)))`` applied to the gathered chunks only: every
exponential is needed either way, and as Sub, Exp and ReduceSum nodes that sum took 1.10-1.15x the
graph's time at (160, 8,000) logits on one thread, and its sums equalled torch's ``log_softmax``
(what ``generate`` ranks) bit for bit less often (58% of the top sums against 89%).
"""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

INPUTS, OUTPUTS = ("logits", "beam_scores", "count"), ("top_scores", "top_indices")
# Values per chunk: the ReduceMax pass is vectorised and the gathered chunks stay few (count x 64 values).
CHUNK = 64


def chunk_size(vocab_size: int) -> int:
    """``CHUNK``, but at least 8 chunks per row for small vocabularies (so that ranking chunks selects)."""
    return max(1, min(CHUNK, vocab_size // 8))


class _Builder:
    """Nodes and int64 constants of a graph under construction, each output named after its node."""

    def __init__(self):
        self.nodes: list[onnx.NodeProto] = []
        self.constants: list[onnx.TensorProto] = []

    def constant(self, *values: int) -> str:
        name = f"constant_{len(self.constants)}"
        self.constants.append(helper.make_tensor(name, TensorProto.INT64, [len(values)], list(values)))
        return name

    def __call__(self, op: str, *inputs: str, outputs: int | tuple[str, ...] = 1, **attributes):
        names = outputs if isinstance(outputs, tuple) else [f"{op}_{len(self.nodes)}_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op, list(inputs), list(names), **attributes))
        return names[0] if len(names) == 1 else tuple(names)


def candidates_graph(vocab_size: int, chunk: int, opset: int = 18) -> onnx.ModelProto:
    """The candidates graph for logits of ``vocab_size`` columns, ranking chunks of ``chunk`` values."""
    chunks = -(-vocab_size // chunk)  # per beam row
    node = _Builder()
    log_probs = node("LogSoftmax", "logits", axis=-1)  # (N, V)
    if chunks * chunk != vocab_size:
        minus_inf = helper.make_tensor("minus_inf", TensorProto.FLOAT, [], [float("-inf")])
        node.constants.append(minus_inf)
        log_probs = node("Pad", log_probs, node.constant(0, 0, 0, chunks * chunk - vocab_size), "minus_inf")
    batch = node("Slice", node("Shape", "beam_scores"), node.constant(0), node.constant(1))  # (1,): B
    by_row = node("Reshape", log_probs, node.constant(0, chunks, chunk))  # (N, chunks, chunk)
    maxima = node("ReduceMax", by_row, node.constant(2), keepdims=0)  # (N, chunks)
    maxima = node("Add", maxima, node("Reshape", "beam_scores", node.constant(-1, 1)))
    maxima = node("Reshape", maxima, node("Concat", batch, node.constant(-1), axis=0))  # (B, beams * chunks)
    kept = node("Min", "count", node("Slice", node("Shape", maxima), node.constant(1), node.constant(2)))
    _, best = node("TopK", maxima, kept, outputs=2)  # (B, kept) chunk indices, best first
    in_order, _ = node("TopK", best, kept, outputs=2, largest=0)  # the same, ascending
    by_batch = node("Reshape", by_row, node("Concat", batch, node.constant(-1, chunk), axis=0))
    picked = node("GatherND", by_batch, node("Unsqueeze", in_order, node.constant(2)), batch_dims=1)
    chunks_per_beam = node.constant(chunks)
    scores = node("GatherElements", "beam_scores", node("Div", in_order, chunks_per_beam), axis=1)  # (B, kept)
    picked = node("Add", picked, node("Unsqueeze", scores, node.constant(2)))  # (B, kept, chunk)
    picked = node("Reshape", picked, node("Concat", batch, node.constant(-1), axis=0))  # (B, kept * chunk)
    _, position = node("TopK", picked, "count", outputs=("top_scores", "position"))
    width = node.constant(chunk)
    chunk_index = node("GatherElements", in_order, node("Div", position, width), axis=1)
    column = node("Add", node("Mul", node("Mod", chunk_index, chunks_per_beam), width), node("Mod", position, width))
    beam = node("Div", chunk_index, chunks_per_beam)
    node("Add", node("Mul", beam, node.constant(vocab_size)), column, outputs=("top_indices",))
    graph = helper.make_graph(
        node.nodes,
        "beam_candidates",
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["rows", vocab_size]),
            helper.make_tensor_value_info("beam_scores", TensorProto.FLOAT, ["batch", "beams"]),
            helper.make_tensor_value_info("count", TensorProto.INT64, [1]),
        ],
        [
            helper.make_tensor_value_info("top_scores", TensorProto.FLOAT, ["batch", "count"]),
            helper.make_tensor_value_info("top_indices", TensorProto.INT64, ["batch", "count"]),
        ],
        node.constants,
    )
    model = model_at_oldest_ir(graph, opset)
    onnx.checker.check_model(model, full_check=True)
    return model


def model_at_oldest_ir(graph: onnx.GraphProto, opset: int) -> onnx.ModelProto:
    """``graph`` as a model of the default domain's ``opset``, at the oldest IR version that holds the
    opset, not the installed onnx's newest: any runtime that runs the opset then loads the file (ONNX
    Runtime 1.31 refuses IR 14, which onnx 1.23 writes)."""
    opset_imports = [helper.make_opsetid("", opset)]
    return helper.make_model(
        graph, opset_imports=opset_imports, ir_version=helper.find_min_ir_version_for(opset_imports)
    )
