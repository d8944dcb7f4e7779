"""The command-line options that every Accelerate script shares: their groups, their help and what some
of them mean (`model_sizes`, `recipe_dropout`, which may change on resume). Their checks are
`option_checks`'s."""

import argparse
import copy

from .models import model_types, presets_of
from .tokenizer import KINDS, SPECIAL_TOKENS

# The settings a resume may change without --allow_changed_args: when training stops, how often it
# evaluates, saves and logs, the test report and the upload. Everything else shapes the model, the
# data, the tokenizer or the optimization, and must match the run's args.json.
MAY_CHANGE_ON_RESUME = frozenset(
    {
        "output_dir",  # the same folder, however it is spelled
        "max_steps",
        "epochs",
        "max_train_minutes",
        "eval_every",
        "eval_every_minutes",
        "save_every",
        "log_every",
        "eval_batch_size",
        "test_split",
        "test_file",  # summarization's test split as a file
        "prompt",
        "push_to_hub",
        "hub_model_id",
        "threads",
    }
)
# The flags that say how to start, not what to train: never compared with args.json.
START_FLAGS = frozenset({"resume", "overwrite_output_dir", "allow_changed_args"})
# The recipe (examples/results/recipe-search) trains the `small` models without dropout: runs of minutes
# on a CPU (one or two epochs of Multi30k, a fraction of one of WikiText-2) are too short to overfit, and
# dropout only slowed learning there (validation BLEU after 12 minutes: +1.2 for TaLK, +4.1 for the
# Transformer without it). Longer training wants dropout back (`--dropout 0.1` or more). SliceNet's
# `small` is a size for tests that the recipe did not cover: it keeps its configuration's dropout.
RECIPE_DROPOUT = 0.0


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
    group.add_argument(
        "--tokenizer",
        help="existing tokenizer (Hub name or folder) instead of training one: not with the flags below, which "
        "shape a trained one",
    )
    group.add_argument("--tokenizer_kind", choices=KINDS, default=kind)
    group.add_argument(
        "--vocab_size",
        type=int,
        default=vocab_size,
        help=f"at least {len(SPECIAL_TOKENS) + 1}; bpe also needs one id per character of the text",
    )
    group.add_argument(
        "--min_frequency", type=int, default=min_frequency, help="rarer pieces/words are not in the vocabulary"
    )


def add_model_options(parser, encoder_decoder):
    group = parser.add_argument_group("model (sizes default to the preset's)")
    group.add_argument(
        "--model_type", choices=model_types(encoder_decoder), default="talk", help="transformer: the same-size baseline"
    )
    group.add_argument(
        "--preset",
        default="small",
        metavar="NAME",
        help="a named configuration of the model type (XConfig.from_preset); " + describe_presets(encoder_decoder),
    )
    group.add_argument("--d_model", type=int)
    group.add_argument("--ffn_dim", type=int)
    if encoder_decoder:
        group.add_argument("--encoder_layers", type=int)
    group.add_argument("--decoder_layers", type=int)
    group.add_argument("--heads", type=int)
    group.add_argument(
        "--dropout",
        type=float,
        help=f"(default: {RECIPE_DROPOUT} with --preset small, the recipe for runs of minutes on a CPU "
        "(examples/results/recipe-search), except for slicenet; otherwise the preset's own)",
    )
    group.add_argument(
        "--config_overrides",
        metavar="FIELD=VALUE,...",
        help="configuration fields set after the preset and the flags above, as in transformers' run_clm.py "
        "(e.g. final_layer_norm=true for slicenet)",
    )


def describe_presets(encoder_decoder):
    """`talk, ...: small, wmt-big; slicenet: ...`: which presets apply to which --model_type."""
    groups = {}  # the presets, as a tuple, -> the model types that offer them
    for model_type in model_types(encoder_decoder):
        groups.setdefault(presets_of(model_type, encoder_decoder), []).append(model_type)
    return "; ".join(f"{', '.join(types)}: {', '.join(presets)}" for presets, types in groups.items())


