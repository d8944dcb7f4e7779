"""Fixtures of the serving tests: the session's shared exports (`exported.SharedExports`)."""

import pytest

from .exported import SharedExports


@pytest.fixture(scope="session")
def shared_exports(tmp_path_factory) -> SharedExports:
    """Each tiny model's ONNX export, made on first use and shared by every serving test file."""
    return SharedExports(tmp_path_factory.mktemp("shared-exports"))
