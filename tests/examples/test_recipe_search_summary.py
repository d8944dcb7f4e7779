"""examples/results/recipe-search/summarize.py on synthetic run folders: settings, curves, order."""

import json
import subprocess
import sys

from .conftest import EXAMPLES


def make_run(folder, settings, metric, values, averaged=None, done=True):
    folder.mkdir(parents=True)
    defaults = {
        "max_tokens": 1024,
        "lr": 1e-3,
        "warmup_steps": 150,
        "dropout": 0.1,
        "label_smoothing": 0.1,
        "average_last": 0,
    }
    (folder / "args.json").write_text(json.dumps({**defaults, **settings}))
    records = []
    for minute, value in enumerate(values, start=1):
        record = {"step": 10 * minute, "seconds": 60.0 * minute, "train_tokens": 600 * minute}
        records += [{**record, "loss": 3.0}, {**record, "valid_loss": 2.0, metric: value}]
    if averaged is not None:
        records.append({**records[-1], "averaged": 2, metric: averaged})
    (folder / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if done:
        (folder / "done").touch()


def test_summary_lists_every_finished_run_best_first(tmp_path):
    runs, output = tmp_path / "runs", tmp_path / "round" / "lm-long"  # not there yet: summarize.py makes it
    make_run(runs / "talk-a", {"model_type": "talk"}, "bleu", [5.0, 20.0])
    talk_b = {"model_type": "talk", "max_tokens": 512, "average_last": 2, "config_overrides": "heads=2"}
    make_run(runs / "talk-b", talk_b, "bleu", [6.0, 21.0], 21.5)
    make_run(runs / "talk-c", {"model_type": "talk"}, "bleu", [1.0], done=False)  # still running: left out
    make_run(runs / "lm-talk-a", {"model_type": "talk"}, "valid_ppl", [900.0, 400.0])
    make_run(runs / "lm-talk-b", {"model_type": "talk", "lr": 2e-3}, "valid_ppl", [800.0, 450.0])
    result = subprocess.run(
        [sys.executable, EXAMPLES / "results" / "recipe-search" / "summarize.py", runs, output],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    rows = json.loads((output / "results.json").read_text())
    assert [r["run"] for r in rows] == ["lm-talk-a", "lm-talk-b", "talk-b", "talk-a"]  # LM: lowest first
    best = rows[2]
    assert best["valid"] == [6.0, 21.0] and best["averaged_valid"] == 21.5 and best["best_valid"] == 21.5
    assert best["steps"] == 20 and best["tokens_per_second"] == 10.0 and best["settings"]["max_tokens"] == 512
    table = (output / "results.md").read_text()
    assert "## translation" in table and "## language model" in table and table in result.stdout
    assert "| talk | 512 | 0.001 | 150 | 0.1 | 0.1 | 2 | heads=2 | 20 | 10 | 6.0 → 21.0 | 21.5 | **21.5** |" in table
    assert "| talk | 1024 | 0.002 | 150 | 0.1 | 0.1 | 0 | - | 20 | 10 | 800.0 → 450.0 | - | **450.0** |" in table
