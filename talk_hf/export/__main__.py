"""``python -m talk_hf.export MODEL_DIR OUTPUT_DIR [--check]``: see ``--help``."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

import torch
from safetensors import SafetensorError
from transformers import AutoConfig, AutoTokenizer
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from ..models.families import family_of
from .folder_writes import check_replaceable
from .int8 import quantize_exported
from .onnx_files import EXPORT_FILES, EXPORTERS, export_onnx, written_files
from .runner import OnnxGenerator

CHECK_ROWS, CHECK_LENGTH, CHECK_NEW_TOKENS = 4, 12, 20


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m talk_hf.export",
        description=(
            "Export a saved TaLK / DynamicConv / LightConv / SliceNet model (a save_pretrained folder) to ONNX: the encoder "
            "and one decoding step with the fixed-size state as inputs and outputs, a manifest.json and runner.py (with the runner's files beside it), "
            "which generates with onnxruntime and numpy only."
        ),
    )
    parser.add_argument("model_dir", help="the save_pretrained folder of the model")
    parser.add_argument("output_dir", help="the folder to write (created if missing)")
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first (repeatable): the module that registers a family added with "
        "talk_hf.register_family, so that its model type loads",
    )
    parser.add_argument(
        "--exporter", choices=EXPORTERS, default="dynamo", help="torch.onnx exporter (default: %(default)s)"
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help=f"replace the files {', '.join(EXPORT_FILES)} in output_dir even when no export wrote them (without "
        "it, the export refuses to replace a file its manifest.json does not list; a previous export's are replaced)",
    )
    parser.add_argument(
        "--no-tokenizer",
        action="store_true",
        help="do not copy the model folder's tokenizer (by default the export writes it beside the graphs when "
        "model_dir holds one, so that the folder decodes text)",
    )
    parser.add_argument(
        "--int8",
        action="store_true",
        help="then quantize the graphs' weights to int8 (ONNX Runtime's dynamic quantization; after --check)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help=f"then decode {CHECK_ROWS} random inputs ({CHECK_NEW_TOKENS} tokens) with the exported files and with "
        "model.generate, greedily and with the model's generation defaults when they search with beams, and fail "
        "unless the tokens are equal",
    )
    return parser


def load_config(model_dir: str):
    """The configuration saved in ``model_dir``; ValueError naming a folder without one, or its config.json
    and the field of a value of the wrong type or out of range."""
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        raise ValueError(f"{model_dir} is not a save_pretrained folder: it has no config.json")
    try:
        return AutoConfig.from_pretrained(model_dir)
    except (TypeError, ValueError) as error:  # the configuration's own checks name the field
        model_type = _model_type(path)
        if model_type is not None and model_type not in CONFIG_MAPPING:
            raise ValueError(
                f"{path} does not load: its model type {model_type!r} is not registered in this process; a family "
                "added with talk_hf.register_family is registered by importing its module: pass --import MODULE"
            ) from None
        raise ValueError(f"{path} does not load: {error}") from None


def _model_type(path: Path) -> str | None:
    """The ``model_type`` that the config.json at ``path`` names, or None where it names none (or is no JSON object)."""
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return saved.get("model_type") if isinstance(saved, dict) else None


def import_modules(names: list[str]) -> None:
    """Import each module of ``--import``; ValueError naming the one that does not import, and why."""
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as error:
            raise ValueError(f"--import {name}: {error}") from None


def load_model(model_dir: str) -> torch.nn.Module:
    """The generative head saved in ``model_dir``, in float32 and eval mode; ValueError naming a missing
    folder, a model type that is not the package's, or weights that are not its configuration's (a damaged
    file, weights of other shapes, weights missing or left over)."""
    config = load_config(model_dir)
    head_class = family_of(config.model_type).head_class
    try:
        model, loading = head_class.from_pretrained(model_dir, dtype=torch.float32, output_loading_info=True)
    except (RuntimeError, SafetensorError) as error:  # transformers' load report, logged above, names the weights
        raise ValueError(
            f"the weights in {model_dir} do not load into the {config.model_type} model of its config.json ({error}): "
            "save the model again (save_pretrained), with its own config.json"
        ) from None
    missing, unexpected = sorted(loading["missing_keys"]), sorted(loading["unexpected_keys"])
    if missing or unexpected:  # transformers initialises the missing weights at random and drops the others
        raise ValueError(
            f"the weights in {model_dir} are not those of the {config.model_type} model of its config.json: it lacks "
            f"{missing} and holds {unexpected}: save the model again (save_pretrained), with its own config.json"
        )
    return model.eval()


def load_tokenizer(model_dir: str):
    """The tokenizer saved beside the model in ``model_dir`` (its tokenizer_config.json), or None when the
    folder holds none; a tokenizer that does not load raises ValueError naming the folder."""
    if not (Path(model_dir) / "tokenizer_config.json").is_file():
        return None
    try:
        return AutoTokenizer.from_pretrained(model_dir)
    except (OSError, ValueError, ImportError) as error:
        raise ValueError(
            f"{model_dir} holds a tokenizer_config.json whose tokenizer does not load ({error}); "
            "fix it, or export without it (--no-tokenizer)"
        ) from error


def check_tokens(model, folder: str, seed: int = 0) -> list[str]:
    """Decode ``CHECK_ROWS`` random inputs (special ids avoided) with the exported files and with
    ``model.generate``, greedily and, when the model's generation configuration searches with beams, with
    its defaults (its processors and lengths apply to both); the strategies whose tokens are equal, or
    ValueError naming the first row that differs."""
    config = model.config
    eos = config.eos_token_id
    special = [config.pad_token_id, config.bos_token_id, *(eos if isinstance(eos, list) else [eos])]
    low = 1 + max((token for token in special if token is not None), default=-1)
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(low, config.vocab_size, (CHECK_ROWS, CHECK_LENGTH), generator=generator)
    strategies = {"greedy": dict(num_beams=1, do_sample=False)}
    beams = model.generation_config.num_beams
    if beams is not None and beams > 1 and not model.generation_config.do_sample:
        strategies[f"beam-{beams} (the model's generation defaults)"] = {}
    runner = OnnxGenerator(folder)
    for name, settings in strategies.items():
        with torch.no_grad():
            expected = model.generate(
                input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=CHECK_NEW_TOKENS, **settings
            )
        exported = runner.generate(ids.numpy(), max_new_tokens=CHECK_NEW_TOKENS, **settings)
        if expected.shape != exported.shape:
            raise ValueError(
                f"{name}: generate gives shape {tuple(expected.shape)}, the exported files {exported.shape}"
            )
        for row, (want, got) in enumerate(zip(expected.tolist(), exported.tolist(), strict=True)):
            if want != got:
                raise ValueError(
                    f"{name}: row {row} of the check differs: generate gives {want}, the exported files {got}"
                )
    return list(strategies)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; 0 on success, 1 with a one-line ``error:`` on stderr when an input is
    unusable or the check fails, 2 (argparse) for a malformed command line."""
    args = build_parser().parse_args(argv)
    try:
        import_modules(args.imports)
        names = written_files(load_config(args.model_dir).is_encoder_decoder)
        check_replaceable(Path(args.output_dir), names, args.overwrite)  # before the model loads
        model = load_model(args.model_dir)
        tokenizer = None if args.no_tokenizer else load_tokenizer(args.model_dir)
        manifest = export_onnx(
            model, args.output_dir, exporter=args.exporter, overwrite=args.overwrite, tokenizer=tokenizer
        )
        with_tokenizer = f", with its tokenizer ({type(tokenizer).__name__})" if tokenizer is not None else ""
        print(
            f"wrote {manifest.parent}: {model.config.model_type} ({type(model).__name__}), {args.exporter} exporter"
            + with_tokenizer
        )
        if args.check:
            for strategy in check_tokens(model, args.output_dir):
                print(f"check: {strategy} tokens of {CHECK_ROWS} random inputs equal model.generate's")
        if args.int8:
            print(f"int8: {', '.join(quantize_exported(args.output_dir))}")
    except (ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