def model_sizes(args):
    """The size flags as keyword arguments of `build_model`, with the dropout of `recipe_dropout`."""
    names = ("d_model", "ffn_dim", "encoder_layers", "decoder_layers", "heads")
    return {**{name: getattr(args, name) for name in names if hasattr(args, name)}, "dropout": recipe_dropout(args)}


def recipe_dropout(args):
    """`--dropout`; where it is not given, `RECIPE_DROPOUT` for `--preset small` (SliceNet's excepted)
    and otherwise None: the preset's own."""
    if args.dropout is not None:
        return args.dropout
    if args.preset == "small" and args.model_type != "slicenet":
        return RECIPE_DROPOUT
    return None


def add_training_options(parser, lr, max_tokens, schedule, warmup_steps, label_smoothing, metric, lr_help=None):
    group = parser.add_argument_group("training")
    group.add_argument(
        "--output_dir", required=True, help="the run's folder (checkpoints, logs): one run at a time in it"
    )
    group.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in output_dir from its last save (output_dir/state), with its tokenizer",
    )
    group.add_argument(
        "--overwrite_output_dir",
        action="store_true",
        help="start anew in an output_dir that holds a run: its outputs are deleted first",
    )
    may_change = ", ".join(sorted(MAY_CHANGE_ON_RESUME - {"output_dir"}))
    group.add_argument(
        "--allow_changed_args",
        action="store_true",
        help="with --resume: go on although settings that shape the model, the data, the tokenizer or the "
        "optimization differ from the run's args.json (the tokenizer stays the run's own, and lr and "
        "weight_decay come back from the saved optimizer state). Without it a resume may change only "
        f"{may_change} (under --schedule cosine not the run's length, max_steps or epochs: its learning rate "
        "would jump)",
    )
    group.add_argument("--max_tokens", type=int, default=max_tokens, help="padded tokens per micro-batch and process")
    group.add_argument("--gradient_accumulation_steps", type=int, default=1)
    group.add_argument("--max_steps", type=int, help="optimizer steps (default: --epochs worth)")
    group.add_argument("--epochs", type=float, default=10)
    group.add_argument(
        "--max_train_minutes",
        type=float,
        help="also stop after this much training time (evaluation and saving excluded): a fixed budget",
    )
    group.add_argument("--lr", type=float, default=lr, help=lr_help)
    group.add_argument("--weight_decay", type=float, default=0.0)
    group.add_argument("--schedule", choices=("inverse_sqrt", "cosine"), default=schedule)
    group.add_argument("--warmup_steps", type=int, default=warmup_steps)
    group.add_argument("--clip_norm", type=float, default=1.0, help="0 disables gradient clipping")
    group.add_argument("--label_smoothing", type=float, default=label_smoothing)
    group.add_argument(
        "--mixed_precision",
        choices=("no", "fp16", "bf16"),
        help="(default: under `accelerate launch`, its --mixed_precision or what `accelerate config` saved; under "
        "plain python, no) fp16 needs a GPU; a resume keeps the precision its run started with",
    )
    group.add_argument("--seed", type=int, default=0)
    group.add_argument(
        "--threads",
        type=int,
        help="torch's CPU threads per process (torch.set_num_threads) (default: on a CPU run, one per core that "
        "other processes leave free, measured at the start and printed, since a thread whose core another "
        "process holds stalls every step; on a GPU run, torch's own)",
    )
    group.add_argument("--eval_every", type=int, default=500, help=f"optimizer steps between evaluations ({metric})")
    group.add_argument(
        "--eval_every_minutes",
        type=float,
        help="evaluate after every this much training time instead of every --eval_every steps (not with --eval_every)",
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
    group.add_argument("--push_to_hub", action="store_true", help="upload best/ to --hub_model_id at the end")
    group.add_argument("--hub_model_id", help="owner/name on the Hub, for --push_to_hub")


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
