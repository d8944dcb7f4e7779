"""The optimizer steps of a run: whether the training data fills one, how many to train, and the
optimizer and learning-rate schedule that take them.

A step consumes `--gradient_accumulation_steps` micro-batches of at most `--max_tokens` padded tokens
on each process (`batching.TokenBatchSampler`).
"""

import math
import os
from contextlib import contextmanager

import torch
from transformers import get_scheduler

from .batching import TokenBatchSampler
from .messages import fail, warn


def check_batches(args, lengths) -> None:
    """Stop (`messages.fail`) when training examples of token counts `lengths` cannot fill one
    optimizer step of `args` (an example longer than `--max_tokens`, or fewer batches than processes
    x `--gradient_accumulation_steps`). The scripts call it before `loop.training_run` writes anything.

    The process count is the `WORLD_SIZE` that `accelerate launch` (or torchrun) gives each process:
    the run's Accelerator does not exist yet, and making Accelerate's `PartialState` this early broke
    two-process runs (their processes then failed to share the output folder's lock)."""
    processes = int(os.environ.get("WORLD_SIZE", "1"))
    micro_batches_per_step = processes * args.gradient_accumulation_steps
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


def total_steps(args, *, steps_per_epoch: int) -> int:
    """The optimizer steps to train: `--max_steps`, or `--epochs` worth of them."""
    return args.max_steps if args.max_steps is not None else max(1, math.ceil(args.epochs * steps_per_epoch))


def warn_of_a_cut_decay(args, max_steps: int):
    """Warn when the schedule decays over `max_steps` (--epochs worth, --max_steps not given) while
    --max_train_minutes may stop training sooner: --schedule cosine would stop partway down its
    curve. (Not refused: how many steps the minutes allow is known only once the run has trained.)"""
    if args.schedule == "cosine" and args.max_train_minutes is not None and args.max_steps is None:
        warn(
            f"--schedule cosine decays the learning rate over {max_steps} steps (--epochs {args.epochs}, "
            f"as --max_steps is not given), but --max_train_minutes {args.max_train_minutes} stops training "
            "once its time is spent, maybe long before: the learning rate then never decays. To decay within "
            "the budget, give --max_steps with the steps that many minutes train (log.jsonl of a trial run)"
        )


def make_optimizer(model, args, *, max_steps: int):
    """AdamW (betas 0.9/0.98 as in the papers) and the warmup schedule, decaying over `max_steps`."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=args.weight_decay)
    scheduler = get_scheduler(
        args.schedule, optimizer, num_warmup_steps=args.warmup_steps, num_training_steps=max_steps
    )
    return optimizer, scheduler
