"""Backend parametrisation of the operator tests: each test that asks runs on every CPU backend."""

import pytest

from talk_hf.ops import _extension

CPU_BACKENDS = ("torch", "cpu")


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
