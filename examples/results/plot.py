"""The figure and table of the README's measured results, from the run folders of `reproduce.sh`.

    python examples/results/plot.py runs/results [examples/results]

Each run folder is named TASK-MODEL_TYPE (`multi30k-en-de-talk`, `wikitext2-transformer`, ...) and
holds the training script's `log.jsonl`, `test_results.json` and `best/`. Writes to the output
folder (default: this script's):

    curves.png     validation BLEU (translation) or perplexity (LM) against training minutes,
                   one panel per task and one line per model
    summary.json   per run: parameters, steps, training minutes, target tokens per second,
                   best validation metric and the test metrics
    summary.md     the same as a Markdown table (also printed)
"""

import argparse
import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display needed
import matplotlib.pyplot as plt  # noqa: E402
from safetensors import safe_open  # noqa: E402

# model_type in the checkpoint's config (and, for DynamicConv, its conv_type) -> label
LABELS = {"talk": "TaLK", "marian": "Transformer", "gpt2": "GPT-2", "dynamic": "DynamicConv", "lightweight": "LightConv",
          "slicenet": "SliceNet"}
TASKS = {  # TASK prefix of the run folders -> (panel title, validation metric, whether higher is better)
    "multi30k-en-de": ("Multi30k En→De", "bleu", True),
    "multi30k-de-en": ("Multi30k De→En", "bleu", True),
    "wikitext2": ("WikiText-2 (word level)", "valid_ppl", False),
}


def model_label(best):
    """The display name of the model saved in the `best` checkpoint folder."""
    config = json.loads((best / "config.json").read_text())
    return LABELS[config.get("conv_type") or config["model_type"].removesuffix("_lm")]  # talk_lm: TaLK


def parameter_count(best):
    """Parameters of the checkpoint in `best` (tied weights are stored, and counted, once)."""
    total = 0
    for file in best.glob("*.safetensors"):
        with safe_open(file, framework="pt") as tensors:
            total += sum(math.prod(tensors.get_slice(name).get_shape()) for name in tensors.keys())
    return total


def read_run(folder):
    """Curve and summary of one run folder: {"task", "model", "curve": [(minutes, metric)], ...}."""
    task, _ = folder.name.rsplit("-", 1)
    _, metric, _ = TASKS[task]
    records = [json.loads(line) for line in (folder / "log.jsonl").read_text().splitlines()]
    evaluations = [r for r in records if metric in r]
    last = records[-1]
    summary = {
        "task": task,
        "model": model_label(folder / "best"),
        "parameters": parameter_count(folder / "best"),
        "steps": last["step"],
        "train_minutes": round(last["seconds"] / 60, 2),
        "tokens_per_second": round(last["train_tokens"] / last["seconds"], 1),
        "curve": [(r["seconds"] / 60, r[metric]) for r in evaluations],
    }
    test_file = folder / "test_results.json"
    if test_file.exists():
        summary["test"] = json.loads(test_file.read_text())
    return summary


def plot(runs, path):
    tasks = [task for task in TASKS if any(run["task"] == task for run in runs)]
    figure, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 4), squeeze=False)
    for axis, task in zip(axes[0], tasks, strict=True):
        title, metric, _ = TASKS[task]
        for run in (r for r in runs if r["task"] == task):
            minutes, values = zip(*run["curve"], strict=True)
            axis.plot(minutes, values, marker="o", label=run["model"])
        axis.set_title(title)
        axis.set_xlabel("training time (minutes, one CPU core)")
        if metric == "bleu":
            axis.set_ylabel("validation BLEU (greedy)")
        else:
            axis.set_ylabel("validation perplexity")
            axis.set_yscale("log")
        axis.grid(alpha=0.3)
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def table(runs):
    """The Markdown table of `runs`, one row per run."""
    lines = [
        "| task | model | parameters | steps | target tokens/s | best validation (greedy BLEU / ppl) | test (beam-5 BLEU / ppl) |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        _, metric, higher_is_better = TASKS[run["task"]]
        values = [value for _, value in run["curve"]]
        best = max(values) if higher_is_better else min(values)
        test = run.get("test", {})
        if metric == "bleu":
            valid, tested = f"BLEU {best:.1f}", f"BLEU {test['test_bleu']:.1f}" if test else "-"
        else:
            valid, tested = f"ppl {best:.1f}", f"ppl {test['test_ppl']:.1f}" if test else "-"
        lines.append(
            f"| {TASKS[run['task']][0]} | {run['model']} | {run['parameters'] / 1e6:.2f}M | {run['steps']} "
            f"| {run['tokens_per_second']:.0f} | {valid} | {tested} |"
        )
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", type=Path, help="the folder holding the run folders")
    parser.add_argument("output", type=Path, nargs="?", default=Path(__file__).parent)
    args = parser.parse_args()
    folders = sorted(f for f in args.runs.iterdir() if (f / "log.jsonl").exists() and (f / "best").is_dir())
    runs = sorted(map(read_run, folders), key=lambda run: (list(TASKS).index(run["task"]), run["model"]))
    args.output.mkdir(parents=True, exist_ok=True)
    plot(runs, args.output / "curves.png")
    (args.output / "summary.json").write_text(json.dumps(runs, indent=1) + "\n")
    (args.output / "summary.md").write_text(table(runs))
    print(table(runs))


if __name__ == "__main__":
    main()
