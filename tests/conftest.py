"""Shared test setup: offline HuggingFace, deterministic seeds, GPU marker handling, torch's threads
under pytest-xdist."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402


def pytest_configure(config):
    """Under pytest-xdist (the README's ``-n auto``: one worker per core), each worker's torch takes its
    share of the cores: every worker at torch's default (one thread per core) would oversubscribe the
    CPU, and OpenMP threads that wait for a core spin.  Tests and scripts that set threads still do."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1 and "PYTEST_XDIST_WORKER" in os.environ:
        torch.set_num_threads(max(1, torch.get_num_threads() // workers))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
