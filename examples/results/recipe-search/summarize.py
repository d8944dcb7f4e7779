"""The record of the recipe search: one row per run of `run.sh`, validation scores only.

    python examples/results/recipe-search/summarize.py runs/recipe-search [examples/results/recipe-search]

Reads every finished run folder's `args.json` (its settings) and `log.jsonl`, and writes
`results.json` and `results.md` (also printed): per run the settings that the search varied, the
steps and target tokens per second it managed in its training time, its validation score at every
evaluation (translation: greedy BLEU; language models: perplexity) and, with --average_last, that of
the averaged weights; best first within each task and model type.
"""

import argparse
import json
from pathlib import Path

VARIED = ("max_tokens", "lr", "warmup_steps", "dropout", "label_smoothing", "average_last", "config_overrides")
METRICS = {"translation": ("bleu", "BLEU", True), "language model": ("valid_ppl", "perplexity", False)}


def read_run(folder):
    settings = json.loads((folder / "args.json").read_text())
    records = [json.loads(line) for line in (folder / "log.jsonl").read_text().splitlines()]
    task = "translation" if any("bleu" in r for r in records) else "language model"
    metric, _, higher_is_better = METRICS[task]
    evaluations = [r for r in records if metric in r and "averaged" not in r]
    averaged = [r for r in records if "averaged" in r]
    last = records[-1]
    return {
        "run": folder.name,
        "task": task,
        "model_type": settings["model_type"],
        "settings": {name: settings.get(name) for name in VARIED},
        "train_minutes": round(last["seconds"] / 60, 2),
        "steps": last["step"],
        "tokens_per_second": round(last["train_tokens"] / last["seconds"], 1),
        "valid": [round(r[metric], 2) for r in evaluations],
        "averaged_valid": round(averaged[0][metric], 2) if averaged else None,
        "best_valid": round((max if higher_is_better else min)(r[metric] for r in evaluations + averaged), 2),
    }


def table(runs, task):
    _, name, _ = METRICS[task]
    lines = [
        f"| model | {' | '.join(VARIED)} | steps | target tokens/s | valid {name} per evaluation | averaged | best |",
        "|---|" + "---|" * len(VARIED) + "---|---|---|---|---|",
    ]
    for run in (r for r in runs if r["task"] == task):
        settings = " | ".join("-" if run["settings"][key] is None else str(run["settings"][key]) for key in VARIED)
        curve = " → ".join(f"{value:.1f}" for value in run["valid"])
        averaged = "-" if run["averaged_valid"] is None else f"{run['averaged_valid']:.1f}"
        lines.append(
            f"| {run['model_type']} | {settings} | {run['steps']} | {run['tokens_per_second']:.0f} | {curve} "
            f"| {averaged} | **{run['best_valid']:.1f}** |"
        )
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", type=Path, help="the folder of run.sh's run folders")
    parser.add_argument("output", type=Path, nargs="?", default=Path(__file__).parent)
    args = parser.parse_args()
    folders = [f for f in sorted(args.runs.iterdir()) if (f / "done").exists()]

    def order(run):
        _, _, higher_is_better = METRICS[run["task"]]
        return run["task"], run["model_type"], -run["best_valid"] if higher_is_better else run["best_valid"]

    runs = sorted(map(read_run, folders), key=order)
    tables = "\n".join(f"## {task}\n\n{table(runs, task)}" for task in METRICS if any(r["task"] == task for r in runs))
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "results.json").write_text(json.dumps(runs, indent=1) + "\n")
    (args.output / "results.md").write_text(tables)
    print(tables)


if __name__ == "__main__":
    main()
