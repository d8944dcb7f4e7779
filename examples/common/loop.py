"""The Accelerate training loop of the translation and language-modeling scripts.

    with loop.training_run(args) as accelerator:  # the run's Accelerator, in its locked output folder
        ...                                       # the script's tokenizer, data, model, loss and evaluation
        loop.train(accelerator, args, model=model, ...)  # loader, optimizer and schedule, then `fit`

`fit` trains until `max_steps` optimizer steps or the training-time budget, evaluating, keeping
the best model and saving along the way; `train_step` is one optimizer step. A step consumes
`accumulation` micro-batches on each of the `num_processes` processes. Its loss is the sum over all
target tokens of that global batch divided by their count, whatever the split into processes and
micro-batches: one process with accumulation 2 and two processes without accumulation compute the
same loss and gradients.

What the loop leans on: `run_folder` (the output folder: lock, fresh start or resume, its files),
`checkpoints` (`Progress`, saving and resuming), `records` (log.jsonl, environment.json),
`clock` and `signals` (training time, terminal stops), `averaging` (`--average_last`).
"""

import math
import os
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from accelerate import Accelerator, PartialState
from accelerate.utils import GradientAccumulationPlugin, set_seed
from transformers import get_scheduler

import talk_hf

from . import checkpoints, run_folder, run_outputs
from .averaging import weight_average
from .batching import TokenBatchSampler, make_train_loader
from .checkpoints import Progress
from .clock import SlowdownDetector, TrainingClock, crossed_multiple
from .folder_saves import full_disk_is_an_error
from .models import is_ours
from .options import fail
from .records import TrainingLog, write_environment
from .signals import stops_off_the_clock
from .threads import set_threads

# A test hook, not an option: set to a step number N, it makes the loop stop the run right after step
# N without saving (SystemExit, exit status 0), as a crash would; the exact-resume tests resume it.
STOP_AFTER_STEPS = "TALK_HF_TEST_STOP_AFTER_STEPS"


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
        log_with="tensorboard" if run_outputs.tensorboard_installed() else None,
        project_dir=args.output_dir,
    )
    set_threads(accelerator, args.threads)  # --threads, else the cores other processes leave free
    lock = run_folder.open_run(accelerator, args)
    try:
        with full_disk_is_an_error(args.output_dir):  # a log line or a JSON file that finds the disk full
            set_seed(args.seed)
            hparams = {k: v for k, v in vars(args).items() if isinstance(v, (int, float, str, bool))}
            accelerator.init_trackers("train", config=hparams)
            if accelerator.is_main_process:
                write_environment(args.output_dir, accelerator.num_processes, accelerator.device)
            yield accelerator
            accelerator.end_training()
    finally:
        if lock is not None:
            lock.release()


@dataclass(frozen=True)
class Settings:
    """What `fit` takes from the command line (`options.add_training_options`), read once."""

    output_dir: Path
    resume: bool  # continue from the saved state in output_dir
    max_steps: int  # the optimizer steps to train (`total_steps`)
    budget_seconds: float  # and at most this much training time (math.inf: no limit)
    eval_every: int  # steps between evaluations,
    eval_every_seconds: float | None  # or seconds of training time between them, when given
    save_every: int  # steps between saves of last/ and state/
    log_every: int  # steps between step records in log.jsonl
    clip_norm: float  # the gradients' largest norm (0: no clipping)
    average_last: int  # evaluate the mean weights of the last N evaluations at the end (0: off)
    metric: str  # the key of the evaluation's result that picks best/
    maximize: bool  # whether a higher `metric` is better
    stop_after_steps: int | None  # the test hook `STOP_AFTER_STEPS`

    @classmethod
    def from_args(cls, args, *, max_steps, metric, maximize):
        return cls(
            output_dir=Path(args.output_dir),
            resume=args.resume,
            max_steps=max_steps,
            budget_seconds=math.inf if args.max_train_minutes is None else 60 * args.max_train_minutes,
            eval_every=args.eval_every,
            eval_every_seconds=None if args.eval_every_minutes is None else 60 * args.eval_every_minutes,
            save_every=args.save_every,
            log_every=args.log_every,
            clip_norm=args.clip_norm,
            average_last=args.average_last,
            metric=metric,
            maximize=maximize,
            stop_after_steps=stop_after_steps_hook(),
        )

    def finished(self, progress):
        """Whether training is done: `max_steps` steps, or the time budget spent."""
        return progress.step >= self.max_steps or progress.train_seconds >= self.budget_seconds

    def evaluation_due(self, progress, seconds_before):
        """Whether the step that brought training time from `seconds_before` to `progress`'s ends
        with an evaluation: every `eval_every` steps, or each time training time passes a multiple
        of `eval_every_seconds` when that is given."""
        if self.eval_every_seconds is None:
            return progress.step % self.eval_every == 0
        return crossed_multiple(seconds_before, progress.train_seconds, self.eval_every_seconds)


