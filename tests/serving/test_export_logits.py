"""The step and prompt graphs give the LM head's (B, 1, V) output as it is: no node after its MatMul
(ONNX Runtime copies a squeezed graph output).  A folder of an older talk_hf, whose graphs squeeze the
logits to (B, V), decodes as before through the runner and `talk_hf.onnx` (told apart by the output's
rank); a graph whose logits have another shape is refused, naming its file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from talk_hf.export import OnnxGenerator
from talk_hf.onnx import ORTModelForCausalLM, ORTModelForSeq2SeqLM

from .exported import EXPORTED

onnx = pytest.importorskip("onnx")

GRAPHS = {"talk-lm": ["decoder_prompt.onnx", "decoder_step.onnx"], "dynamic-seq2seq": ["decoder_step.onnx"]}


def _logits_node(graph) -> onnx.NodeProto:
    """The node of ``graph`` that writes its first output (the logits)."""
    return next(node for node in graph.node if graph.output[0].name in node.output)


def _reshaped_logits(path: Path, op: str, axes: list[int]) -> None:
    """Rewrite the graph at ``path`` so that its logits output is ``op`` (Squeeze or Unsqueeze) of the
    head's output over ``axes``: Squeeze of axis 1 is the (B, V) output an older talk_hf exported."""
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


@pytest.mark.parametrize("name", GRAPHS)
def test_an_older_folders_squeezed_logits_decode_as_before(shared_exports, tmp_path, name):
    """Graphs whose logits are (batch, V), as an older talk_hf exported them: the runner's tokens (greedy and
    beam search) are the folder's own, ORTModel's equal the PyTorch model's."""
    exported = shared_exports(name)
    older = exported.copy(tmp_path / "older")
    for file in GRAPHS[name]:
        _reshaped_logits(older / file, "Squeeze", [1])
    generator = OnnxGenerator(older, threads=1)
    assert [len(generator.sessions[file.removesuffix(".onnx")].get_outputs()[0].shape) for file in GRAPHS[name]] == [
        2
    ] * len(GRAPHS[name])
    ids, mask = exported.ids.numpy(), exported.mask.numpy()
    for settings in (dict(max_new_tokens=6), dict(max_new_tokens=6, num_beams=3)):
        expected = OnnxGenerator(exported.folder, threads=1).generate(ids, mask, **settings)
        np.testing.assert_array_equal(generator.generate(ids, mask, **settings), expected)
    loader = ORTModelForSeq2SeqLM if EXPORTED[name].is_seq2seq else ORTModelForCausalLM
    served, model = loader.from_pretrained(older, threads=1), exported.model()
    for settings in (dict(max_new_tokens=6), dict(max_new_tokens=6, num_beams=2)):
        inputs = dict(input_ids=exported.ids, attention_mask=exported.mask, **settings)
        assert torch.equal(served.generate(**inputs), model.generate(**inputs))


@pytest.mark.parametrize("file", ["decoder_step.onnx", "decoder_prompt.onnx"])
def test_logits_of_another_shape_are_refused(shared_exports, tmp_path, file):
    folder = shared_exports("talk-lm").copy(tmp_path / "export")
    _reshaped_logits(folder / file, "Unsqueeze", [1])
    with pytest.raises(ValueError, match=rf"{file} gives logits of shape \[.*, 1, 1, 40\], but the runner reads"):
        OnnxGenerator(folder, threads=1)
