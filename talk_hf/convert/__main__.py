"""``python -m talk_hf.convert fairseq CHECKPOINT OUTPUT_DIR``: see ``--help``."""

from __future__ import annotations

import argparse
import logging
import sys

import torch

from .fairseq_checkpoint import resolve_global
from .fairseq_config import FAMILIES
from .from_fairseq import convert_fairseq_checkpoint
from .output_folder import FSMT_TOKENIZER_FILES, MODEL_FILES

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m talk_hf.convert",
        description="Convert checkpoints of other libraries into talk_hf save_pretrained folders.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    fairseq = commands.add_parser(
        "fairseq",
        help="a fairseq LightConv/DynamicConv checkpoint or a TaLK authors' checkpoint",
        description=(
            "Convert a fairseq LightConv/DynamicConv checkpoint (fairseq's released models) or a TaLK "
            "fairseq-plugin checkpoint into a folder that AutoModelForSeq2SeqLM / AutoModelForCausalLM "
            "load (after `import talk_hf`). The checkpoint's folder must hold its dictionaries "
            "(dict.<lang>.txt, or dict.txt for a language model) and, for a tokenizer, the BPE codes "
            "(bpecodes), as fairseq's archives do. The output holds the model (safetensors), fairseq's "
            "search settings, the Moses + BPE tokenizer and a model card with the source and license."
        ),
    )
    fairseq.add_argument("checkpoint", help="the fairseq model.pt")
    fairseq.add_argument(
        "output_dir",
        help="the folder to write (created if missing); files it holds of the names the conversion writes are "
        "refused unless --overwrite",
    )
    fairseq.add_argument(
        "--family",
        choices=FAMILIES,
        default=None,
        help="lightconv: fairseq's LightConv/DynamicConv; talk: the TaLK authors' plugin "
        "(default: detected from the saved arch, lightconv* or talkconv*)",
    )
    fairseq.add_argument(
        "--source-lang", default=None, help="source language of dict.<lang>.txt (default: the checkpoint's)"
    )
    fairseq.add_argument(
        "--target-lang", default=None, help="target language of dict.<lang>.txt (default: the checkpoint's)"
    )
    fairseq.add_argument(
        "--beam", type=int, default=5, help="beam size of the saved generation settings (default: %(default)s)"
    )
    fairseq.add_argument(
        "--lenpen",
        type=float,
        default=1.0,
        help="length penalty of the saved generation settings, fairseq-generate's --lenpen (default: %(default)s)",
    )
    fairseq.add_argument(
        "--lowercase",
        action="store_true",
        help="the tokenizer lowercases its input (the IWSLT14 models were trained lowercased)",
    )
    fairseq.add_argument(
        "--no-tokenizer",
        action="store_true",
        help="write no tokenizer even if bpecodes is there (no sacremoses needed)",
    )
    fairseq.add_argument(
        "--dtype", choices=DTYPES, default="float32", help="dtype of the saved weights (default: %(default)s)"
    )
    fairseq.add_argument(
        "--overwrite",
        action="store_true",
        help=f"replace the files OUTPUT_DIR already holds of those the conversion writes: "
        f"{', '.join(MODEL_FILES)} (or model-*-of-*.safetensors shards) and, with a tokenizer, "
        f"{', '.join(FSMT_TOKENIZER_FILES)}; other files stay",
    )
    fairseq.add_argument(
        "--allow-global",
        action="append",
        default=[],
        metavar="MODULE.NAME",
        help="let the unpickler build this class too (only for a file you trust and a class "
        "that holds plain data; by default only argparse.Namespace and numpy "
        "scalars/arrays); repeatable",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; 0 on success, 1 with a one-line ``error:`` on stderr (no traceback) when
    an input is unusable, 2 (argparse) for a malformed command line."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        config = convert_fairseq_checkpoint(
            args.checkpoint,
            args.output_dir,
            family=args.family,
            source_lang=args.source_lang,
            target_lang=args.target_lang,
            num_beams=args.beam,
            length_penalty=args.lenpen,
            lowercase=args.lowercase,
            tokenizer=not args.no_tokenizer,
            dtype=DTYPES[args.dtype],
            allow_globals=tuple(resolve_global(name) for name in args.allow_global),
            overwrite=args.overwrite,
        )
    except (ValueError, ImportError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"wrote {args.output_dir}: {config.model_type} ({type(config).__name__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
