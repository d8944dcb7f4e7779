"""The Accelerate training loop shared by the translation and language-modeling scripts.

One optimizer step consumes `accumulation` micro-batches on each of the `num_processes`
processes. The loss is the sum over all target tokens of that global batch divided by their
count, whatever the split into processes and micro-batches: one process with accumulation 2 and
two processes without accumulation compute the same loss and gradients.

Output folder layout (`output_dir`; `run_folder` says who may write it and what a start needs):

    state/      Accelerate state (model, optimizer, scheduler, RNGs, `Progress`): resume from here
    last/       the latest model + tokenizer, `save_pretrained` format
    best/       the model + tokenizer with the best validation metric so far
    tokenizer/  the run's tokenizer, saved before training: a resume uses it, not a new one
    log.jsonl   one JSON record per logged step and per evaluation
    args.json   the command-line settings of the run, defaults included (of its first start)
    resumes.jsonl  one line per resume: when, where, and the settings it changed
    environment.json  where it trained (CPU and its vector instructions, caches, threads,
                processes, GPUs, library versions, the git commit of the talk_hf it imported; of
                its latest start): a fixed training-time budget buys as many steps as the machine
                gives
    .lock, .lock.json  the lock that keeps a second run out while one runs, and who holds it

Every folder is written beside its final name and then renamed into place, so a run killed at any
moment leaves the previous complete version (`X` or, if it died between two renames, `X.old`);
files are written the same way, except `log.jsonl`, which is appended to (a resume drops a torn
last line). A kill costs at most the steps since the last save.
"""

import importlib.util
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import threading
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import huggingface_hub
import torch
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.utils import DistributedType, GradientAccumulationPlugin, set_seed
from tqdm.auto import tqdm
from transformers import AutoConfig, AutoTokenizer, get_scheduler

import talk_hf

from . import run_folder
from .batching import TokenBatchSampler
from .run_folder import existing_dir, replace_dir, write_json

# The model types of talk_hf's families (the baselines are transformers' own).
OUR_MODEL_TYPES = frozenset(config_class.model_type for config_class, *_ in talk_hf.MODEL_FAMILIES)


@contextmanager
def training_run(args):
    """The `Accelerator` of a run of `args`, in its output folder (a `with` block).

    The folder is locked for this run and checked for a fresh start or a resume first
    (`run_folder.open_run`), before anything is written; the lock goes when the block ends. TensorBoard
    tracks the run when it is installed. Gradients are synchronised every
    `gradient_accumulation_steps` micro-batches exactly (the sampler makes epochs a whole number of
    steps), and the scheduler steps once per optimizer step whatever the number of processes: the
    global batch, not the process count, sets the pace.
    """
    accelerator = Accelerator(
        mixed_precision=args.mixed_precision,
        gradient_accumulation_plugin=GradientAccumulationPlugin(
            num_steps=args.gradient_accumulation_steps, sync_with_dataloader=False
        ),
        step_scheduler_with_optimizer=False,
        log_with="tensorboard" if importlib.util.find_spec("tensorboard") else None,
        project_dir=args.output_dir,
    )
    lock = run_folder.open_run(accelerator, args)
    try:
        set_seed(args.seed)
        hparams = {k: v for k, v in vars(args).items() if isinstance(v, (int, float, str, bool))}
        accelerator.init_trackers("train", config=hparams)
        if accelerator.is_main_process:  # where it trains
            write_json(Path(args.output_dir) / "environment.json", describe_environment(accelerator.num_processes))
        yield accelerator
        accelerator.end_training()
    finally:
        if lock is not None:
            lock.release()


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


def total_steps(args, steps_per_epoch: int) -> int:
    """The optimizer steps to train: `--max_steps`, or `--epochs` worth of them."""
    return args.max_steps if args.max_steps is not None else max(1, math.ceil(args.epochs * steps_per_epoch))


