"""The step and prompt graphs give the LM head's (B, 1, V) output as it is: no node after its MatMul
(ONNX Runtime copies a squeezed graph output); a graph whose logits have another shape (squeezed to
(B, V), or with another axis) is refused, naming its file."""

from __future__ import annotations

from pathlib import Path

import pytest

from talk_hf.export import OnnxGenerator
from talk_hf.onnx import ORTModelForCausalLM

onnx = pytest.importorskip("onnx")

GRAPHS = {"talk-lm": ["decoder_prompt.onnx", "decoder_step.onnx"], "dynamic-seq2seq": ["decoder_step.onnx"]}


def _logits_node(graph) -> onnx.NodeProto:
    """The node of ``graph`` that writes its first output (the logits)."""
    return next(node for node in graph.node if graph.output[0].name in node.output)


def _reshaped_logits(path: Path, op: str, axes: list[int]) -> None:
    """Rewrite the graph at ``path`` so that its logits output is ``op`` (Squeeze or Unsqueeze) of the
    head's output over ``axes``."""
    model = onnx.load(path)
    graph, head = model.graph, _logits_node(model.graph)
    name = graph.output[0].name
    head.output[list(head.output).index(name)] = "head_logits"
    graph.initializer.append(onnx.helper.make_tensor("logits_axes", onnx.TensorProto.INT64, [len(axes)], axes))
    graph.node.append(onnx.helper.make_node(op, ["head_logits", "logits_axes"], [name]))
    dims = graph.output[0].type.tensor_type.shape.dim
    if op == "Squeeze":
        del dims[1]
    else:
        dims.insert(axes[0], onnx.TensorShapeProto.Dimension(dim_value=1))
    onnx.checker.check_model(model)
    onnx.save(model, path)


@pytest.mark.parametrize("name", GRAPHS)
def test_the_logits_are_the_lm_heads_own_output(shared_exports, name):
    """(batch, 1, V), written by the LM head's MatMul; the prompt graph's MatMul reads the last position."""
    exported = shared_exports(name)
    for file in GRAPHS[name]:
        graph = onnx.load(exported.folder / file).graph
        dims = [dim.dim_value or dim.dim_param for dim in graph.output[0].type.tensor_type.shape.dim]
        assert dims[1:] == [1, 40], (file, dims)
        head = _logits_node(graph)
        assert head.op_type == "MatMul", file
        if file == "decoder_prompt.onnx":
            assert next(node for node in graph.node if head.input[0] in node.output).op_type in ("Slice", "Gather")


@pytest.mark.parametrize("file", ["decoder_step.onnx", "decoder_prompt.onnx"])
@pytest.mark.parametrize(("op", "shape"), [("Unsqueeze", r"\[.*, 1, 1, 40\]"), ("Squeeze", r"\[.*, 40\]")])
def test_logits_of_another_shape_are_refused(shared_exports, tmp_path, file, op, shape):
    folder = shared_exports("talk-lm").copy(tmp_path / "export")
    _reshaped_logits(folder / file, op, [1])
    with pytest.raises(
        ValueError, match=rf"{file} gives logits of shape {shape}, but the runner reads \(batch, 1, vocab\)"
    ):
        OnnxGenerator(folder, threads=1)
    with pytest.raises(ValueError, match=rf"{file} gives logits of shape {shape}"):
        ORTModelForCausalLM.from_pretrained(folder, threads=1)
