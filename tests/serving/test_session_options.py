"""The sessions of an exported folder leave out ONNX Runtime's fusions whose CPU kernels are slower than the
nodes they fuse (`runner_sessions.DISABLED_FUSIONS`): Add + LayerNormalization stay two nodes instead of a
com.microsoft SkipLayerNormalization, in the runner's and ORTModel's sessions alike."""

from __future__ import annotations

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")

import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from talk_hf.export import OnnxGenerator  # noqa: E402
from talk_hf.export.runner_sessions import DISABLED_FUSIONS, session_options  # noqa: E402

DISABLED = "optimization.disable_specified_optimizers"  # ONNX Runtime's session config key


def residual_layer_norm(width: int = 8) -> bytes:
    """A graph y = LayerNorm(x + skip), x and skip (N, 1, width): what a block's residual and norm export to."""
    rows = [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["N", 1, width]) for name in ("x", "skip")]
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["x", "skip"], ["sum"]),
            helper.make_node("LayerNormalization", ["sum", "gamma", "beta"], ["y"], axis=-1, epsilon=1e-5),
        ],
        "residual_layer_norm",
        rows,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1, width])],
        [
            numpy_helper.from_array(np.ones(width, np.float32), "gamma"),
            numpy_helper.from_array(np.zeros(width, np.float32), "beta"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8).SerializeToString()


def optimized_nodes(options: ort.SessionOptions, folder) -> list[str]:
    """The node types ONNX Runtime runs for `residual_layer_norm` under ``options``."""
    options.optimized_model_filepath = str(folder / "optimized.onnx")
    options.log_severity_level = 3  # not the warning that an optimised graph is saved
    ort.InferenceSession(residual_layer_norm(), options, providers=["CPUExecutionProvider"])
    return [node.op_type for node in onnx.load(folder / "optimized.onnx").graph.node]


def test_the_slow_fusion_is_left_out_where_onnx_runtime_would_make_it(tmp_path):
    plain = ort.SessionOptions()
    plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    assert optimized_nodes(plain, tmp_path) == ["SkipLayerNormalization"]  # what this ONNX Runtime would run
    assert optimized_nodes(session_options(1, "all", spin=False), tmp_path) == ["Add", "LayerNormalization"]


def test_every_session_of_a_folder_has_the_fusions_left_out(lm, seq2seq):
    expected = ",".join(DISABLED_FUSIONS)
    for served in (lm, seq2seq):
        runner_sessions = OnnxGenerator(served.folder).sessions.values()
        ort_model_sessions = [served.ort.exported.step.session]
        if served.ort.config.is_encoder_decoder:
            ort_model_sessions.append(served.ort.get_encoder().session)
        for session in [*runner_sessions, *ort_model_sessions]:
            assert session.get_session_options().get_session_config_entry(DISABLED) == expected