def make_optimizer(model, args, max_steps: int):
    """AdamW (betas 0.9/0.98 as in the papers) and the warmup schedule, decaying over `max_steps`."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=args.weight_decay)
    scheduler = get_scheduler(args.schedule, optimizer, num_warmup_steps=args.warmup_steps, num_training_steps=max_steps)
    return optimizer, scheduler


def token_loss(logits, labels, label_smoothing=0.0):
    """Summed (label-smoothed) cross-entropy over the positions where `labels` != -100.

    logits: (B, T, V); labels: (B, T). Returns (loss_sum, token_count), both 0-d tensors. The
    smoothed loss is (1 - eps) * NLL + eps * the mean over the vocabulary of -log p, in float32.
    """
    loss = F.cross_entropy(
        logits.flatten(0, 1).float(),
        labels.flatten(),
        ignore_index=-100,
        label_smoothing=label_smoothing,
        reduction="sum",
    )
    return loss, labels.ne(-100).sum()


def sequence_nll(logits, labels):
    """(B,) summed negative log-likelihood of each sequence's target tokens.

    logits: (B, T, V); labels: (B, T) with -100 where nothing is predicted.
    """
    # (B*T, V) rows, as in training: cross_entropy over a transposed (B, V, T) view is far slower.
    losses = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), reduction="none")  # 0 where -100
    return losses.view_as(labels).sum(1)


class LossMeter:
    """Validation loss over all tokens of a split, gathered from every process.

    `gather_for_metrics` drops the duplicates that even batches add at the end of a sharded split,
    so the result is the same on any number of processes: call `add` once per loader batch.
    """

    def __init__(self, accelerator):
        self.accelerator = accelerator
        self.nll, self.tokens = [], []

    def add(self, nll, labels):
        """nll: (B,) the batch's `sequence_nll`; labels: (B, T) with -100 where nothing is predicted."""
        self.nll.append(self.accelerator.gather_for_metrics(nll))
        self.tokens.append(self.accelerator.gather_for_metrics(labels.ne(-100).sum(1)))

    def result(self):
        loss = (torch.cat(self.nll).sum() / torch.cat(self.tokens).sum()).item()
        return {"valid_loss": loss, "valid_ppl": math.exp(min(loss, 50))}


class WeightAverage:
    """The parameters at the last `count` evaluations, and their mean: fairseq's checkpoint averaging.

    The snapshots are float32 copies on the CPU (`count` x the model's size in memory). They are
    saved with the Accelerate state (`register_for_checkpointing`), so a resumed run averages what an
    uninterrupted one would. Every process keeps the same snapshots of its replicated parameters,
    which is why sharded (FSDP) training is refused.
    """

    def __init__(self, model, count):
        self.parameters = list(model.parameters())
        self.snapshots = deque(maxlen=count)

    def add(self):
        """Keep the current parameters (the oldest snapshot drops out once there are `count`)."""
        self.snapshots.append([p.detach().to("cpu", torch.float32, copy=True) for p in self.parameters])

    @contextmanager
    def swapped_in(self):
        """Inside the block the model holds the mean of the snapshots; afterwards its own weights again."""
        own = [p.detach().clone() for p in self.parameters]
        with torch.no_grad():
            for index, parameter in enumerate(self.parameters):
                mean = sum(snapshot[index] for snapshot in self.snapshots) / len(self.snapshots)
                parameter.copy_(mean)
        try:
            yield
        finally:
            with torch.no_grad():
                for parameter, weights in zip(self.parameters, own, strict=True):
                    parameter.copy_(weights)

    def state_dict(self):
        return {"snapshots": list(self.snapshots)}

    def load_state_dict(self, state):
        self.snapshots = deque(state["snapshots"], maxlen=self.snapshots.maxlen)


@dataclass
class Progress:
    """Where training stands; saved with the Accelerate state so a run resumes mid-epoch."""

    epoch: int = 0
    batches_in_epoch: int = 0  # micro-batches this process has consumed in `epoch`
    step: int = 0  # optimizer steps done
    train_seconds: float = 0.0  # wall time spent training (evaluation and saving excluded)
    train_tokens: int = 0  # target tokens trained on, all processes together
    best: float | None = None  # best validation metric so far

    def state_dict(self):
        return asdict(self)

    def load_state_dict(self, state):
        for key, value in state.items():
            setattr(self, key, value)


