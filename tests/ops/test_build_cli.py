"""``python -m talk_hf.ops.build``: what it builds, what it skips and its exit status.

The loader is replaced by a fake in which the CPU backend builds and the CUDA one cannot, so the
tests run the same with and without a GPU and never compile anything.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from talk_hf.ops import _extension, build
from talk_hf.ops._extension import ExtensionUnavailable


@pytest.fixture
def fake_loader(monkeypatch, tmp_path):
    """CPU: builds (first call "built", then "reused"); CUDA: unavailable. Returns the loaded kinds."""
    loaded = []

    def preflight(kind):
        if kind == "cuda":
            raise ExtensionUnavailable("cuda", "no CUDA device is visible", "run on a machine with a GPU")

    monkeypatch.setattr(_extension, "preflight", preflight)
    monkeypatch.setattr(_extension, "is_built", lambda kind: kind in loaded)
    monkeypatch.setattr(_extension, "load", loaded.append)
    monkeypatch.setattr(_extension, "build_directory", lambda kind: tmp_path / kind)
    return loaded


def test_without_flags_it_builds_what_it_can_and_says_what_it_skipped(fake_loader, capsys, tmp_path):
    assert build.main([]) == 0
    assert fake_loader == ["cpu"]
    out = capsys.readouterr().out.splitlines()
    assert out == [f"cpu: built in {tmp_path / 'cpu'}",
                   "cuda: skipped: no CUDA device is visible (fix: run on a machine with a GPU)"]


def test_a_second_build_is_reported_as_reused(fake_loader, capsys, tmp_path):
    assert build.main(["--cpu"]) == 0 and build.main(["--cpu"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"cpu: built in {tmp_path / 'cpu'}",
                                                    f"cpu: reused in {tmp_path / 'cpu'}"]


def test_a_named_backend_that_cannot_build_fails_with_the_reason(fake_loader, capsys):
    assert build.main(["--cpu", "--cuda"]) == 1
    assert fake_loader == ["cpu"]
    captured = capsys.readouterr()
    assert captured.out.startswith("cpu: built in ")
    assert captured.err.startswith("cuda: FAILED: ") and "no CUDA device is visible" in captured.err


def test_arch_sets_the_cuda_architectures(fake_loader, monkeypatch):
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "7.5")  # recorded, so the test's value is undone after it
    build.main(["--cpu", "--arch", "8.0", "9.0"])
    assert os.environ["TORCH_CUDA_ARCH_LIST"] == "8.0;9.0"


def test_it_runs_as_a_module():
    """The real entry point, with the real loader: --help needs neither a build nor a GPU."""
    result = subprocess.run([sys.executable, "-m", "talk_hf.ops.build", "--help"], capture_output=True, text=True,
                            cwd=Path(__file__).parent, timeout=120)
    assert result.returncode == 0
    assert result.stdout.startswith("usage: python -m talk_hf.ops.build") and "--arch" in result.stdout
