"""bench_train's command line: the options of its two modes (the LM and 512-token seq2seq rows, and
``--long-source``'s rows), each mode's defaults and the checks made before anything runs, and the
command line of its child processes."""

from __future__ import annotations

import argparse

import torch
from _device import add_cpu_options, add_device_option
from _models import ModelShape, add_shape_options, baseline_of, causal_lm_models, seq2seq_model_variants, seq2seq_models

# The shapes of the models unless the command line sets them: the LM and 512-token seq2seq rows';
# the long-source rows' on the CPU (the cnn-dm preset's depth and ratios at half its width) and on a GPU (cnn-dm's).
SHAPES = {
    "short": ModelShape(d_model=256, layers=4, heads=4, ffn=1024, vocab=8000),
    "long-source cpu": ModelShape(d_model=256, layers=6, heads=4, ffn=1024, vocab=8000, encoder_layers=7),
    "long-source cuda": ModelShape(d_model=512, layers=6, heads=8, ffn=2048, vocab=8000, encoder_layers=7),
}


def parse_options(argv=None, description: str | None = None):
    """The command line ``argv`` (None: ``sys.argv``): the options of its rows (``--long-source``
    or not) filled with that mode's defaults, its models each with its baseline and its lengths
    within the tokens of a step."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_device_option(parser)
    add_shape_options(parser)
    parser.add_argument("--encoder-layers", type=int, help="the encoder-decoders' encoders' depth (default: --layers)")
    parser.set_defaults(**dict.fromkeys(vars(SHAPES["short"])))  # each mode's shape, filled below
    parser.add_argument("--blocks", type=int, nargs="+", help="LM block lengths (default 256 1024 4096 16384)")
    parser.add_argument("--tokens", type=int, help="LM tokens per step, rows = tokens // block (default 16384)")
    parser.add_argument("--source-length", type=int, help="the seq2seq row's source tokens (default 512)")
    parser.add_argument("--target-length", type=int, help="the seq2seq row's target tokens (default 128)")
    parser.add_argument("--seq2seq-rows", type=int, help="the seq2seq row's rows (default 16)")
    parser.add_argument(
        "--long-source",
        action="store_true",
        help="the long-source seq2seq rows and beam search (_long_source) instead; their shape unless set: "
        "d 256, 7 + 6 layers, 4 heads, FFN 1024 on the CPU, the cnn-dm preset's (d 512, 8 heads, FFN 2048) on a GPU",
    )
    parser.add_argument("--sources", type=int, nargs="+", help="source lengths (default 400 1024 4096 16384)")
    parser.add_argument("--targets", type=int, nargs="+", help="a target length per source (default 64 128 256 256)")
    parser.add_argument("--source-tokens", type=int, help="source tokens a step, rows = this // source (default 16384)")
    parser.add_argument("--generate-source", type=int, help="beam search's source length (default 4096)")
    parser.add_argument("--generate-new-tokens", type=int, help="the tokens beam search writes (default 64)")
    parser.add_argument("--beams", type=int, help="beam search's beams (default 4)")
    parser.add_argument("--models", nargs="+", help="a subset of the mode's models (each needs its baseline)")
    parser.add_argument(
        "--dropout",
        type=float,
        default=None,
        help="every dropout probability of every model (default: each config's own)",
    )
    parser.add_argument(
        "--mixed-precision",
        choices=["no", "bf16"],
        default="no",
        help="bf16: the forward under bfloat16 autocast, weights and optimizer in float32",
    )
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per (model, length)")
    parser.add_argument("--one", nargs=3, metavar=("MODEL", "LENGTH", "ROWS"), help=argparse.SUPPRESS)
    parser.add_argument(
        "--serve", nargs=5, metavar=("MODEL", "TASK", "SOURCE", "TARGET", "ROWS"), help=argparse.SUPPRESS
    )
    add_cpu_options(parser)
    args = parser.parse_args(argv)
    fill_mode_defaults(parser, args)
    known = mode_defaults(args.long_source)["models"]
    for name in args.models:
        if name not in known:
            parser.error(f"--models: unknown {name!r}; expected some of {known}")
        if baseline_of(name) not in args.models:
            parser.error(f"--models: {name} needs its baseline {baseline_of(name)!r} too")
    if args.steps < 1 or args.warmup < 0:
        parser.error(f"--steps ({args.steps}) must be at least 1 and --warmup ({args.warmup}) at least 0")
    if args.long_source:
        check_long_source_lengths(parser, args)
    elif any(block > args.tokens for block in args.blocks):
        parser.error(f"--tokens ({args.tokens}) must be at least the longest block ({max(args.blocks)})")
    return args


def mode_defaults(long_source: bool) -> dict:
    """The options of one mode and their defaults (False: the LM and 512-token seq2seq rows; True:
    ``--long-source``), its models those registered when it is called."""
    if long_source:
        return {
            "sources": [400, 1024, 4096, 16384],
            "targets": [64, 128, 256, 256],
            "source_tokens": 16384,
            "generate_source": 4096,
            "generate_new_tokens": 64,
            "beams": 4,
            "models": list(seq2seq_model_variants()),
        }
    return {
        "blocks": [256, 1024, 4096, 16384],
        "tokens": 16384,
        "source_length": 512,
        "target_length": 128,
        "seq2seq_rows": 16,
        "models": list(causal_lm_models() + seq2seq_models()),
    }


def fill_mode_defaults(parser, args) -> None:
    """Give the options of ``args``'s mode that the command line left unset their defaults (the
    shape's: `SHAPES` for the mode and device); an option of the other mode is an error."""
    mode, other = mode_defaults(args.long_source), mode_defaults(not args.long_source)
    misplaced = [f"--{key.replace('_', '-')}" for key in other if key not in mode and getattr(args, key) is not None]
    if misplaced:
        parser.error(f"{', '.join(misplaced)} apply {'without' if args.long_source else 'with'} --long-source only")
    device_type = torch.device(args.device).type
    shape = SHAPES["short" if not args.long_source else f"long-source {'cuda' if device_type == 'cuda' else 'cpu'}"]
    for key, value in {**vars(shape), **mode}.items():
        if getattr(args, key) is None:
            setattr(args, key, value)


