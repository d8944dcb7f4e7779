"""Backend parametrisation of the operator tests: each test that asks runs on every CPU backend."""

import shutil
from pathlib import Path

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


# The CUDA kernel sets the `gpu` tests verify, chosen by $TALK_HF_UNVERIFIED_CUDA: "default" (the
# switch off: talk_conv's tiled kernels, csrc/talk_conv/talk_conv_cuda.cu, and the streaming kernels
# of dynamic_conv and light_conv on whole rows) and "stream" (every streaming kernel,
# csrc/<op>/<op>_cuda_stream.cu, packed rows too).
CUDA_KERNEL_SETS = {"default": "", "stream": "talk_conv,dynamic_conv,light_conv"}


@pytest.fixture(params=sorted(CUDA_KERNEL_SETS))
def cuda_kernel_set(request, monkeypatch):
    """Run the test once per CUDA kernel set (the switch is read at each op call)."""
    monkeypatch.setenv("TALK_HF_UNVERIFIED_CUDA", CUDA_KERNEL_SETS[request.param])
    return request.param


@pytest.fixture
def fresh_loader(monkeypatch):
    """Forget, for one test, which extensions were loaded and which fallbacks were announced."""
    monkeypatch.setattr(_extension, "_results", {})
    monkeypatch.setattr(_extension, "_warned", set())


@pytest.fixture
def private_cpu_build(tmp_path, monkeypatch) -> Path:
    """A private copy of the finished CPU build, under $TALK_HF_BUILD_DIR = tmp_path / "cache"
    (the shared build is made on first use; skipped where the CPU extension cannot be built)."""
    try:
        _extension.preflight("cpu")
    except _extension.ExtensionUnavailable as error:
        pytest.skip(str(error))
    _extension.load("cpu")
    built = _extension.build_directory("cpu")
    monkeypatch.setenv(_extension.BUILD_DIR_ENV, str(tmp_path / "cache"))
    copy = _extension.build_directory("cpu")
    shutil.copytree(built, copy)  # keeps modification times: ninja finds the objects up to date
    return copy