def save_model(accelerator, model, tokenizer, directory, metadata):
    """`save_pretrained` model and tokenizer into `directory`, atomically (call on every process)."""
    # Under FSDP the full weights must be gathered from the shards (every process takes part).
    state_dict = accelerator.get_state_dict(model) if accelerator.distributed_type == DistributedType.FSDP else None
    if accelerator.is_main_process:
        tmp = Path(str(directory) + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        accelerator.unwrap_model(model).save_pretrained(tmp, state_dict=state_dict)
        tokenizer.save_pretrained(tmp)
        (tmp / "training_state.json").write_text(json.dumps(metadata, indent=1))
        replace_dir(tmp, directory)
    accelerator.wait_for_everyone()


def save_state(accelerator, directory):
    """`accelerator.save_state` into `directory`, atomically (call on every process)."""
    tmp = Path(str(directory) + ".tmp")
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(tmp, safe_serialization=False)  # tied weights stay tied, no warning
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        replace_dir(tmp, directory)
    accelerator.wait_for_everyone()


class JsonLog:
    """Appends records to `log.jsonl` (main process) and to the Accelerate trackers."""

    def __init__(self, accelerator, path, resume_step):
        self.accelerator = accelerator
        self.path = Path(path)
        if accelerator.is_main_process:
            # The folder may not exist yet: nothing else creates it when no tracker is installed.
            self.path.parent.mkdir(parents=True, exist_ok=True)
        if accelerator.is_main_process and self.path.exists():
            # Records after the resumed state belong to the lost part of the run: they are redone.
            kept = [r for r in run_folder.read_log(self.path) if r["step"] <= resume_step]
            run_folder.write_log(self.path, kept)

    def __call__(self, record):
        self.accelerator.log({k: v for k, v in record.items() if k != "step"}, step=record["step"])
        if self.accelerator.is_main_process:
            with open(self.path, "a") as f:
                f.write(json.dumps(record) + "\n")


def describe(metrics):
    """`name value, ...` with 4 significant digits."""
    return ", ".join(f"{k} {v:.4g}" for k, v in metrics.items())


def micro_batch_groups(batches, size):
    """Lists of `size` consecutive batches (the sampler makes the count a multiple of `size`)."""
    group = []
    for batch in batches:
        group.append(batch)
        if len(group) == size:
            yield group
            group = []


class TrainingClock:
    """Wall time spent training: everything between the laps except the spans spent `paused()`.

    A step's `lap()` therefore holds fetching its batches, launching its work and waiting for the
    device to finish the previous step (a GPU runs behind the host, so time measured from a step's
    start to its last launch alone misses most of the device's work), but not evaluation or
    saving. Time before a pause is banked and handed out with the next lap. Pauses may nest (a
    terminal stop during an evaluation): only the outermost one banks and restarts the clock.
    """

    def __init__(self):
        self._mark = time.perf_counter()
        self._banked = 0.0
        self._pause_depth = 0

    def lap(self) -> float:
        """Seconds of training since the last lap (or since the clock was made)."""
        now = time.perf_counter()
        seconds, self._mark, self._banked = self._banked + now - self._mark, now, 0.0
        return seconds

    @contextmanager
    def paused(self):
        """A span that is not training time (evaluation, saving, a stopped process)."""
        if self._pause_depth == 0:
            self._banked += time.perf_counter() - self._mark
        self._pause_depth += 1
        try:
            yield
        finally:
            self._pause_depth -= 1
            if self._pause_depth == 0:
                self._mark = time.perf_counter()


def stop_on_terminal_stop():
    """Make a terminal stop (Ctrl-Z, `kill -TSTP`) stop this process however it was started; call
    it first thing in a script.

    A process whose process group is orphaned (started with `setsid`, or `nohup ... &` from a shell
    that has exited: the usual way to leave a long run behind) discards a SIGTSTP that has its
    default action, so `kill -TSTP` stopped such a run only inside `stops_off_the_clock`, not while
    it loaded data or evaluated the test set. With this handler it stops everywhere; inside
    `stops_off_the_clock` the handler that also pauses the clock takes over. Does nothing where
    there is no SIGTSTP (Windows) or off the main thread.
    """
    if hasattr(signal, "SIGTSTP") and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTSTP, _stop_this_process)


def _stop_this_process(signum, frame):
    os.kill(os.getpid(), signal.SIGSTOP)  # returns once somebody sends SIGCONT


