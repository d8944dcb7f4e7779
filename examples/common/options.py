"""Command-line options shared by the Accelerate scripts, and their checks."""

import argparse
import copy
import os
from pathlib import Path


from .models import config_classes, model_types
from .tokenizer import KINDS


def add_data_options(parser, dataset_name, dataset_config=None):
    group = parser.add_argument_group("data")
    group.add_argument(
        "--data_dir", help="local folder: text/gzip/JSON lines files or a `datasets` save_to_disk folder"
    )
    group.add_argument("--dataset_name", default=dataset_name, help="Hub dataset, used when --data_dir is not given")
    group.add_argument("--dataset_config", default=dataset_config, help="Hub dataset configuration")
    group.add_argument("--train_split", default="train")
    group.add_argument("--validation_split", default="validation", help="matched loosely: finds `val`, `valid`")
    group.add_argument("--test_split", default="test", help="evaluated with the best checkpoint at the end ('' skips)")
    group.add_argument("--max_train_samples", type=int, help="use only the first N training records")
    group.add_argument("--max_eval_samples", type=int, help="use only the first N validation/test records")


def add_tokenizer_options(parser, kind, vocab_size, min_frequency):
    group = parser.add_argument_group("tokenizer")
    group.add_argument("--tokenizer", help="existing tokenizer (Hub name or folder) instead of training one")
    group.add_argument("--tokenizer_kind", choices=KINDS, default=kind)
    group.add_argument("--vocab_size", type=int, default=vocab_size)
    group.add_argument(
        "--min_frequency", type=int, default=min_frequency, help="rarer pieces/words are not in the vocabulary"
    )


def add_model_options(parser, encoder_decoder):
    group = parser.add_argument_group("model (sizes default to the preset's)")
    group.add_argument("--model_type", choices=model_types(encoder_decoder), default="talk",
                       help="transformer: the same-size baseline")
    presets = sorted(set().union(*(config.presets for config in config_classes(encoder_decoder))))
    group.add_argument("--preset", default="small", choices=presets,
                       help="a named configuration of our models (XConfig.from_preset)")
    group.add_argument("--d_model", type=int)
    group.add_argument("--ffn_dim", type=int)
    if encoder_decoder:
        group.add_argument("--encoder_layers", type=int)
    group.add_argument("--decoder_layers", type=int)
    group.add_argument("--heads", type=int)
    group.add_argument("--dropout", type=float)


def model_sizes(args):
    """The size flags as keyword arguments of `build_model`."""
    names = ("d_model", "ffn_dim", "encoder_layers", "decoder_layers", "heads", "dropout")
    return {name: getattr(args, name) for name in names if hasattr(args, name)}


def add_training_options(parser, lr, max_tokens, schedule, warmup_steps, label_smoothing, metric):
    group = parser.add_argument_group("training")
    group.add_argument("--output_dir", required=True)
    group.add_argument("--resume", action="store_true", help="continue from output_dir/state (a new run without it)")
    group.add_argument("--max_tokens", type=int, default=max_tokens, help="padded tokens per micro-batch and process")
    group.add_argument("--gradient_accumulation_steps", type=int, default=1)
    group.add_argument("--max_steps", type=int, help="optimizer steps (default: --epochs worth)")
    group.add_argument("--epochs", type=float, default=10)
    group.add_argument(
        "--max_train_minutes",
        type=float,
        help="also stop after this much training time (evaluation and saving excluded): a fixed budget",
    )
    group.add_argument("--lr", type=float, default=lr)
    group.add_argument("--weight_decay", type=float, default=0.0)
    group.add_argument("--schedule", choices=("inverse_sqrt", "cosine"), default=schedule)
    group.add_argument("--warmup_steps", type=int, default=warmup_steps)
    group.add_argument("--clip_norm", type=float, default=1.0, help="0 disables gradient clipping")
    group.add_argument("--label_smoothing", type=float, default=label_smoothing)
    group.add_argument("--mixed_precision", choices=("no", "fp16", "bf16"), help="default: accelerate config")
    group.add_argument("--seed", type=int, default=0)
    group.add_argument("--eval_every", type=int, default=500, help=f"optimizer steps between evaluations ({metric})")
    group.add_argument(
        "--eval_every_minutes",
        type=float,
        help="evaluate after every this much training time instead of every --eval_every steps",
    )
    group.add_argument("--save_every", type=int, default=500, help="optimizer steps between last/ + state/ saves")
    group.add_argument(
        "--average_last",
        type=int,
        default=0,
        help="at the end, also evaluate the mean of the weights of the last N evaluations (checkpoint "
        "averaging) and keep it as best/ if it scores better; 0: off",
    )
    group.add_argument("--log_every", type=int, default=20)
    group.add_argument("--eval_batch_size", type=int, default=64, help="sequences per evaluation batch and process")
    group.add_argument("--stop_after_steps", type=int, help="simulate a crash: stop after N steps without saving")
    group.add_argument("--push_to_hub", action="store_true", help="upload best/ to --hub_model_id at the end")
    group.add_argument("--hub_model_id", help="owner/name on the Hub, for --push_to_hub")


def check_args(args):
    """Raise a clear `SystemExit` for flags that do not fit together or paths that do not exist."""

    def fail(message):
        raise SystemExit(f"error: {message}")

    if args.data_dir is not None and not Path(args.data_dir).is_dir():
        fail(f"--data_dir {args.data_dir} is not a folder")
    if args.tokenizer is not None and args.tokenizer.startswith((".", "/")) and not os.path.isdir(args.tokenizer):
        fail(f"--tokenizer {args.tokenizer} is not a folder")
    if not args.resume and any((Path(args.output_dir) / name).exists() for name in ("state", "state.old")):
        fail(f"--output_dir {args.output_dir} holds a run: add --resume to continue it, or choose another folder")
    if args.push_to_hub and not args.hub_model_id:
        fail("--push_to_hub needs --hub_model_id")
    for name in ("max_tokens", "gradient_accumulation_steps", "eval_every", "save_every", "log_every", "vocab_size"):
        if getattr(args, name) < 1:
            fail(f"--{name} must be >= 1")
    if args.average_last == 1 or args.average_last < 0:
        fail("--average_last must be 0 (off) or >= 2")
    if args.max_steps is not None and args.max_steps < 1:
        fail("--max_steps must be >= 1")
    for name in ("max_train_minutes", "eval_every_minutes"):
        if getattr(args, name) is not None and getattr(args, name) <= 0:
            fail(f"--{name} must be > 0")
    if not 0 <= args.label_smoothing < 1:
        fail("--label_smoothing must be in [0, 1)")
    return args


def parse_args(parser, argv=None):
    return check_args(parser.parse_args(argv))


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Shows every option's default (with or without help text, unless the help already says it)
    and keeps the script docstring's lines as written; choices show in the option's own line."""

    @staticmethod
    def _has_default(action) -> bool:
        return bool(action.option_strings) and not action.required and action.default is not argparse.SUPPRESS

    def add_argument(self, action):
        if not action.help and self._has_default(action):
            action = copy.copy(action)  # argparse prints nothing for an option without help text
            action.help = "(default: %(default)s)"
        super().add_argument(action)

    def _get_help_string(self, action):
        if self._has_default(action) and "(default" not in action.help:
            return action.help + " (default: %(default)s)"
        return action.help


def argument_parser(description):
    return argparse.ArgumentParser(description=description, formatter_class=_HelpFormatter)
