"""The checks of the command-line options that every Accelerate script shares (`options`): ranges,
flags that go together, paths that exist and sizes that make a valid model, all before any work.
Each failure stops the script with an error naming the flag (`messages.fail`)."""

import argparse
import math
import os
from pathlib import Path

from . import hub
from .messages import fail
from .models import build_config, presets_of
from .options import model_sizes
from .tokenizer import SPECIAL_TOKENS

# The flags that shape the tokenizer a run trains: an existing one (--tokenizer) takes none of them.
TOKENIZER_TRAINING_FLAGS = ("tokenizer_kind", "vocab_size", "min_frequency")
_NOT_GIVEN = object()  # what `parse_args` finds for a flag the command line does not give


def parse_args(parser, argv=None):
    """The command line `argv` (None: `sys.argv`) parsed by `parser`, and checked (`check_args`),
    flags that the others would leave without effect included (`check_given_flags`)."""
    watched = (*TOKENIZER_TRAINING_FLAGS, "eval_every")
    # argparse sets a default only where the namespace lacks the attribute: a flag still at
    # _NOT_GIVEN after parsing was not on the command line, and then takes its default.
    args = parser.parse_args(argv, argparse.Namespace(**dict.fromkeys(watched, _NOT_GIVEN)))
    given = {name for name in watched if getattr(args, name) is not _NOT_GIVEN}
    for name in set(watched) - given:
        setattr(args, name, parser.get_default(name))
    check_given_flags(args, given)
    return check_args(args)


def check_given_flags(args, given):
    """Refuse flags on the command line (the names in `given`) that others there would leave without
    effect: a tokenizer-training flag with --tokenizer on a fresh start (a resume compares them with
    the run's args.json, whatever they did then), and --eval_every with --eval_every_minutes."""
    if args.tokenizer is not None and not args.resume:
        ignored = [f"--{name} {getattr(args, name)}" for name in TOKENIZER_TRAINING_FLAGS if name in given]
        if ignored:
            fail(
                f"{', '.join(ignored)} shape(s) the tokenizer a run trains, but --tokenizer {args.tokenizer} "
                "gives an existing one, which they would not change: give --tokenizer or the training flags"
            )
    if "eval_every" in given and args.eval_every_minutes is not None:
        fail(
            f"--eval_every {args.eval_every} and --eval_every_minutes {args.eval_every_minutes} both pace the "
            "evaluations, and --eval_every_minutes would win: give one of them"
        )


def check_args(args):
    """Raise a clear `SystemExit` for flags that are out of range, do not fit together or name paths
    that do not exist: all before any work. (What the output folder holds is checked once it is
    locked: `run_folder.open_run`.)"""
    if args.data_dir is not None and not Path(args.data_dir).is_dir():
        fail(f"--data_dir {args.data_dir} is not a folder")
    if args.tokenizer is not None and args.tokenizer.startswith((".", "/")) and not os.path.isdir(args.tokenizer):
        fail(f"--tokenizer {args.tokenizer} is not a folder")
    check_start_flags(args)
    check_output_dir(args)
    check_at_least(args, 1, "max_tokens", "gradient_accumulation_steps", "eval_every", "save_every", "log_every")
    check_at_least(args, 1, "eval_batch_size", "max_steps", "max_train_samples", "max_eval_samples", "threads")
    check_at_least(args, 1, "min_frequency", "d_model", "ffn_dim", "encoder_layers", "decoder_layers", "heads")
    check_at_least(args, 0, "warmup_steps")
    if args.vocab_size <= len(SPECIAL_TOKENS):
        fail(
            f"--vocab_size must be at least {len(SPECIAL_TOKENS) + 1}, not {args.vocab_size}: "
            f"{len(SPECIAL_TOKENS)} ids go to the special tokens {', '.join(SPECIAL_TOKENS.values())}"
        )
    if args.average_last == 1 or args.average_last < 0:
        fail("--average_last must be 0 (off) or >= 2")
    if not 0 <= args.seed < 2**32:
        fail(f"--seed must be in [0, 2**32) (the range numpy accepts), not {args.seed}")
    check_numbers(args)
    check_model_flags(args)
    hub.check_upload(args)  # last: it asks the Hub
    return args