def stop_after_steps_hook():
    """The step number of the test hook `STOP_AFTER_STEPS`, None where it is not set."""
    value = os.environ.get(STOP_AFTER_STEPS)
    if value is None:
        return None
    if not value.isdigit() or int(value) < 1:
        fail(f"{STOP_AFTER_STEPS} (a test hook) must be a step number >= 1, not {value!r}")
    return int(value)


def train(accelerator, args, *, model, examples, lengths, collate, loss_fn, evaluate, tokenizer, metric, maximize):
    """Batch `examples`, build the optimizer and schedule of `args`, `prepare` everything and `fit`.

    Args:
        model: the plain model (not prepared yet).
        examples, lengths, collate: the training examples, their token counts and the function that
            makes a batch of a list of them (`batching.make_train_loader`).
        metric: the key of `evaluate`'s result that picks best/, higher being better when `maximize`.
        loss_fn, evaluate, tokenizer: see `fit`.
    """
    accelerator.print(f"{args.model_type}: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters")
    micro_batches_per_step = accelerator.num_processes * args.gradient_accumulation_steps
    with batches_that_fit(args):
        train_loader, sampler = make_train_loader(
            examples, lengths, collate, max_tokens=args.max_tokens, seed=args.seed, multiple_of=micro_batches_per_step
        )
    steps_per_epoch = len(sampler) // micro_batches_per_step
    max_steps = total_steps(args, steps_per_epoch)
    settings = Settings.from_args(args, max_steps=max_steps, metric=metric, maximize=maximize)
    optimizer, scheduler = make_optimizer(model, args, max_steps)
    model, optimizer, scheduler, train_loader = accelerator.prepare(model, optimizer, scheduler, train_loader)
    fit(
        accelerator=accelerator,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        train_loader=train_loader,
        sampler=sampler,
        loss_fn=loss_fn,
        evaluate=evaluate,
        tokenizer=tokenizer,
        settings=settings,
    )


def check_batches(args, lengths) -> None:
    """Stop (`options.fail`) when training examples of token counts `lengths` cannot fill one
    optimizer step of `args` (an example longer than `--max_tokens`, or fewer batches than processes
    x `--gradient_accumulation_steps`). The scripts call it before `training_run` writes anything."""
    micro_batches_per_step = PartialState().num_processes * args.gradient_accumulation_steps
    with batches_that_fit(args):
        TokenBatchSampler(lengths, args.max_tokens, multiple_of=micro_batches_per_step)


@contextmanager
def batches_that_fit(args):
    """`TokenBatchSampler`'s refusal of the training examples as a script error naming the flags."""
    try:
        yield
    except ValueError as error:
        fail(
            f"the training data cannot fill an optimizer step of --max_tokens {args.max_tokens} and "
            f"--gradient_accumulation_steps {args.gradient_accumulation_steps}: {error}"
        )


def total_steps(args, steps_per_epoch: int) -> int:
    """The optimizer steps to train: `--max_steps`, or `--epochs` worth of them."""
    return args.max_steps if args.max_steps is not None else max(1, math.ceil(args.epochs * steps_per_epoch))