def check_long_source_lengths(parser, args) -> None:
    """Refuse --long-source lengths that measure nothing or do not pair up."""
    if len(args.targets) != len(args.sources):
        parser.error(f"--targets ({args.targets}) needs one target length per --sources length ({args.sources})")
    lengths = {"--sources": args.sources, "--targets": args.targets, "--generate-source": [args.generate_source]}
    lengths.update({"--generate-new-tokens": [args.generate_new_tokens], "--beams": [args.beams]})
    for flag, values in lengths.items():
        if min(values) < 1:
            parser.error(f"{flag} ({values}) must be at least 1")
    if max(args.sources) > args.source_tokens:
        parser.error(
            f"--source-tokens ({args.source_tokens}) must be at least the longest source ({max(args.sources)})"
        )


def child_arguments(args) -> list[str]:
    """The options of a child process (bench_train's `run_in_subprocess` and `start_worker`): the
    mode, the device, the shape, the lengths a child reads, the timing, precision and dropout;
    --encoder-layers, --threads and --dropout where they are given."""
    values = {
        "--device": args.device,
        "--d-model": args.d_model,
        "--layers": args.layers,
        "--encoder-layers": args.encoder_layers,
        "--heads": args.heads,
        "--ffn": args.ffn,
        "--vocab": args.vocab,
        "--source-length": args.source_length,
        "--target-length": args.target_length,
        "--beams": args.beams,
        "--warmup": args.warmup,
        "--steps": args.steps,
        "--mixed-precision": args.mixed_precision,
        "--threads": args.threads or None,
        "--dropout": args.dropout,
    }
    options = [text for flag, value in values.items() if value is not None for text in (flag, str(value))]
    return ["--long-source", *options] if args.long_source else options
