"""The figure and table of the README's measured results, from the run folders of `reproduce.sh`.

    python examples/results/plot.py runs/results [examples/results]

Each run folder is named TASK-MODEL_TYPE-sSEED (`multi30k-en-de-talk-s0`, `wikitext2-transformer-s2`,
...; without `-sSEED` it is seed 0) and holds the training script's `log.jsonl`, `test_results.json`,
`best/config.json` and, from runs that record it, `environment.json` (a training run's output
folder, or the record `reproduce.sh` keeps of it in examples/results/runs). The runs of one task
and model are its seeds. Writes to the output folder (default: this script's):

    curves.png     validation BLEU (translation) or perplexity (LM) against training minutes, one
                   panel per task, one line per model: the mean over its seeds at each evaluation,
                   with a band from the lowest to the highest seed
    summary.json   per task and model: the seeds' runs (parameters, steps, training minutes, target
                   tokens per second, validation curve, best validation metric, test metrics, the
                   machine where recorded) and their mean and standard deviation
    summary.md     the same as a Markdown table, mean ± standard deviation over the seeds (also printed)

For each of our models the summary and table also give its test metric minus the same task's
baseline's (the Transformer, GPT-2), seed by seed over the seeds both have: runs of one seed see the
same data order and, as reproduce.sh runs them, usually the same machine, so this difference is
free of most of the spread between seeds and machines that the separate means carry.
"""

import argparse
import json
import re
import statistics
from pathlib import Path

import matplotlib
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM

import talk_hf  # noqa: F401  (registers the package's models with the Auto classes)
from talk_hf.models.dynamic_conv.configuration_dynamic_conv import canonical_conv_type

matplotlib.use("Agg")  # files only, no display needed
import matplotlib.pyplot as plt  # noqa: E402

# model_type in the checkpoint's config (and, for DynamicConv, its conv_type) -> label
LABELS = {
    "talk": "TaLK",
    "marian": "Transformer",
    "gpt2": "GPT-2",
    "dynamic_conv": "DynamicConv",
    "light_conv": "LightConv",
    "slicenet": "SliceNet",
}
TASKS = {  # TASK part of the run folders -> (panel title, validation metric, whether higher is better)
    "multi30k-en-de": ("Multi30k En→De", "bleu", True),
    "multi30k-de-en": ("Multi30k De→En", "bleu", True),
    "multi30k-en-de-25min": ("Multi30k En→De, 25 minutes", "bleu", True),
    "wikitext2": ("WikiText-2 (word level)", "valid_ppl", False),
    "wikitext2-long": ("WikiText-2, blocks of 2,048", "valid_ppl", False),
    "wikitext2-long-lr2e-3": ("WikiText-2, blocks of 2,048, lr 2e-3", "valid_ppl", False),
    "multi30k-en-de-slicenet-pair": ("Multi30k En→De, SliceNet and its Transformer pair", "bleu", True),
    "multi30k-de-en-slicenet-pair": ("Multi30k De→En, SliceNet and its Transformer pair", "bleu", True),
}
SEED_SUFFIX = re.compile(r"-s(\d+)$")
SUMMED = ("parameters", "steps", "tokens_per_second", "best_valid", "test")  # the fields given as mean ± std
BASELINES = ("Transformer", "GPT-2")  # the attention models that ours are measured against


def model_label(best):
    """The display name of the model saved in the `best` checkpoint folder."""
    config = json.loads((best / "config.json").read_text())
    if "conv_type" in config:  # DynamicConv or LightConv, as older configurations spelled it too
        return LABELS[canonical_conv_type(config["conv_type"])]
    return LABELS[config["model_type"].removesuffix("_lm")]  # talk_lm: TaLK


def parameter_count(best):
    """Parameters of the model that `best/config.json` describes (tied weights once), built on the meta
    device: no weights needed."""
    config = AutoConfig.from_pretrained(best)
    auto_class = AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModelForCausalLM
    with torch.device("meta"):
        return auto_class.from_config(config).num_parameters()


def read_run(folder):
    """One seed's run: {"task", "model", "seed", "curve": [(minutes, metric)], "best_valid", "test"?, ...}."""
    seed = SEED_SUFFIX.search(folder.name)
    stem = folder.name[: seed.start()] if seed else folder.name
    task = next((t for t in TASKS if stem.startswith(t + "-") and "-" not in stem[len(t) + 1 :]), None)
    if task is None:
        raise SystemExit(f"error: {folder.name} is not TASK-MODEL_TYPE[-sSEED] with TASK one of {', '.join(TASKS)}")
    _, metric, higher_is_better = TASKS[task]
    records = [json.loads(line) for line in (folder / "log.jsonl").read_text().splitlines()]
    evaluations = [r for r in records if metric in r]
    curve = [(r["seconds"] / 60, r[metric]) for r in evaluations if "averaged" not in r]  # the weights as trained
    last = records[-1]
    run = {
        "task": task,
        "model": model_label(folder / "best"),
        "seed": int(seed.group(1)) if seed else 0,
        "parameters": parameter_count(folder / "best"),
        "steps": last["step"],
        "train_minutes": round(last["seconds"] / 60, 2),
        "tokens_per_second": round(last["train_tokens"] / last["seconds"], 1),
        "curve": curve,
        "best_valid": (max if higher_is_better else min)(r[metric] for r in evaluations),  # averages too
    }
    test_file = folder / "test_results.json"
    if test_file.exists():
        run["test"] = json.loads(test_file.read_text())["test_bleu" if metric == "bleu" else "test_ppl"]
    environment_file = folder / "environment.json"
    if environment_file.exists():  # e.g. "AMD EPYC, AVX512, L2 1024K"
        environment = json.loads(environment_file.read_text())
        run["machine"] = (
            f"{environment['cpu']}, {environment['cpu_capability']}, L2 {environment['cpu_caches'].get('L2', '?')}"
        )
    return run


