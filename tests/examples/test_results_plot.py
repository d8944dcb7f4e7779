"""examples/results/plot.py on synthetic run folders: curves, parameter counts, table and summary."""

import json
import subprocess
import sys

import torch
from safetensors.torch import save_file

from .conftest import EXAMPLES


def make_run(folder, config, records, test=None, weights=None):
    (folder / "best").mkdir(parents=True)
    (folder / "best" / "config.json").write_text(json.dumps(config))
    save_file(weights or {"embed": torch.zeros(10, 4), "proj": torch.zeros(4)}, folder / "best" / "model.safetensors")
    (folder / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if test is not None:
        (folder / "test_results.json").write_text(json.dumps(test))


def test_plot_writes_the_figure_summary_and_table(tmp_path):
    runs, output = tmp_path / "runs", tmp_path / "out"
    steps = [{"step": 1, "loss": 5.0, "train_tokens": 100, "seconds": 60.0}]
    make_run(
        runs / "multi30k-en-de-talk",
        {"model_type": "talk"},
        [*steps, {"step": 1, "seconds": 60.0, "train_tokens": 100, "valid_loss": 4.0, "bleu": 7.5},
         {"step": 2, "loss": 4.0, "train_tokens": 360, "seconds": 120.0},
         {"step": 2, "seconds": 120.0, "train_tokens": 360, "valid_loss": 3.0, "bleu": 12.25}],
        test={"split": "test_2016_flickr", "test_bleu": 13.0},
    )
    make_run(
        runs / "multi30k-en-de-lightconv",
        {"model_type": "dynamic_conv", "conv_type": "lightweight"},
        [*steps, {"step": 1, "seconds": 60.0, "train_tokens": 100, "valid_loss": 4.0, "bleu": 6.0}],
    )
    make_run(
        runs / "multi30k-en-de-slicenet",
        {"model_type": "slicenet"},
        [*steps, {"step": 1, "seconds": 60.0, "train_tokens": 100, "valid_loss": 5.0, "bleu": 2.0}],
    )
    make_run(
        runs / "wikitext2-transformer",
        {"model_type": "gpt2"},
        [*steps, {"step": 1, "seconds": 60.0, "train_tokens": 100, "valid_loss": 6.0, "valid_ppl": 403.4}],
        test={"split": "test", "test_ppl": 380.0},
        weights={"w": torch.zeros(3, 5)},
    )
    make_run(
        runs / "wikitext2-talk",
        {"model_type": "talk_lm"},
        [*steps, {"step": 1, "seconds": 60.0, "train_tokens": 100, "valid_loss": 6.5, "valid_ppl": 665.1}],
    )
    (runs / "unfinished").mkdir()  # no log: ignored
    result = subprocess.run(
        [sys.executable, EXAMPLES / "results" / "plot.py", runs, output], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    summary = {(r["task"], r["model"]): r for r in json.loads((output / "summary.json").read_text())}
    assert set(summary) == {
        ("multi30k-en-de", "TaLK"), ("multi30k-en-de", "LightConv"), ("multi30k-en-de", "SliceNet"),
        ("wikitext2", "GPT-2"), ("wikitext2", "TaLK"),
    }
    talk = summary["multi30k-en-de", "TaLK"]
    assert talk["parameters"] == 44 and talk["steps"] == 2 and talk["tokens_per_second"] == 3.0
    assert talk["curve"] == [[1.0, 7.5], [2.0, 12.25]] and talk["train_minutes"] == 2.0
    assert summary["wikitext2", "GPT-2"]["parameters"] == 15
    table = (output / "summary.md").read_text()
    assert "| Multi30k En→De | TaLK | 0.00M | 2 | 3 | BLEU 12.2 | BLEU 13.0 |" in table
    assert "| WikiText-2 (word level) | GPT-2 |" in table and "ppl 380.0" in table
    assert "| Multi30k En→De | LightConv |" in table and table in result.stdout
    assert (output / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