def make_optimizer(model, args, max_steps: int):
    """AdamW (betas 0.9/0.98 as in the papers) and the warmup schedule, decaying over `max_steps`."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=args.weight_decay)
    scheduler = get_scheduler(
        args.schedule, optimizer, num_warmup_steps=args.warmup_steps, num_training_steps=max_steps
    )
    return optimizer, scheduler


def fit(*, accelerator, model, optimizer, scheduler, train_loader, sampler, loss_fn, evaluate, tokenizer, settings):
    """Train until `settings.finished`: evaluate when `settings.evaluation_due` and at the end, keep
    the best model in best/, save last/ and state/ every `save_every` steps and at the end.

    With `average_last` N, the mean of the weights of the last N evaluations is evaluated at the end
    too (its log record says `averaged`: how many), and becomes best/ if it scores better. A
    terminal stop (Ctrl-Z, `kill -TSTP`) costs no training time: see `signals.stops_off_the_clock`.

    Args:
        model, optimizer, scheduler, train_loader: already passed through `accelerator.prepare`
            (the accelerator of `training_run`).
        sampler: the `TokenBatchSampler` behind `train_loader`, for `set_epoch`.
        loss_fn: (model, batch) -> (loss_sum, token_count) over the batch's target tokens.
        evaluate: (model) -> {name: float}, run on every process (evaluation is distributed).
        tokenizer: saved beside every model checkpoint.
        settings: the run's `Settings`.
    """
    progress = Progress(processes=accelerator.num_processes)  # a resume loads the saved one's
    average = weight_average(accelerator, model, settings.average_last)  # saved with the training state
    if settings.resume:
        checkpoints.resume(accelerator, settings.output_dir, progress, average)
    log = TrainingLog(
        accelerator,
        settings.output_dir / "log.jsonl",
        progress=progress,
        max_steps=settings.max_steps,
        budget_seconds=settings.budget_seconds,
        log_every=settings.log_every,
    )
    slowdown = SlowdownDetector()
    saver = checkpoints.Saver(accelerator, model, tokenizer, settings.output_dir, average)
    steps = micro_batches_of_each_step(accelerator, train_loader, sampler, progress)
    model.train()
    prepare_kernels(accelerator, model)
    clock = TrainingClock()  # started after the kernels are built: a first build is not training time
    with log, stops_off_the_clock(clock):
        done = settings.finished(progress)
        if done and progress.best is None:  # resumed with nothing to train, and best/ lost: evaluate to write it
            evaluate_and_keep_best(model, evaluate, progress=progress, log=log, saver=saver, settings=settings)
        while not done:
            group = next(steps)
            loss, tokens, seconds = train_step(
                accelerator, model, optimizer, scheduler, group, loss_fn, clip_norm=settings.clip_norm, clock=clock
            )
            seconds_before = progress.train_seconds
            progress.advance(batches=len(group), tokens=tokens, seconds=seconds)
            log.step(progress, loss=loss, lr=scheduler.get_last_lr()[0], tokens=tokens)
            warning = slowdown.add(seconds)
            if warning is not None:
                log.warn(f"step {progress.step}: {warning}")
            done = settings.finished(progress)
            if not done and settings.stop_after_steps is not None and progress.step >= settings.stop_after_steps:
                accelerator.print(f"stopping after step {progress.step} without saving ({STOP_AFTER_STEPS})")
                raise SystemExit(0)
            with clock.paused():  # evaluating and saving is not training time
                if done or settings.evaluation_due(progress, seconds_before):
                    evaluate_and_keep_best(model, evaluate, progress=progress, log=log, saver=saver, settings=settings)
                    if average is not None:
                        average.add()
                if done and average is not None and len(average.snapshots) > 1:
                    with average.swapped_in():
                        about = {"averaged": len(average.snapshots)}
                        evaluate_and_keep_best(
                            model, evaluate, progress=progress, log=log, saver=saver, settings=settings, about=about
                        )
                if done or progress.step % settings.save_every == 0:
                    saver.save_latest(progress)


def micro_batches_of_each_step(accelerator, train_loader, sampler, progress):
    """The micro-batches of this process for each optimizer step, from where `progress` stands on,
    epoch after epoch without end.

    An epoch is a pure function of the sampler's seed and epoch: a resumed one skips the micro-batches
    `progress` says were done. `progress` moves to the next epoch when one is used up.
    """
    while True:
        sampler.set_epoch(progress.epoch)
        batches = accelerator.skip_first_batches(train_loader, progress.batches_in_epoch)
        yield from micro_batch_groups(batches, accelerator.gradient_accumulation_steps)
        progress.next_epoch()


def micro_batch_groups(batches, size):
    """Lists of `size` consecutive batches (the sampler makes the count a multiple of `size`)."""
    group = []
    for batch in batches:
        group.append(batch)
        if len(group) == size:
            yield group
            group = []


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


def evaluate_and_keep_best(model, evaluate, *, progress, log, saver, settings, about=None):
    """Evaluate the model as it is and log the result; save it as best/ when it beats the best so far.

    `about` (e.g. {"averaged": 3}: what was evaluated) goes into the log record and best/'s metadata.
    """
    about = about or {}
    model.eval()
    with torch.no_grad():
        metrics = evaluate(model)
    model.train()
    log.evaluation(progress, metrics, about)
    value, best = metrics[settings.metric], progress.best
    if best is None or (value > best if settings.maximize else value < best):
        progress.best = value
        saver.save_best({**asdict(progress), **about, **metrics})


def prepare_kernels(accelerator, model):
    """Build and load our compiled kernels for this process's device before the training clock
    starts: a first-use compile (a minute or more) is not training time.  Baselines need none."""
    if is_ours(accelerator.unwrap_model(model).config):
        talk_hf.ops.prepare_backend(accelerator.device)
