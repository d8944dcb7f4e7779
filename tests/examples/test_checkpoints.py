"""Checkpoints: `Progress` carried over to another process count, and saves without progress bars."""

import pytest
from accelerate import Accelerator
from common import checkpoints
from common.checkpoints import Progress
from common.models import build_model
from common.tokenizer import train_tokenizer
from transformers.utils import logging as transformers_logging


@pytest.mark.parametrize("before, after", [((1, 1), (2, 1)), ((2, 1), (1, 2)), ((2, 3), (3, 1)), ((4, 1), (3, 2))])
@pytest.mark.parametrize("done_per_process", [0, 3, 6, 7])
def test_progress_carries_the_epochs_position_over_to_another_process_count(before, after, done_per_process):
    """Processes take an epoch's batches in turns: after P processes did k each, batches 0..k*P-1 are
    done. A resume with P' processes and accumulation A skips a prefix of those that whole steps
    cover and trains the rest of them again (fewer than one step's P' * A)."""
    (processes, _), (new_processes, accumulation) = before, after
    progress = Progress(batches_in_epoch=done_per_process, processes=processes)
    repeated = progress.carry_over(new_processes, accumulation)
    done = done_per_process * processes
    skipped = progress.batches_in_epoch * new_processes
    assert progress.processes == new_processes and progress.batches_in_epoch % accumulation == 0
    assert skipped + repeated == done and 0 <= repeated < new_processes * accumulation
    unchanged = Progress(batches_in_epoch=6, processes=2)
    assert unchanged.carry_over(2, 3) == 0 and unchanged.batches_in_epoch == 6


def test_saves_write_no_progress_bars(tmp_path, capfd):
    tokenizer = train_tokenizer(["ein hund", "a dog"], kind="word", vocab_size=20, min_frequency=1)
    model = build_model("talk", tokenizer, True, d_model=16, ffn_dim=32, heads=2, encoder_layers=1, decoder_layers=1)
    accelerator = Accelerator(cpu=True)
    capfd.readouterr()
    checkpoints.save_model(accelerator, model, tokenizer, tmp_path / "best", {"step": 1})
    assert "Writing model shards" not in capfd.readouterr().err
    assert transformers_logging.is_progress_bar_enabled()  # as it was: only the saves are quiet
    model.save_pretrained(tmp_path / "plain")  # what the loop used to print at every save
    assert "Writing model shards" in capfd.readouterr().err