@contextmanager
def stops_off_the_clock(clock):
    """Make a terminal stop (Ctrl-Z, `kill -TSTP`) stop the process without charging the budget.

    Inside the block, SIGTSTP pauses `clock`, stops the process and, once it is continued
    (`fg`, `kill -CONT`), restarts the clock: a time-budgeted run can be stopped to free the
    machine for a while and still trains for its whole budget. Does nothing where there is no
    SIGTSTP (Windows) or off the main thread (Python only installs handlers there).
    """
    if not hasattr(signal, "SIGTSTP") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        with clock.paused():
            _stop_this_process(signum, frame)

    previous = signal.signal(signal.SIGTSTP, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTSTP, previous)


def crossed_multiple(before, after, interval):
    """Whether some whole multiple of `interval` (> 0) lies in (before, after]."""
    return math.floor(after / interval) > math.floor(before / interval)


def prepare_kernels(accelerator, model):
    """Build and load our compiled kernels for this process's device before the training clock
    starts: a first-use compile (a minute or more) is not training time.  Baselines need none."""
    if accelerator.unwrap_model(model).config.model_type in OUR_MODEL_TYPES:
        talk_hf.ops.prepare_backend(accelerator.device)


def train_step(accelerator, model, optimizer, scheduler, group, loss_fn, *, clip_norm, clock):
    """One optimizer step over a group of micro-batches (gradient accumulation), on every process.

    Args:
        group: the micro-batches of this process for the step (`micro_batch_groups`).
        loss_fn: (model, batch) -> (summed loss, token count) over the batch's target tokens.
        clip_norm: the gradients' largest norm (0: no clipping).
        clock: the `TrainingClock`, lapped when the step's updates are done.
    Returns:
        (mean loss per target token, target tokens, seconds), all three over every process: the
        step's seconds are the slowest process's, so that all agree on when the time budget ends.
    """
    accumulation = accelerator.gradient_accumulation_steps
    tokens = accelerator.reduce(sum(b["labels"].ne(-100).sum() for b in group), "sum")
    # backward divides by `accumulation` and DDP averages over processes: undo both.
    scale = accelerator.num_processes * accumulation / tokens
    total = 0.0
    for batch in group:
        with accelerator.accumulate(model):
            loss_sum, _ = loss_fn(model, batch)
            accelerator.backward(loss_sum * scale)
        total += loss_sum.detach()
    if clip_norm > 0:
        accelerator.clip_grad_norm_(model.parameters(), clip_norm)
    optimizer.step()
    if not accelerator.optimizer_step_was_skipped:
        scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    # One collective for the loss (summed) and the step time (the slowest process's).
    elapsed = torch.tensor(clock.lap(), device=accelerator.device)
    per_process = accelerator.gather(torch.stack([total.float(), elapsed]).unsqueeze(0))  # (P, 2)
    summed_loss, step_seconds = torch.stack([per_process[:, 0].sum(), per_process[:, 1].max()]).tolist()
    step_tokens = int(tokens)
    return summed_loss / step_tokens, step_tokens, step_seconds


