"""The training loop: our kernels are built before its clock starts."""

from functools import partial

import pytest
import torch
from common import loop, signals
from common.pacing import TrainingClock

import talk_hf

from .conftest import LANGUAGE_MODELING, load_script, read_log, requires_data


@requires_data
@pytest.mark.parametrize("model_type", ["talk", "transformer"])
def test_our_kernels_are_prepared_before_the_training_clock_starts(model_type, tmp_path, monkeypatch):
    """A first-use kernel compile (faked here: the training clock's time source, which stands still
    otherwise, jumps an hour while it runs) is not charged to --max_train_minutes; the Transformer
    baseline does not ask for our kernels at all."""
    prepared, now = [], [0.0]

    def slow_prepare(device, backend=None):
        prepared.append(torch.device(device).type)
        now[0] += 3600.0
        return "torch"

    monkeypatch.setattr(loop, "TrainingClock", partial(TrainingClock, now=lambda: now[0]))
    monkeypatch.setattr(talk_hf.ops, "prepare_backend", slow_prepare)
    monkeypatch.setattr(signals, "stop_on_terminal_stop", lambda: None)  # leave pytest's signal handlers alone
    monkeypatch.setenv("TALK_HF_BACKEND", "torch")
    script = load_script("language-modeling/train.py")
    script.main(
        [
            *LANGUAGE_MODELING,
            "--model_type",
            model_type,
            "--max_steps",
            "2",
            "--test_split",
            "",
            "--output_dir",
            str(tmp_path),
        ]
    )
    steps, _ = read_log(tmp_path)
    assert prepared == (["cpu"] if model_type == "talk" else [])
    assert len(steps) == 2 and steps[-1]["seconds"] < 3600.0  # training time without the hour
