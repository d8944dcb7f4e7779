"""``python -m talk_hf.ops.build`` in process: built or reused, a failed backend among named ones,
``--arch``.  (`test_extension.test_build_entry_point` runs the real command in a subprocess.)

The loader is replaced by a fake in which the CPU backend builds and the CUDA one cannot, so the
tests run the same with and without a GPU and never compile anything.
"""

import os

import pytest

from talk_hf.ops import _extension, build
from talk_hf.ops._extension import ExtensionUnavailable


@pytest.fixture
def fake_loader(monkeypatch, tmp_path):
    """CPU: builds (first call "built", then "reused"); CUDA: unavailable. Returns the loaded kinds."""
    loaded = []

    def check_loadable(kind):
        if kind == "cuda":
            raise ExtensionUnavailable("cuda", "no CUDA device is visible", "run on a machine with a GPU")

    monkeypatch.setattr(_extension, "check_loadable", check_loadable)
    monkeypatch.setattr(_extension, "is_built", lambda kind: kind in loaded)
    monkeypatch.setattr(_extension, "load", loaded.append)
    monkeypatch.setattr(_extension, "build_directory", lambda kind: tmp_path / kind)
    return loaded


def test_a_second_build_is_reported_as_reused(fake_loader, capsys, tmp_path):
    assert build.main(["--cpu"]) == 0 and build.main(["--cpu"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"cpu: built in {tmp_path / 'cpu'}",
        f"cpu: reused in {tmp_path / 'cpu'}",
    ]


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