def fit(
    accelerator, model, optimizer, scheduler, train_loader, sampler, loss_fn, evaluate, tokenizer, args, metric,
    *, max_steps,
):
    """Train until `max_steps` optimizer steps or `args.max_train_minutes` of training time.

    Evaluates every `args.eval_every` steps, or each time the training time (evaluation and saving
    excluded) passes a multiple of `args.eval_every_minutes` when that is given, and at the end.
    With `args.average_last` N, the mean of the weights of the last N evaluations is evaluated at the
    end too (its log record says `averaged`: how many), and becomes best/ if it scores better.

    Args:
        model, optimizer, scheduler, train_loader: already passed through `accelerator.prepare`
            (the accelerator built with `step_scheduler_with_optimizer=False`).
        sampler: the `TokenBatchSampler` behind `train_loader`, for `set_epoch`.
        loss_fn: (model, batch) -> (loss_sum, token_count) over the batch's target tokens.
        evaluate: (model) -> {name: float}, run on every process (evaluation is distributed).
        tokenizer: saved beside every model checkpoint.
        args: max_train_minutes, eval_every, eval_every_minutes, save_every, average_last,
            log_every, clip_norm, output_dir, resume, stop_after_steps (see `options.add_training_options`).
        metric: (name, "max" or "min"), the key of `evaluate`'s result that picks `best/`.
        max_steps: the optimizer steps to train (see `total_steps`).
    Returns:
        True when training reached `max_steps` or its time budget, False when `stop_after_steps`
        cut it short.

    A terminal stop (Ctrl-Z, `kill -TSTP`) does not count towards `max_train_minutes`: see
    `stops_off_the_clock`.
    """
    output_dir = Path(args.output_dir)
    progress = Progress()
    checkpointed = [progress]  # saved with the Accelerate state
    average = None
    if args.average_last:
        if accelerator.distributed_type == DistributedType.FSDP:
            raise ValueError("--average_last keeps full copies of the weights: it does not work with FSDP sharding")
        average = WeightAverage(model, args.average_last)
        checkpointed.append(average)
    accelerator.register_for_checkpointing(*checkpointed)
    if args.resume:
        state_dir = run_folder.load_state(accelerator, output_dir, custom_objects=len(checkpointed))
        accelerator.print(f"resumed from {state_dir} at step {progress.step} (epoch {progress.epoch})")
        if progress.best is not None and run_folder.best_is_lost(accelerator, output_dir):
            progress.best = None  # the next evaluation writes best/ again
    log = JsonLog(accelerator, output_dir / "log.jsonl", progress.step)
    metric_name, mode = metric
    accumulation = accelerator.gradient_accumulation_steps
    budget_seconds = math.inf if args.max_train_minutes is None else 60 * args.max_train_minutes
    eval_interval_seconds = None if args.eval_every_minutes is None else 60 * args.eval_every_minutes
    bar = tqdm(total=max_steps, initial=progress.step, disable=not accelerator.is_main_process, desc="train")

    def checkpoint():
        save_model(accelerator, model, tokenizer, output_dir / "last", asdict(progress))
        save_state(accelerator, output_dir / "state")

    def evaluate_and_keep_best(**about):
        """Evaluate the model as it is; `about` (e.g. averaged=N) goes into the log and best/'s metadata."""
        model.eval()
        with torch.no_grad():
            metrics = evaluate(model)
        model.train()
        log(
            {
                "step": progress.step,
                "seconds": round(progress.train_seconds, 2),
                "train_tokens": progress.train_tokens,
                **about,
                **metrics,
            }
        )
        if accelerator.is_main_process:
            bar.write(f"step {progress.step}{' ' + describe(about) if about else ''}: {describe(metrics)}")
        value = metrics[metric_name]
        if progress.best is None or (value > progress.best if mode == "max" else value < progress.best):
            progress.best = value
            save_model(accelerator, model, tokenizer, output_dir / "best", {**asdict(progress), **about, **metrics})

    def finished():
        return progress.step >= max_steps or progress.train_seconds >= budget_seconds

    model.train()
    prepare_kernels(accelerator, model)
    clock = TrainingClock()
    with stops_off_the_clock(clock):
        while not finished():
            sampler.set_epoch(progress.epoch)
            loader = accelerator.skip_first_batches(train_loader, progress.batches_in_epoch)
            for group in micro_batch_groups(loader, accumulation):
                loss, step_tokens, step_seconds = train_step(
                    accelerator, model, optimizer, scheduler, group, loss_fn, clip_norm=args.clip_norm, clock=clock
                )
                progress.step += 1
                progress.batches_in_epoch += len(group)
                progress.train_tokens += step_tokens
                seconds_before = progress.train_seconds
                progress.train_seconds += step_seconds
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.3f}", epoch=progress.epoch)
                if progress.step % args.log_every == 0:
                    log(
                        {
                            "step": progress.step,
                            "epoch": progress.epoch,
                            "loss": loss,
                            "ppl": math.exp(min(loss, 50)),
                            "lr": scheduler.get_last_lr()[0],
                            "tokens": step_tokens,
                            "train_tokens": progress.train_tokens,
                            "seconds": round(progress.train_seconds, 2),
                        }
                    )
                done = finished()
                if args.stop_after_steps is not None and progress.step >= args.stop_after_steps and not done:
                    bar.close()
                    accelerator.print(f"stopping after step {progress.step} without saving (--stop_after_steps)")
                    return False
                if eval_interval_seconds is None:
                    eval_due = progress.step % args.eval_every == 0
                else:
                    eval_due = crossed_multiple(seconds_before, progress.train_seconds, eval_interval_seconds)
                with clock.paused():
                    if done or eval_due:
                        evaluate_and_keep_best()
                        if average is not None:
                            average.add()
                    if done and average is not None and len(average.snapshots) > 1:
                        with average.swapped_in():
                            evaluate_and_keep_best(averaged=len(average.snapshots))
                    if done or progress.step % args.save_every == 0:
                        checkpoint()
                if done:
                    break
            else:
                progress.epoch += 1
                progress.batches_in_epoch = 0
    bar.close()
    return True


