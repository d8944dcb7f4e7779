"""What the decoding step's graph leaves out, node by node (at batch 1 with int8 weights the step is
bound by its small nodes, not its matrix products): TaLK's tap weights fold their normaliser into the
constants (no Div), a step's positions take the one mask column as its count (no CumSum), LightConv's
one kernel serves every row (no Expand to the batch), and DynamicConv's kernel is viewed as the step's
(B, H, K) (no Gather of the token's row); the source mask's additive bias is made once per step, not
once per decoder layer."""

from __future__ import annotations

import pytest

onnx = pytest.importorskip("onnx")

STEP_MODELS = ["talk-seq2seq", "dynamic-seq2seq", "light_conv-seq2seq", "talk-lm"]


@pytest.mark.parametrize("name", STEP_MODELS)
def test_the_step_holds_no_division_running_count_or_batch_expansion(shared_exports, name):
    """No Div of tensors (the sizes' arithmetic may divide: a source's rows per step row, once a step)."""
    graph = onnx.shape_inference.infer_shapes(onnx.load(shared_exports(name).folder / "decoder_step.onnx")).graph
    op_types = {node.op_type for node in graph.node}
    assert not op_types & {"CumSum", "Expand"}, sorted(op_types)
    sizes = {value.name for value in graph.value_info if value.type.tensor_type.elem_type == onnx.TensorProto.INT64}
    divisions = [node.output[0] for node in graph.node if node.op_type == "Div"]
    assert set(divisions) <= sizes and len(divisions) <= 1, divisions


@pytest.mark.parametrize("name", STEP_MODELS)
def test_the_step_gathers_only_from_weights_and_inputs(shared_exports, name):
    """The embedding's lookup and the row's position: no Gather of a computed tensor (a kernel's row)."""
    graph = onnx.load(shared_exports(name).folder / "decoder_step.onnx").graph
    sources = {tensor.name for tensor in graph.initializer} | {value.name for value in graph.input}
    gathered = [node.input[0] for node in graph.node if node.op_type == "Gather"]
    assert gathered and all(source in sources for source in gathered), gathered


@pytest.mark.parametrize("name", [name for name in STEP_MODELS if name.endswith("seq2seq")])
def test_the_step_makes_the_source_masks_bias_once(shared_exports, name):
    """One Where (mask -> 0 or the lowest value) whose result every decoder layer's cross-attention adds."""
    graph = onnx.load(shared_exports(name).folder / "decoder_step.onnx").graph
    wheres = [node for node in graph.node if node.op_type == "Where"]
    assert len(wheres) == 1, [node.name for node in wheres]
    layers = sum(value.name.startswith("cross_key_") for value in graph.input)
    readers = [node for node in graph.node if wheres[0].output[0] in node.input]
    assert len(readers) == layers >= 2 and {node.op_type for node in readers} == {"Add"}, [n.op_type for n in readers]
