"""The Accelerate training run of the translation and language-modeling scripts.

    with loop.training_run(args) as accelerator:  # the run's Accelerator, in its locked output folder
        ...                                       # the script's tokenizer, data, model, loss and evaluation
        loop.train(accelerator, args, model=model, ...)  # loader, optimizer and schedule, then `fit`

`training_run` makes the Accelerator and the records every run starts with; the folder itself (the
lock, a fresh start or a resume, its files) is `run_folder`'s. `fit` trains until `max_steps` optimizer steps or the training-time budget, evaluating, keeping
the best model and saving along the way; `train_step` is one optimizer step. A step consumes
`accumulation` micro-batches on each of the `num_processes` processes. Its loss is the sum over all
target tokens of that global batch divided by their count, whatever the split into processes and
micro-batches: one process with accumulation 2 and two processes without accumulation compute the
same loss and gradients. The order a step goes through the other modules: examples/common/__init__.py.
"""

import os
import sys
from contextlib import contextmanager
from dataclasses import asdict
from functools import partial

import torch
from accelerate import Accelerator
from accelerate.utils import GradientAccumulationPlugin, set_seed

import talk_hf

from . import checkpoints, option_checks, run_folder, run_outputs
from .averaging import weight_average
from .batching import make_train_loader
from .checkpoints import Progress
from .folder_saves import full_disk_is_an_error
from .messages import fail
from .models import is_ours
from .optimizer_steps import batches_that_fit, make_optimizer, total_steps, warn_of_a_cut_decay
from .pacing import STOP_AFTER_STEPS, Settings, SlowdownDetector, TrainingClock
from .records import TrainingLog, write_environment
from .signals import stops_off_the_clock
from .threads import set_threads


@contextmanager
def training_run(args, *, train_data):
    """The `Accelerator` of a run of `args`, in its output folder (a `with` block).

    The folder is locked for this run and checked for a fresh start or a resume first
    (`run_folder.open_run`: a resume must match the settings, the mixed precision that runs and the
    training split's text `train_data`, {column: [str, ...]}, of the first start), before anything
    is written; the lock goes when the block ends. fp16 on a CPU is refused.
    TensorBoard tracks the run when it is installed. Gradients are synchronised every
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
    option_checks.check_precision(accelerator, args)  # fp16 on a CPU
    set_threads(accelerator, args.threads)  # --threads, else the cores other processes leave free
    lock = run_folder.open_run(accelerator, args, train_data)
    try:
        with full_disk_is_an_error(args.output_dir):  # a log line or a JSON file that finds the disk full
            set_seed(args.seed)
            hparams = {k: v for k, v in vars(args).items() if isinstance(v, (int, float, str, bool))}
            accelerator.init_trackers("train", config=hparams)
            if accelerator.is_main_process:
                precision = accelerator.mixed_precision
                write_environment(
                    args.output_dir, accelerator.num_processes, accelerator.device, mixed_precision=precision
                )
            yield accelerator
            accelerator.end_training()
    finally:
        if lock is not None:
            lock.release()


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
    max_steps = total_steps(args, steps_per_epoch=len(sampler) // micro_batches_per_step)
    accelerator.on_main_process(warn_of_a_cut_decay)(args, max_steps)  # cosine over epochs, in a time budget
    optimizer, scheduler = make_optimizer(model, args, max_steps=max_steps)
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
        settings=Settings.from_args(args, max_steps=max_steps, metric=metric, maximize=maximize),
    )


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
        settings: the run's `pacing.Settings`.
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
        smoothed=settings.smoothed,
    )
    saver = checkpoints.Saver(accelerator, model, tokenizer, settings.output_dir, average)
    keep_best = partial(
        evaluate_and_keep_best,
        model=model,
        evaluate=evaluate,
        progress=progress,
        log=log,
        saver=saver,
        settings=settings,
    )
    slowdown = SlowdownDetector()
    steps = micro_batches_of_each_step(accelerator, train_loader=train_loader, sampler=sampler, progress=progress)
    model.train()
    prepare_kernels(accelerator, model)
    clock = TrainingClock()  # started after the kernels are built: a first build is not training time
    with log, stops_off_the_clock(clock):
        done = settings.finished(progress)
        if done and progress.best is None:  # resumed with nothing to train, and best/ lost: evaluate to write it
            keep_best()
        while not done:
            group = next(steps)
            loss, tokens, seconds = train_step(
                accelerator=accelerator,
                model=model,
                optimizer=optimizer,
                scheduler=scheduler,
                group=group,
                loss_fn=loss_fn,
                clip_norm=settings.clip_norm,
                clock=clock,
            )
            seconds_before = progress.train_seconds
            progress.advance(batches=len(group), tokens=tokens, seconds=seconds)
            log.step(progress, loss=loss, lr=scheduler.get_last_lr()[0], tokens=tokens)
            warning = slowdown.add(seconds)
            if warning is not None:
                log.warn(f"step {progress.step}: {warning}")
            done = settings.finished(progress)
            if not done and settings.stop_for_test(progress):
                accelerator.print(f"stopping after step {progress.step} without saving ({STOP_AFTER_STEPS})")
                # Every process stops here, then ends as a killed run ends, with no interpreter teardown:
                # tearing down a gloo process group can hang (torch destroys DDP's reducer holding the GIL
                # while gloo's thread needs it to free a finished all-gather) or abort ("terminate called").
                accelerator.wait_for_everyone()
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(0)
            with clock.paused():  # evaluating and saving is not training time
                if done or settings.evaluation_due(progress, seconds_before):
                    keep_best()
                    if average is not None:
                        average.add()
                if done and average is not None and len(average.snapshots) > 1:
                    with average.swapped_in():
                        keep_best(about={"averaged": len(average.snapshots)})
                if done or settings.save_due(progress):
                    saver.save_latest(progress)


def micro_batches_of_each_step(accelerator, *, train_loader, sampler, progress):
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


def train_step(*, accelerator, model, optimizer, scheduler, group, loss_fn, clip_norm, clock):
    """One optimizer step over a group of micro-batches (gradient accumulation), on every process.

    Args:
        group: the micro-batches of this process for the step (`micro_batch_groups`).
        loss_fn: (model, batch) -> (summed loss, token count) over the batch's target tokens.
        clip_norm: the gradients' largest norm (0: no clipping).
        clock: the `TrainingClock`, lapped when the step's updates are done.
    Returns:
        (mean loss per target token, target tokens, seconds), all three over every process: the
        step's seconds are the slowest process's, so that all agree on when the time budget ends.

    A step without a target token (every label -100) stops the run with an error, before any update:
    its loss per token would be 0 / 0 (NaN weights). The scripts give every example at least one
    target token (a target's end token, a block's or document's next tokens), so such a step means
    labels broken upstream; skipping it would hide that and drop the step's examples without a word. The count is summed over every process, so all
    stop together.
    """
    accumulation = accelerator.gradient_accumulation_steps
    tokens = accelerator.reduce(sum(b["labels"].ne(-100).sum() for b in group), "sum")
    if tokens == 0:
        fail(
            f"an optimizer step's {len(group)} micro-batch(es) on each of {accelerator.num_processes} process(es) "
            "hold no target token (every label is -100), so there is no loss per token to train on: every "
            "training example needs at least one target token; check the data and the collator's labels"
        )
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


def evaluate_and_keep_best(*, model, evaluate, progress, log, saver, settings, about=None):
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