def check_start_flags(args):
    """--resume, --overwrite_output_dir and --allow_changed_args: which go together."""
    if args.resume and args.overwrite_output_dir:
        fail("--resume continues the run in --output_dir, --overwrite_output_dir deletes it: give one of them")
    if args.allow_changed_args and not args.resume:
        fail("--allow_changed_args applies to --resume only: a new run takes the settings it is given")


def check_output_dir(args):
    """--output_dir: a folder or a path where one can be made (not a file, nor under one), apart from
    --data_dir (the run's files would be read as data, and the data taken for a user's files)."""
    output = Path(args.output_dir)
    blocker = next((p for p in (output, *output.parents) if os.path.lexists(p) and not p.is_dir()), None)
    if blocker is not None:
        where = "is" if blocker == output else f"lies under {blocker}, which is"
        fail(f"--output_dir {output} {where} a file, not a folder: give the path of a folder (new or existing)")
    if args.data_dir is not None:
        data, run = Path(args.data_dir).resolve(), output.resolve()
        if data == run or data in run.parents or run in data.parents:
            fail(
                f"--output_dir {args.output_dir} and --data_dir {args.data_dir} overlap: the run's files would "
                "be read as data. Give an --output_dir outside --data_dir (and not holding it)"
            )


def check_at_least(args, minimum, *names):
    """Fail for the first of the integer options `names` below `minimum` (None: not given, fine)."""
    for name in names:
        value = getattr(args, name, None)
        if value is not None and value < minimum:
            fail(f"--{name} must be >= {minimum}, not {value}")


def check_numbers(args):
    """The float options: finite, and in their ranges (None: not given, fine)."""
    for name in ("lr", "epochs", "max_train_minutes", "eval_every_minutes"):
        value = getattr(args, name)
        if value is not None and not (math.isfinite(value) and value > 0):
            fail(f"--{name} must be a number > 0, not {value}")
    for name in ("weight_decay", "clip_norm"):
        value = getattr(args, name)
        if not (math.isfinite(value) and value >= 0):
            fail(f"--{name} must be a number >= 0, not {value}")
    for name in ("label_smoothing", "dropout"):
        value = getattr(args, name)
        if value is not None and not 0 <= value < 1:
            fail(f"--{name} must be in [0, 1), not {value}")


class _TokenIdsOnly:
    """What `build_config` reads of a tokenizer, to check the model flags before there is one."""

    pad_token_id, bos_token_id, eos_token_id = 0, 1, 2

    def __len__(self):
        return 64


def check_model_flags(args):
    """Fail when the model flags make no valid configuration (e.g. --d_model not a multiple of
    --heads, or a flag the model type does not have), with the configuration's own rules."""
    encoder_decoder = hasattr(args, "encoder_layers")  # add_model_options adds it for encoder-decoders only
    presets = presets_of(args.model_type, encoder_decoder)
    if args.preset not in presets:
        fail(
            f"--preset {args.preset} is not a preset of --model_type {args.model_type}: give one of {', '.join(presets)}"
        )
    try:
        build_config(args.model_type, _TokenIdsOnly(), encoder_decoder, args.preset, **model_sizes(args))
    except ValueError as error:
        fail(f"--model_type {args.model_type} --preset {args.preset} with the given sizes is no valid model: {error}")


def check_precision(accelerator, args):
    """Refuse fp16 mixed precision on a CPU: Accelerate then trains in float32 without a word (no fp16
    autocast there), and the run would be recorded as an fp16 one."""
    if accelerator.mixed_precision != "fp16" or accelerator.device.type != "cpu":
        return
    source = (
        f"--mixed_precision {args.mixed_precision}"
        if args.mixed_precision is not None
        else "--mixed_precision fp16 (not given here: ACCELERATE_MIXED_PRECISION, which `accelerate launch` sets "
        "from `accelerate config`)"
    )
    fail(
        f"{source} on device {accelerator.device}: Accelerate has no fp16 autocast on a CPU and would train in "
        "float32 instead. Give --mixed_precision bf16 (CPU autocast works) or no, or train on a GPU"
    )
