"""profile_serving.py: the time inside ONNX Runtime is counted per graph and only while counting, a
decoding step's time splits into graphs and Python, and the step graph's node profile is summed by
operator type (on a one-node graph; the whole script runs on the full models by hand)."""

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("ctranslate2")
import profile_serving  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _matmul_session(folder: Path) -> ort.InferenceSession:
    """A session of a one-MatMul graph saved as ``folder/decoder_step.onnx``: x (N, 4) -> (N, 3)."""
    weights = numpy_helper.from_array(np.ones((4, 3), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "step",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 3])],
        [weights],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    path = folder / profile_serving.STEP_GRAPH
    path.write_bytes(model.SerializeToString())
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def test_the_clock_counts_each_graphs_runs_only_while_counting(tmp_path):
    session, clock = _matmul_session(tmp_path), profile_serving.OrtClock()
    methods = ort.InferenceSession.run, ort.InferenceSession.run_with_iobinding
    feed = {"x": np.ones((2, 4), np.float32)}
    session.run(None, feed)  # not counted
    with clock.counting():
        for _ in range(3):
            session.run(None, feed)
        binding = session.io_binding()
        binding.bind_cpu_input("x", feed["x"])
        binding.bind_output("y", "cpu")
        session.run_with_iobinding(binding)
    session.run(None, feed)  # not counted: the class's own methods are back
    assert clock.calls == {profile_serving.STEP_GRAPH: 4}
    assert clock.seconds[profile_serving.STEP_GRAPH] > 0
    assert (ort.InferenceSession.run, ort.InferenceSession.run_with_iobinding) == methods


def test_a_steps_time_splits_into_its_graphs_and_python():
    clock = profile_serving.OrtClock()
    clock.seconds.update({profile_serving.STEP_GRAPH: 2.0, "encoder.onnx": 0.5})
    clock.calls.update({profile_serving.STEP_GRAPH: 10, "encoder.onnx": 1})
    split = profile_serving.split_time(3.0, clock, tokens=60)
    assert split["steps"] == 10 and split["tokens_per_s"] == 20
    assert split["total_ms"] == pytest.approx(300) and split["step_ms"] == pytest.approx(200)
    assert split["other_graphs_ms"] == {"encoder.onnx": pytest.approx(50)}
    assert split["python_ms"] == pytest.approx(50)


def test_the_node_profile_sums_the_step_graphs_nodes_by_operator(tmp_path, monkeypatch):
    session = _matmul_session(tmp_path)
    generator = SimpleNamespace(sessions={"decoder_step": session})
    system = SimpleNamespace(generator=lambda threads: generator)

    def generate(system, batch, setting):  # two steps a batch, on whatever step session is in place
        for _ in range(2):
            generator.sessions["decoder_step"].run(None, {"x": np.ones((batch, 4), np.float32)})

    monkeypatch.setattr(profile_serving, "onnx_runtime_generate", generate)
    setting = SimpleNamespace(threads=1)
    profile = profile_serving.node_profile(system, [1, 5, 9], setting)
    assert generator.sessions["decoder_step"] is session  # the plain session is put back
    assert profile["profiled_steps"] == 6
    assert list(profile["ms_per_step_by_operator"]) == ["MatMul"]
    assert profile["matrix_products_share"] == 1.0
    assert profile["nodes_ms_per_step"] == pytest.approx(profile["ms_per_step_by_operator"]["MatMul"])
