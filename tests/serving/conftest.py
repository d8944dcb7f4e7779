"""Fixtures of the serving tests: the session's shared exports (`exported.SharedExports`)."""

import pytest

from .exported import SharedExports


@pytest.fixture(scope="session")
def shared_exports(tmp_path_factory) -> SharedExports:
    """Each tiny model's ONNX export, made on first use and shared by every serving test file; at the
    session's end, an error names any shared folder that a test changed."""
    exports = SharedExports(tmp_path_factory.mktemp("shared-exports"))
    yield exports
    exports.check_unchanged()
