"""What a run records about itself besides its checkpoints: the training log (`log.jsonl`, the
Accelerate trackers and the progress bars, the evaluations' too; `read_log` reads it back on a resume, dropping a line
torn by a kill), where it trained (`environment.json`) and its test result (`test_results.json`)."""

import json
import math
import os
import platform
import subprocess
import sys
from pathlib import Path

import torch
from tqdm.auto import tqdm

import talk_hf

from .atomic_files import write_json, write_text_atomically
from .messages import fail, warn


def describe(metrics):
    """`name value, ...` with 4 significant digits."""
    return ", ".join(f"{k} {v:.4g}" for k, v in metrics.items())


class TrainingLog:
    """The records of a training run, in `log.jsonl` (main process) and the Accelerate trackers, and
    its progress bar; a `with` block closes the bar.

    A step record every `log_every` steps, and one per evaluation (`evaluation`). On a resume the
    records after the resumed step are dropped first: that part of the run is trained again. The bar
    counts steps, or minutes of training time when the run has a time budget (`budget_seconds`).
    """

    def __init__(self, accelerator, path, *, progress, max_steps, log_every, budget_seconds=math.inf, smoothed=False):
        self.accelerator = accelerator
        self.path = Path(path)
        self.log_every = log_every
        self.smoothed = smoothed  # the loss is label-smoothed: its exponential is no perplexity
        if accelerator.is_main_process:
            # The folder may not exist yet: nothing else creates it when no tracker is installed.
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.path.exists():
                kept = [r for r in read_log(self.path) if r["step"] <= progress.step]
                write_log(self.path, kept)
        self.bar = progress_bar(progress, max_steps, budget_seconds, disable=not accelerator.is_main_process)
        self.in_minutes = math.isfinite(budget_seconds)

    def __enter__(self):
        return self

    def __exit__(self, *exception):
        self.bar.close()

    def step(self, progress, *, loss, lr, tokens):
        """The step `progress` just finished: mean `loss` per target token, learning rate, target tokens.

        The record's `ppl` is exp(`loss`), written only where the loss is the plain NLL: a label-smoothed
        loss (`smoothed`) is higher than the NLL, and its exponential would not compare with valid_ppl."""
        if self.in_minutes:
            self.bar.update(min(progress.train_seconds / 60, self.bar.total) - self.bar.n)
            self.bar.set_postfix(step=progress.step, loss=f"{loss:.3f}", epoch=progress.epoch)
        else:
            self.bar.update(1)
            self.bar.set_postfix(loss=f"{loss:.3f}", epoch=progress.epoch)
        if progress.step % self.log_every == 0:
            self._write(
                {
                    "step": progress.step,
                    "epoch": progress.epoch,
                    "loss": loss,
                    **({} if self.smoothed else {"ppl": math.exp(min(loss, 50))}),
                    "lr": lr,
                    "tokens": tokens,
                    "train_tokens": progress.train_tokens,
                    "seconds": round(progress.train_seconds, 2),
                }
            )

    def evaluation(self, progress, metrics, about):
        """An evaluation's `metrics` at `progress`; `about` (e.g. averaged=N) says what was evaluated."""
        self._write(
            {
                "step": progress.step,
                "seconds": round(progress.train_seconds, 2),
                "train_tokens": progress.train_tokens,
                **about,
                **metrics,
            }
        )
        if self.accelerator.is_main_process:
            self.bar.write(f"step {progress.step}{' ' + describe(about) if about else ''}: {describe(metrics)}")

    def warn(self, message):
        """`warning: message` on the main process, above the progress bar."""
        if self.accelerator.is_main_process:
            self.bar.write(f"warning: {message}", file=sys.stderr)

    def _write(self, record):
        self.accelerator.log({k: v for k, v in record.items() if k != "step"}, step=record["step"])
        if self.accelerator.is_main_process:
            with open(self.path, "a") as f:
                f.write(json.dumps(record) + "\n")


def read_log(path):
    """The records of a `log.jsonl` ([] when there is none).

    A last line that is not a record is what a run killed while appending leaves: it is dropped
    with a warning (its step lies after the last save, so the resumed run writes it again). Any
    other line that is not a JSON record with a step raises SystemExit naming the file and line.
    """
    path = Path(path)
    if not path.exists():
        return []
    lines = path.read_text(errors="replace").splitlines()
    records = []
    for number, line in enumerate(lines, start=1):
        problem = _record_problem(line)
        if problem is not None and number == len(lines):
            warn(f"{path} line {number} is cut short (a run was killed while writing it): dropped")
        elif problem is not None:
            fail(
                f"{path} line {number} is not a log record ({problem}): only the last line can be torn by a kill, "
                "so something else changed this file. Repair or delete that line, then resume again"
            )
        else:
            records.append(json.loads(line))
    return records