def mean_and_std(values):
    """(mean, sample standard deviation; 0 for one value) of a list of numbers."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def group(runs):
    """Per (task, model), in TASKS order: {"task", "model", "seeds", "runs", FIELD: [mean, std] ...}."""
    groups = {}
    for run in sorted(runs, key=lambda r: (list(TASKS).index(r["task"]), r["model"], r["seed"])):
        groups.setdefault((run["task"], run["model"]), []).append(run)
    summaries = []
    for (task, model), members in groups.items():
        summary = {"task": task, "model": model, "seeds": [r["seed"] for r in members], "runs": members}
        for field in SUMMED:
            values = [r[field] for r in members if field in r]
            if values:
                summary[field] = list(mean_and_std(values))
        summaries.append(summary)
    return summaries


def add_paired_differences(summaries):
    """Give each summary of a model with a baseline in its task "test_vs_baseline": [mean, std] over
    the seeds both have (listed in "paired_seeds") of its test metric minus the baseline's."""
    for summary in summaries:
        baseline = next((s for s in summaries if s["task"] == summary["task"] and s["model"] in BASELINES), None)
        if baseline is None or summary["model"] in BASELINES:
            continue
        baseline_test = {run["seed"]: run["test"] for run in baseline["runs"] if "test" in run}
        differences = {
            run["seed"]: run["test"] - baseline_test[run["seed"]]
            for run in summary["runs"]
            if "test" in run and run["seed"] in baseline_test
        }
        if differences:
            summary["paired_seeds"] = sorted(differences)
            summary["test_vs_baseline"] = list(mean_and_std(list(differences.values())))


def band(runs):
    """(minutes, mean, lowest, highest) per evaluation index over the seeds that reached it."""
    count = max(len(r["curve"]) for r in runs)
    points = []
    for index in range(count):
        reached = [r["curve"][index] for r in runs if index < len(r["curve"])]
        minutes = statistics.fmean(m for m, _ in reached)
        values = [v for _, v in reached]
        points.append((minutes, statistics.fmean(values), min(values), max(values)))
    return list(zip(*points, strict=True))


def plot(summaries, path):
    tasks = [task for task in TASKS if any(s["task"] == task for s in summaries)]
    figure, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 4), squeeze=False)
    for axis, task in zip(axes[0], tasks, strict=True):
        title, metric, _ = TASKS[task]
        for summary in (s for s in summaries if s["task"] == task):
            minutes, mean, low, high = band(summary["runs"])
            seeds = len(summary["runs"])
            (line,) = axis.plot(
                minutes, mean, marker="o", label=f"{summary['model']} ({seeds} seed{'s' * (seeds > 1)})"
            )
            if seeds > 1:
                axis.fill_between(minutes, low, high, color=line.get_color(), alpha=0.2)
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


def spread(summary, field, digits=1):
    """`mean ± std` of a summary's field ('-' when no run has it; the mean alone for one seed)."""
    if field not in summary:
        return "-"
    mean, std = summary[field]
    return f"{mean:.{digits}f}" if len(summary["seeds"]) == 1 else f"{mean:.{digits}f} ± {std:.{digits}f}"


def paired(summary):
    """`±mean ± std (n seeds)` of a summary's test difference from its baseline, or '-'."""
    if "test_vs_baseline" not in summary:
        return "-"
    mean, std = summary["test_vs_baseline"]
    count = len(summary["paired_seeds"])
    return f"{mean:+.1f}" + (f" ± {std:.1f}" if count > 1 else "") + f" ({count} seed{'s' * (count > 1)})"


def table(summaries):
    """The Markdown table: one row per task and model, mean ± std over its seeds."""
    lines = [
        "| task | model | seeds | parameters | steps | target tokens/s | best validation (greedy BLEU / ppl) "
        "| test (beam-5 BLEU / ppl) | test − baseline, same seeds |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for summary in summaries:
        title, metric, _ = TASKS[summary["task"]]
        unit = "BLEU" if metric == "bleu" else "ppl"
        test = spread(summary, "test")
        lines.append(
            f"| {title} | {summary['model']} | {len(summary['seeds'])} | {summary['parameters'][0] / 1e6:.2f}M "
            f"| {spread(summary, 'steps', 0)} | {spread(summary, 'tokens_per_second', 0)} "
            f"| {unit} {spread(summary, 'best_valid')} | {test if test == '-' else f'{unit} {test}'} "
            f"| {paired(summary)} |"
        )
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", type=Path, help="the folder holding the run folders")
    parser.add_argument("output", type=Path, nargs="?", default=Path(__file__).parent)
    args = parser.parse_args()
    folders = sorted(f for f in args.runs.iterdir() if (f / "log.jsonl").exists() and (f / "best/config.json").exists())
    summaries = group(map(read_run, folders))
    add_paired_differences(summaries)
    args.output.mkdir(parents=True, exist_ok=True)
    plot(summaries, args.output / "curves.png")
    (args.output / "summary.json").write_text(json.dumps(summaries, indent=1) + "\n")
    (args.output / "summary.md").write_text(table(summaries))
    print(table(summaries))


if __name__ == "__main__":
    main()
