"""Fixtures of the serving tests: the session's shared exports (`exported.SharedExports`)."""

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