def _record_problem(line):
    """Why `line` is not a log record (a JSON object with an integer step), or None."""
    try:
        record = json.loads(line)
    except ValueError as error:
        return str(error)
    if not isinstance(record, dict) or not isinstance(record.get("step"), int):
        return "no step"
    return None


def write_log(path, records):
    """Write `records` as the whole of the `log.jsonl` at `path`, atomically."""
    write_text_atomically(path, "".join(json.dumps(record) + "\n" for record in records))


def progress_bar(progress, max_steps, budget_seconds, disable):
    """The training bar: steps of `max_steps`, or minutes of the time budget when there is one (a
    10-minute run then shows 10 minutes, not the thousands of steps its epochs would take)."""
    if not math.isfinite(budget_seconds):
        return tqdm(total=max_steps, initial=progress.step, disable=disable, desc="train")
    total = budget_seconds / 60
    return tqdm(
        total=total,
        initial=min(progress.train_seconds / 60, total),
        disable=disable,
        desc="train (minutes of training time)",
        bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.1f}/{total:.1f} min{postfix}",
    )


def evaluation_bar(accelerator, batches, description):
    """`batches` (an evaluation's loader, this process's share) with a progress bar named
    `description`, shown on the main process like the training bar and cleared when it is done."""
    return tqdm(batches, desc=description, disable=not accelerator.is_main_process, leave=False)


def write_environment(output_dir, processes, device=None, *, mixed_precision):
    """`output_dir/environment.json`: where the run trains (`describe_environment`) and the mixed
    precision it runs (`Accelerator.mixed_precision`: no, fp16 or bf16), of its latest start."""
    environment = {**describe_environment(processes), "device": str(device), "mixed_precision": mixed_precision}
    write_json(Path(output_dir) / "environment.json", environment)


def describe_environment(processes: int) -> dict:
    """What a run's result depends on besides its settings: the machine and the library versions.

    Two VMs sold as the same type can differ in CPU generation (vector instructions, cache sizes),
    and a run with a training-time budget then makes a different number of steps.
    """
    import accelerate
    import transformers

    cpuinfo = Path("/proc/cpuinfo")
    cpu_lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    cpu = next((line.split(":", 1)[1].strip() for line in cpu_lines if line.startswith("model name")), None)
    caches = {}  # e.g. {"L1d": "32K", "L2": "1024K", "L3": "32768K"} of the first core
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        level, kind = (index / "level").read_text().strip(), (index / "type").read_text().strip()
        name = f"L{level}" + {"Data": "d", "Instruction": "i"}.get(kind, "")
        caches[name] = (index / "size").read_text().strip()
    return {
        "cpu": cpu or platform.processor() or platform.machine(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),  # the vector instructions torch uses
        "cpu_caches": caches,
        "logical_cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "processes": processes,
        "gpus": [torch.cuda.get_device_name(index) for index in range(torch.cuda.device_count())],
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "accelerate": accelerate.__version__,
            "talk_hf": talk_hf.__version__,
        },
        "talk_hf_source": describe_package_source(),
    }


def describe_package_source() -> dict | None:
    """The git commit of the checkout talk_hf is imported from, and whether its tracked files
    (package, kernels, scripts) differ from that commit.

    `{"commit": "5b7ace4…", "modified": False}`, or None where talk_hf is not a tracked part of a
    git checkout (e.g. an installed wheel; its version number is in `versions`).
    """
    package_dir = Path(talk_hf.__file__).resolve().parent

    def git(*arguments):
        try:
            result = subprocess.run(["git", "-C", str(package_dir), *arguments], capture_output=True, text=True)
        except OSError:  # no git on this machine
            return None
        return result.stdout.strip() if result.returncode == 0 else None

    if git("ls-files", "--error-unmatch", "__init__.py") is None:  # not a checkout, or one that ignores it
        return None
    return {"commit": git("rev-parse", "HEAD"), "modified": bool(git("status", "--porcelain", "--untracked-files=no"))}


def report_test(accelerator, args, best, metrics, split, records):
    """Print the test metrics of checkpoint `best` and write them to `output_dir/test_results.json`.

    `metrics` are an `evaluate` result; the file names them test_loss, test_ppl (and test_bleu).
    `split` is the name of the split they were computed on, as the data spells it (`--test_split`
    test finds test_2016_flickr: `data.split_name`), and `records` how many of its records were read:
    where `--max_eval_samples` cut the split, the line and the file say so (`whole_split` false).
    """
    named = {"test_" + name.removeprefix("valid_"): value for name, value in metrics.items()}
    whole = args.max_eval_samples is None or records < args.max_eval_samples
    part = "" if whole else f", on its first {records} records only (--max_eval_samples {args.max_eval_samples})"
    accelerator.print(f"test ({split}) with {best}: {describe(named)}{part}")
    if accelerator.is_main_process:
        record = {"split": split, "records": records, "whole_split": whole, "checkpoint": str(best), **named}
        write_json(Path(args.output_dir) / "test_results.json", record)