def make_train_loader(accelerator, examples, lengths, collate, args):
    """A `DataLoader` of token-count batches (and its sampler) whose epochs are whole optimizer steps.

    The loader gets its own `torch.Generator`: making an iterator then draws no number from the
    global RNG, whose state the checkpoint restores, so a resumed run draws what the first one drew.
    """
    sampler = TokenBatchSampler(
        lengths,
        args.max_tokens,
        seed=args.seed,
        multiple_of=accelerator.num_processes * args.gradient_accumulation_steps,
    )
    loader = torch.utils.data.DataLoader(
        examples, batch_sampler=sampler, collate_fn=collate, generator=torch.Generator()
    )
    return loader, sampler


def train(accelerator, model, train_loader, sampler, loss_fn, evaluate, tokenizer, args, metric):
    """Build the optimizer and schedule, `prepare` everything and `fit` (see there for the arguments).

    `model` and `train_loader` are the plain ones; returns `fit`'s result.
    """
    accelerator.print(f"{args.model_type}: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters")
    steps_per_epoch = len(sampler) // (accelerator.num_processes * args.gradient_accumulation_steps)
    max_steps = total_steps(args, steps_per_epoch)
    optimizer, scheduler = make_optimizer(model, args, max_steps)
    model, optimizer, scheduler, train_loader = accelerator.prepare(model, optimizer, scheduler, train_loader)
    return fit(
        accelerator, model, optimizer, scheduler, train_loader, sampler, loss_fn, evaluate, tokenizer, args, metric,
        max_steps=max_steps,
    )


def load_best(accelerator, args, auto_class):
    """(folder, tokenizer, model) of `output_dir/best`, reloaded through `auto_class` for evaluation."""
    best = existing_dir(Path(args.output_dir) / "best")
    return best, AutoTokenizer.from_pretrained(best), auto_class.from_pretrained(best).to(accelerator.device).eval()


def report_test(accelerator, args, best, metrics):
    """Print the test metrics of checkpoint `best` and write them to `output_dir/test_results.json`.

    `metrics` are an `evaluate` result; the file names them test_loss, test_ppl (and test_bleu).
    """
    named = {"test_" + name.removeprefix("valid_"): value for name, value in metrics.items()}
    accelerator.print(f"test ({args.test_split}) with {best}: {describe(named)}")
    if accelerator.is_main_process:
        record = {"split": args.test_split, "checkpoint": str(best), **named}
        write_json(Path(args.output_dir) / "test_results.json", record)


def hub_folder(output_dir):
    """`output_dir/hub`: a copy of best/ that loads anywhere, ours with `trust_remote_code=True`.

    For our model types the modeling code is copied in (`talk_hf.export_for_remote_code`), so the
    uploaded checkpoint does not need `talk_hf` installed; transformers' own models need nothing.
    """
    folder = Path(output_dir) / "hub"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(Path(output_dir) / "best", folder)
    if AutoConfig.from_pretrained(folder).model_type in OUR_MODEL_TYPES:
        talk_hf.export_for_remote_code(folder)
    return folder


def upload(accelerator, args):
    """`--push_to_hub`: best/ (with its tokenizer and, for our models, their code) to `--hub_model_id`."""
    if args.push_to_hub and accelerator.is_main_process:
        huggingface_hub.create_repo(args.hub_model_id, exist_ok=True)
        huggingface_hub.upload_folder(repo_id=args.hub_model_id, folder_path=hub_folder(args.output_dir))
