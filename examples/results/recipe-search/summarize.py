"""The record of the recipe search: one row per run of `run.sh`, validation scores only.

    python examples/results/recipe-search/summarize.py runs/recipe-search [examples/results/recipe-search]

Reads every run folder's `args.json` (its settings) and `log.jsonl`, and writes `results.json`
and `results.md` (also printed): per run the settings that the search varied, the steps and target
tokens per second it managed in its training time, its validation BLEU (greedy) at every
evaluation and, with --average_last, that of the averaged weights; best first within each model type.
"""

import argparse
import json
from pathlib import Path

VARIED = ("max_tokens", "lr", "warmup_steps", "dropout", "label_smoothing", "weight_decay", "average_last")


def read_run(folder):
    settings = json.loads((folder / "args.json").read_text())
    records = [json.loads(line) for line in (folder / "log.jsonl").read_text().splitlines()]
    evaluations = [r for r in records if "bleu" in r and "averaged" not in r]
    averaged = [r for r in records if "averaged" in r]
    last = records[-1]
    return {
        "run": folder.name,
        "model_type": settings["model_type"],
        "settings": {name: settings.get(name) for name in VARIED},
        "train_minutes": round(last["seconds"] / 60, 2),
        "steps": last["step"],
        "tokens_per_second": round(last["train_tokens"] / last["seconds"], 1),
        "valid_bleu": [round(r["bleu"], 2) for r in evaluations],
        "valid_loss": [round(r["valid_loss"], 4) for r in evaluations],
        "averaged_valid_bleu": round(averaged[0]["bleu"], 2) if averaged else None,
        "best_valid_bleu": round(max(r["bleu"] for r in evaluations + averaged), 2),
    }


def table(runs):
    lines = [
        "| model | " + " | ".join(VARIED) + " | steps | target tokens/s | valid BLEU per evaluation | averaged | best |",
        "|---|" + "---|" * len(VARIED) + "---|---|---|---|---|",
    ]
    for run in runs:
        settings = " | ".join(str(run["settings"].get(name, "-")) for name in VARIED)
        curve = " → ".join(f"{value:.1f}" for value in run["valid_bleu"])
        averaged = "-" if run["averaged_valid_bleu"] is None else f"{run['averaged_valid_bleu']:.1f}"
        lines.append(
            f"| {run['model_type']} | {settings} | {run['steps']} | {run['tokens_per_second']:.0f} | {curve} | {averaged} "
            f"| **{run['best_valid_bleu']:.1f}** |"
        )
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", type=Path, help="the folder of run.sh's run folders")
    parser.add_argument("output", type=Path, nargs="?", default=Path(__file__).parent)
    args = parser.parse_args()
    folders = [f for f in sorted(args.runs.iterdir()) if (f / "done").exists()]
    runs = sorted(map(read_run, folders), key=lambda run: (run["model_type"], -run["best_valid_bleu"]))
    (args.output / "results.json").write_text(json.dumps(runs, indent=1) + "\n")
    (args.output / "results.md").write_text(table(runs))
    print(table(runs))


if __name__ == "__main__":
    main()
