"""BLEU of a trained translation model in every way we serve it: PyTorch float32 (`generate`), PyTorch
int8 (`talk_hf.quantize_int8`), ONNX Runtime float32 and ONNX Runtime int8 (`talk_hf.export`, then
`quantize_exported`), each greedy and with beam search.

Run it on a model `examples/translation/train.py` trained (its ``best/`` folder holds the tokenizer):

    python bleu_serving.py ../runs/talk-multi30k/best --data_dir ../../shared/data/multi30k

Every system translates the same batches (sources sorted by length, ``--batch_size`` sentences each),
with train.py's length limit (1.2 x the batch's source length + 10 new tokens) and the model's
generation settings for everything else (length penalty, early stopping).  The JSON holds, per system
and beam width, sacrebleu's corpus BLEU against the references and ``same_tokens_as_float32``: the
fraction of sentences whose tokens equal PyTorch float32's at that beam width.  Quality, not speed:
`bench_serving.py` times the same systems.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import sacrebleu
import torch
from _device import add_cpu_options, parse_cpu_args, run_metadata, write_report
from _serving_onnx import OnnxRuntimeSystem, exported_copy, exported_int8_copy
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

import talk_hf

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))  # the example scripts' data reader

from common.data import load_columns  # noqa: E402


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir", type=Path, help="a trained model's save_pretrained folder, with its tokenizer")
    parser.add_argument("--data_dir", type=Path, required=True, help="the line-aligned text files (common.data)")
    parser.add_argument("--split", default="test", help="the split to translate (default: test)")
    parser.add_argument("--source_lang", default="de")
    parser.add_argument("--target_lang", default="en")
    parser.add_argument("--limit", type=int, default=None, help="translate only the first LIMIT sentences")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 5], help="beam widths (1: greedy)")
    add_cpu_options(parser)
    args = parse_cpu_args(parser)
    if args.batch_size < 1 or min(args.beams) < 1:
        parser.error(f"--batch_size and --beams must be >= 1, got {args.batch_size} and {args.beams}")
    return args


def batches(tokenizer, sources: list[str], batch_size: int):
    """(indices, input_ids (B, S), attention_mask (B, S)) of the sources sorted by token length."""
    lengths = [len(ids) for ids in tokenizer(sources)["input_ids"]]
    order = sorted(range(len(sources)), key=lambda i: lengths[i])
    for start in range(0, len(order), batch_size):
        indices = order[start : start + batch_size]
        encoded = tokenizer([sources[i] for i in indices], return_tensors="pt", padding=True)
        yield indices, encoded["input_ids"], encoded["attention_mask"]


def max_new_tokens(input_ids: torch.Tensor) -> int:
    """train.py's length limit for a batch of (B, S) sources."""
    return int(1.2 * input_ids.shape[1]) + 10


def pytorch_translator(model):
    def translate(input_ids, attention_mask, beams):
        with torch.no_grad():
            return model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                num_beams=beams,
                max_new_tokens=max_new_tokens(input_ids),
            ).tolist()

    return translate


def onnx_translator(system: OnnxRuntimeSystem, threads: int | None):
    generator = system.generator(threads)

    def translate(input_ids, attention_mask, beams):
        return generator.generate(
            input_ids.numpy(), attention_mask.numpy(), max_new_tokens=max_new_tokens(input_ids), num_beams=beams
        ).tolist()

    return translate


def translators(model, threads: int | None) -> dict:
    """System name -> translate(input_ids, attention_mask, beams) -> token rows (start token first)."""
    int8_model = copy.deepcopy(model)
    talk_hf.quantize_int8(int8_model)
    return {
        "PyTorch float32": pytorch_translator(model),
        "PyTorch int8": pytorch_translator(int8_model),
        "ONNX Runtime float32": onnx_translator(exported_copy(model), threads),
        "ONNX Runtime int8": onnx_translator(exported_int8_copy(model), threads),
    }


def without_padding(tokens: list[int], pad_token_id: int) -> list[int]:
    """A row's tokens up to its padding (rows that ended early are padded with ``pad_token_id``)."""
    while tokens and tokens[-1] == pad_token_id:
        tokens = tokens[:-1]
    return tokens


def main():
    args = parse_args()
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    model = AutoModelForSeq2SeqLM.from_pretrained(args.model_dir).eval()
    pairs = load_columns(args.data_dir, args.split, [args.source_lang, args.target_lang], limit=args.limit)
    sources, references = pairs[args.source_lang], pairs[args.target_lang]
    pad = model.generation_config.pad_token_id
    outputs = {}  # (system, beams) -> token rows in the order of `sources`
    systems = translators(model, args.threads)  # the exports' folders go at exit (_serving_onnx)
    names = list(systems)
    for beams in args.beams:
        for name, translate in systems.items():
            rows = [None] * len(sources)
            for indices, input_ids, attention_mask in batches(tokenizer, sources, args.batch_size):
                for i, tokens in zip(indices, translate(input_ids, attention_mask, beams), strict=True):
                    rows[i] = without_padding(tokens, pad)
            outputs[name, beams] = rows
            print(f"{name}, beams {beams}: translated {len(rows)} sentences", flush=True)
    results, summary = {}, {}
    for (name, beams), rows in outputs.items():
        hypotheses = tokenizer.batch_decode(rows, skip_special_tokens=True)
        reference_rows = outputs["PyTorch float32", beams]
        same = sum(row == kept for row, kept in zip(rows, reference_rows, strict=True)) / len(rows)
        bleu = sacrebleu.corpus_bleu(hypotheses, [references]).score
        results[f"{name}, beams {beams}"] = {"bleu": bleu, "same_tokens_as_float32": same, "examples": hypotheses[:3]}
        summary[f"{name}, beams {beams}"] = f"BLEU {bleu:.2f}, {same:.0%} of sentences as float32"
    report = {
        "model_dir": str(args.model_dir),
        "data": {"location": str(args.data_dir), "split": args.split, "sentences": len(sources)},
        "settings": {"batch_size": args.batch_size, "beams": args.beams, "systems": names},
        "run": run_metadata("cpu"),
        "results": results,
        "summary": summary,
    }
    write_report(report, args.out, "bleu_serving_cpu.json")


if __name__ == "__main__":
    main()
