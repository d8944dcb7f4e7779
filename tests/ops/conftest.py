"""Backend parametrisation of the operator tests: each test that asks runs on every CPU backend."""

import os
import shutil
import sys
from pathlib import Path

import pytest

from talk_hf.ops import _extension
from talk_hf.ops._build import build_folder

from .. import processes

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


@pytest.fixture
def fresh_loader(monkeypatch):
    """Forget, for one test, which extensions were loaded and which fallbacks were announced."""
    monkeypatch.setattr(_extension, "_results", {})
    monkeypatch.setattr(_extension, "_warned", set())


@pytest.fixture(scope="session")
def cpu_build_of_these_sources(tmp_path_factory) -> Path:
    """A finished CPU build compiled from this checkout's kernel sources: the shared build where it
    was, else one built once per session in a temporary folder.  (A shared build made from another
    checkout of the same sources has the same folder, but its build.ninja names the other
    checkout's files: a copy of it would recompile everything where a relink should do.)"""
    try:
        _extension.preflight("cpu")
    except _extension.ExtensionUnavailable as error:
        pytest.skip(str(error))
    _extension.load("cpu")
    built = _extension.build_directory("cpu")
    if str(build_folder.CSRC) in (built / "build.ninja").read_text():
        return built
    root = tmp_path_factory.mktemp("cpu_build")
    result = processes.run(
        [sys.executable, "-m", "talk_hf.ops.build", "--cpu"],
        timeout=900,
        env={**os.environ, _extension.BUILD_DIR_ENV: str(root)},
    )
    assert result.returncode == 0, result.stderr
    return root / built.name


@pytest.fixture
def private_cpu_build(cpu_build_of_these_sources, tmp_path, monkeypatch) -> Path:
    """A private copy of a finished CPU build of these sources (`cpu_build_of_these_sources`), under
    $TALK_HF_BUILD_DIR = tmp_path / "cache" (skipped where the CPU extension cannot be built)."""
    monkeypatch.setenv(_extension.BUILD_DIR_ENV, str(tmp_path / "cache"))
    copy = _extension.build_directory("cpu")
    shutil.copytree(cpu_build_of_these_sources, copy)  # keeps modification times: ninja finds the objects up to date
    return copy
