"""Backend parametrisation of the operator tests: each test that asks runs on every CPU backend."""

import pytest

from talk_hf.ops import _extension

CPU_BACKENDS = ("torch", "cpu")


@pytest.fixture(autouse=True)
def _default_backend(monkeypatch):
    """The operator tests choose their backend themselves (``each_backend``, or a test's own
    setting): a $TALK_HF_BACKEND in the environment that runs pytest does not change what they test."""
    monkeypatch.setenv("TALK_HF_BACKEND", "auto")


@pytest.fixture(params=CPU_BACKENDS)
def each_backend(request, monkeypatch):
    """Run the test once per CPU backend, chosen through $TALK_HF_BACKEND (the ops' default)."""
    if request.param == "cpu":
        try:
            _extension.preflight("cpu")
        except _extension.ExtensionUnavailable as error:
            pytest.skip(str(error))
    monkeypatch.setenv("TALK_HF_BACKEND", request.param)
    return request.param
