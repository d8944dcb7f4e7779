"""What a run records: the environment's commit, the progress bars, the training log."""

import math
import shutil
import subprocess
from types import SimpleNamespace

import pytest
from common import records
from common.checkpoints import Progress

import talk_hf


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_environment_names_the_commit_of_the_package_it_imported(tmp_path, monkeypatch):
    checkout = tmp_path / "checkout"
    (checkout / "talk_hf").mkdir(parents=True)
    init = checkout / "talk_hf" / "__init__.py"
    init.write_text("")
    monkeypatch.setattr(talk_hf, "__file__", str(init))
    assert records.describe_package_source() is None  # not a git checkout: nothing to name

    def git(*arguments):
        command = ["git", "-C", str(checkout), "-c", "user.name=t", "-c", "user.email=t@t", *arguments]
        return subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    assert records.describe_package_source() is None  # a checkout that does not track the package
    git("add", ".")
    git("commit", "-qm", "package")
    assert records.describe_package_source() == {"commit": git("rev-parse", "HEAD"), "modified": False}
    init.write_text("VERSION = 2\n")
    assert records.describe_package_source() == {"commit": git("rev-parse", "HEAD"), "modified": True}


def test_progress_bar_counts_the_budget_in_minutes():
    progress = Progress(step=0, train_seconds=0.0)
    bar = records.progress_bar(progress, max_steps=9150, budget_seconds=600, disable=False)
    assert bar.total == 10 and "0.0/10.0 min" in str(bar) and "9150" not in str(bar)
    bar.close()
    steps = records.progress_bar(progress, max_steps=9150, budget_seconds=math.inf, disable=False)
    assert steps.total == 9150
    steps.close()


def test_training_log_moves_the_minute_bar_by_training_time(tmp_path):
    accelerator = SimpleNamespace(is_main_process=True, log=lambda *a, **k: None)
    progress = Progress()
    with records.TrainingLog(
        accelerator, tmp_path / "log.jsonl", progress=progress, max_steps=9150, log_every=1000, budget_seconds=600
    ) as log:
        for _ in range(3):
            progress.advance(batches=1, tokens=10, seconds=90.0)
            log.step(progress, loss=1.0, lr=1e-3, tokens=10)
        assert log.bar.n == pytest.approx(4.5) and "4.5/10.0 min" in str(log.bar) and "step=3" in str(log.bar)
        progress.advance(batches=1, tokens=10, seconds=700.0)  # the last step ends past the budget
        log.step(progress, loss=1.0, lr=1e-3, tokens=10)
        assert log.bar.n == 10
