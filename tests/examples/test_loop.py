"""The training loop: our kernels are built before its clock starts; a step without target tokens stops the run."""

from functools import partial

import pytest
import torch
from accelerate import Accelerator
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


def _train_step(model, labels):
    """One `loop.train_step` of a linear model on a micro-batch with these labels, on the CPU."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def loss_fn(model, batch):
        mask = batch["labels"].ne(-100)
        return (model(batch["inputs"]).squeeze(-1) * mask).sum(), mask.sum()

    batch = {"inputs": torch.ones(*labels.shape, 2), "labels": labels}
    return loop.train_step(
        accelerator=Accelerator(cpu=True),
        model=model,
        optimizer=optimizer,
        scheduler=torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0),
        group=[batch],
        loss_fn=loss_fn,
        clip_norm=1.0,
        clock=TrainingClock(now=lambda: 0.0),
    )


def test_a_step_without_target_tokens_stops_before_any_update():
    """All labels -100: a clear error, and the weights as they were (no NaN update, no ZeroDivisionError)."""
    model = torch.nn.Linear(2, 1)
    before = [parameter.detach().clone() for parameter in model.parameters()]
    with pytest.raises(SystemExit, match=r"hold no target token \(every label is -100\)"):
        _train_step(model, torch.full((2, 3), -100))
    assert all(torch.equal(now, then) for now, then in zip(model.parameters(), before, strict=True))
    loss, tokens, _ = _train_step(model, torch.tensor([[5, -100, -100], [-100, -100, -100]]))
    assert tokens == 1 and torch.isfinite(torch.tensor(loss))
    assert not all(torch.equal(now, then) for now, then in zip(model.parameters(), before, strict=True))
