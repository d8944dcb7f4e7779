"""Fixtures of the serving tests: the session's shared exports (`exported.SharedExports`), and three of
them served by `talk_hf.onnx` beside their PyTorch models (`served.Served`; skipped without ONNX Runtime)."""

import os

import pytest

from .exported import SharedExports


@pytest.fixture(scope="session")
def shared_exports(tmp_path_factory) -> SharedExports:
    """Each tiny model's ONNX export, made on first use and shared by every serving test file (and, under
    pytest-xdist, by every worker of the run: their base folders lie in the run's); at the session's
    end, an error names any shared folder that a test changed."""
    if "PYTEST_XDIST_WORKER" in os.environ:
        root = tmp_path_factory.getbasetemp().parent / "shared-exports"
        root.mkdir(exist_ok=True)
    else:
        root = tmp_path_factory.mktemp("shared-exports")
    exports = SharedExports(root)
    yield exports
    exports.check_unchanged()


def _served(shared_exports: SharedExports, name: str):
    pytest.importorskip("onnxruntime")
    from .served import served  # imports talk_hf.onnx, which needs ONNX Runtime

    return served(shared_exports, name)


@pytest.fixture(scope="module")
def lm(shared_exports):
    """The TaLK LM, exported with the word tokenizer."""
    return _served(shared_exports, "talk-lm")


@pytest.fixture(scope="module")
def seq2seq(shared_exports):
    """The DynamicConv encoder-decoder, exported into a copy of the LM's folder: a previous export's files
    it does not write must go."""
    return _served(shared_exports, "dynamic-seq2seq")


@pytest.fixture(scope="module")
def slicenet(shared_exports):
    """SliceNet, whose steps read the encoder output itself (no cross-attention keys and values)."""
    return _served(shared_exports, "slicenet")
