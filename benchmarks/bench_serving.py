"""Serving throughput on the CPU: our translation models against the same-size Marian in transformers
and in CTranslate2 (float32 and int8), on real sentences, every system doing the same work; and our
causal LMs' decoding steps against GPT-2, eager and compiled with a static cache.

Translation: the source sentences of Multi30k's test_2016_flickr (German, `shared/data/multi30k`),
split by a BPE tokenizer trained on the train split (joint vocabulary of 8,000 pieces, as the example
scripts train it), translated by every system to exactly 30 target tokens (``min_new_tokens`` =
``max_new_tokens`` in `generate`, ``min_decoding_length`` = ``max_decoding_length`` in CTranslate2), in
two decoding settings, batch 1 greedy and batch 32 with 5 beams, at 1 thread and at all cores.  Every
model has d 256, 3 + 3 layers, 4 heads, FFN 1,024 (the ``small`` preset of our models; SliceNet, which
has no FFN or heads, its own ``small`` preset at that width and depth) and random seeded weights
(`_serving.py`).  Rows (systems): Marian in transformers `generate`; each of our encoder-decoders in
eager `generate`, compiled (its forward under ``torch.compile(fullgraph=True)``) and with its linear
layers in int8 (`talk_hf.quantize_int8`); exported to ONNX and run by ONNX Runtime (`talk_hf.export`), in
float32 and with ONNX Runtime's dynamic int8 (every family, SliceNet included), each by the folder's
numpy runner and by transformers' ``generate`` over ``talk_hf.onnx.ORTModelForSeq2SeqLM`` ("ORTModel"
rows, the int8 one compared with the runner's int8 tokens); the same
Marian converted by CTranslate2's `TransformersConverter`, float32 and int8.

In each setting, every round translates the round's next ``--sentences`` sentences with every row, the
rows' order rotating from round to round (`_timing.interleaved`), so that load from other processes
hits the rows compared alike and every ratio comes from one run.  tokens/s: target tokens over wall-clock seconds, summed over the rounds.
Each of our rows records ``ours_over_ctranslate2`` (its tokens/s over CTranslate2's of the same
precision and setting) and ``ours_over_transformers`` (over Marian's in transformers).  Rows that should
reproduce another's tokens record the fraction of sentences that they do (``same_tokens_as_reference``):
CTranslate2 float32 must reproduce transformers' Marian exactly (``ctranslate2_float32_greedy_tokens_equal``);
the int8 rows say how often they keep their float32 model's tokens.

The LM section (`_serving_lm.py`): batch-1 greedy decoding steps at positions 16 and 2,048 of our
causal LMs against GPT-2 (d 512, 6 layers, 8 heads, FFN 2,048) in eager `generate` and in `generate`
with a static cache and `torch.compile`; on the CPU, or with ``--device cuda --no-translation`` on a GPU
(the compiled rows then decode as CUDA graphs).

    python benchmarks/bench_serving.py          # all defaults: benchmarks/results/bench_serving_cpu_<family>.json
    python benchmarks/bench_serving.py --quick  # one short round at full model size, JSON to the temp dir
    python benchmarks/bench_serving.py --device cuda --no-translation --out serving_lm_cuda.json

``--threads N`` measures at N threads only (by default: at 1 thread and at all cores).

The full-size JSON is kept per CPU family (``intel``, ``amd``: `_device.cpu_family`), since the ratios
differ between them.  Any option changed from its default (other than ``--out`` and ``--data-dir``) makes a small-size run,
whose JSON goes to ``--out`` or the temp directory.  To add a system, write a function ``(model,
batch, setting) -> target ids per sentence`` and a `Row` in `rows`; the row's ``prepare`` makes what
that function takes from a built model, once (as `int8_copy` quantizes a copy; a compiled or exported
model alike).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import importlib.metadata
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import torch
from _device import RESULTS, add_cpu_options, cpu_family, parse_cpu_args, run_metadata, write_report
from _models import SEQ2SEQ_BASELINE, ModelShape, add_shape_options
from _serving import (
    CONVERTER_ASSUMPTIONS,
    MULTI30K,
    PARAMETERS_NOTE,
    TEST_SPLIT,
    Batch,
    CTranslate2Model,
    convert_marian,
    model_config,
    multi30k,
    translation_models,
)
from _serving_lm import measure_lm
from _serving_onnx import (
    exportable,
    exported_copy,
    exported_int8_copy,
    exported_model_copy,
    exported_model_int8_copy,
    onnx_runtime_generate,
)
from _timing import Timing, interleaved, spread

from talk_hf import quantize_int8

SETTINGS = {"greedy-b1": (1, 1), "beam5-b32": (32, 5)}  # name: (batch, beams)
SHAPE = ModelShape(d_model=256, layers=3, heads=4, ffn=1024, vocab=8000)
MARIAN = "Marian (transformers)"
CTRANSLATE2_PRECISIONS = ("float32", "int8")
FULL_SIZE_EXEMPT = ("out", "data_dir")  # options that do not change what is measured


class Setting(NamedTuple):
    """One decoding setting at one thread count."""

    decoding: str  # a key of SETTINGS
    batch: int
    beams: int
    threads: int
    new_tokens: int

    @property
    def name(self) -> str:
        return f"{self.decoding}/{self.threads}-thread"


class Row(NamedTuple):
    """A system: ``run(system, batch, setting)`` returns each sentence's target ids, where ``system`` is
    ``prepare(models[model])`` (made once, before the rounds) or, without ``prepare``, the model itself."""

    model: str
    run: Callable[[Any, Batch, Setting], list[list[int]]]
    prepare: Callable[[Any], Any] | None = None  # e.g. quantize, compile or export a copy of the model
    precision: str = "float32"  # the CTranslate2 row that ``ours_over_ctranslate2`` divides by
    ours: bool = False
    reference: str | None = None  # the row whose tokens this one should reproduce


def transformers_generate(model, batch: Batch, setting: Setting) -> list[list[int]]:
    """Eager `generate` of a transformers model (Marian, ours): exactly ``new_tokens`` tokens each."""
    outputs = model.generate(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        do_sample=False,
        num_beams=setting.beams,
        min_new_tokens=setting.new_tokens,
        max_new_tokens=setting.new_tokens,
    )
    return outputs[:, 1:].tolist()  # without the decoder's start token


def int8_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``model`` with every linear layer in int8 (`talk_hf.quantize_int8`, PyTorch's dynamic
    int8 quantization: int8 weights and activations)."""
    model = copy.deepcopy(model)
    quantize_int8(model)
    return model


def compiled_copy(model: torch.nn.Module, backend: str = "inductor") -> torch.nn.Module:
    """A copy of ``model`` whose forward is compiled (``torch.compile(fullgraph=True)``): the recipe of
    docs/serving.md that compiles beam search's steps too; the prompt's pass compiles with it."""
    # Each model traces a few graphs (the prompt's pass, the first steps), and dynamo counts the graphs of
    # every model type's forward together (one code object, transformers' output wrapper) against its limit.
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    model = copy.deepcopy(model)
    model.forward = torch.compile(model.forward, fullgraph=True, backend=backend)
    return model


def exported_model_generate(system, batch: Batch, setting: Setting) -> list[list[int]]:
    """`transformers_generate` of the exported folder loaded as ``talk_hf.onnx.ORTModelForSeq2SeqLM``
    with the setting's threads (`_serving_onnx.OnnxRuntimeSystem`)."""
    return transformers_generate(system.generator(setting.threads), batch, setting)


def ctranslate2_translate(model: CTranslate2Model, batch: Batch, setting: Setting) -> list[list[int]]:
    """`Translator.translate_batch` of a converted model, exactly ``new_tokens`` tokens each."""
    results = model.translator(setting.threads).translate_batch(
        batch.source_tokens,
        beam_size=setting.beams,
        min_decoding_length=setting.new_tokens,
        max_decoding_length=setting.new_tokens,
    )
    return [model.ids(result.hypotheses[0]) for result in results]


def ctranslate2_row(precision: str) -> str:
    return f"Marian (CTranslate2 {precision})"


def rows(ours: list[str], exportable: list[str], compile_backend: str = "inductor") -> dict[str, Row]:
    """Every system, by row name; ``ours``: our models' names, ``exportable`` those that export to
    ONNX; ``compile_backend``: torch.compile's backend of the compiled rows."""
    compiled = functools.partial(compiled_copy, backend=compile_backend)
    compiled.__name__ = compiled_copy.__name__
    table = {MARIAN: Row(SEQ2SEQ_BASELINE, transformers_generate)}
    for name in ours:
        table[name] = Row(name, transformers_generate, ours=True)
        table[f"{name} compiled"] = Row(name, transformers_generate, compiled, ours=True, reference=name)
        table[f"{name} int8"] = Row(name, transformers_generate, int8_copy, "int8", ours=True, reference=name)
        if name in exportable:
            run = onnx_runtime_generate
            table[f"{name} ONNX Runtime"] = Row(name, run, exported_copy, ours=True, reference=name)
            table[f"{name} ONNX Runtime int8"] = Row(name, run, exported_int8_copy, "int8", ours=True, reference=name)
            run, int8 = exported_model_generate, f"{name} ONNX Runtime int8"
            table[f"{name} ORTModel"] = Row(name, run, exported_model_copy, ours=True, reference=name)
            table[f"{name} ORTModel int8"] = Row(name, run, exported_model_int8_copy, "int8", ours=True, reference=int8)
    for precision in CTRANSLATE2_PRECISIONS:
        name = ctranslate2_row(precision)
        table[name] = Row(name, ctranslate2_translate, precision=precision, reference=MARIAN)
    return table


def build_systems(args, folder: Path) -> tuple[dict, dict[str, Row], Any, list[str], dict]:
    """(what each row runs, by row name; the rows; tokenizer; test sentences; what the report records
    of them); CTranslate2's conversions go to ``folder``."""
    tokenizer, sources = multi30k(args.data_dir, args.source_lang, args.target_lang, args.vocab)
    shape = dataclasses.replace(ModelShape.from_args(args), vocab=len(tokenizer))
    models = translation_models(shape, tokenizer)
    ours = [name for name in models if name != SEQ2SEQ_BASELINE]
    converted = convert_marian(models[SEQ2SEQ_BASELINE], tokenizer, folder, CTRANSLATE2_PRECISIONS)
    for precision, path in converted.items():
        models[ctranslate2_row(precision)] = CTranslate2Model(path, precision, tokenizer)
    table = rows(ours, [name for name in ours if exportable(models[name])], args.compile_backend)
    systems = {
        name: row.prepare(models[row.model]) if row.prepare else models[row.model] for name, row in table.items()
    }
    records = {
        "systems": {
            name: {
                "model": row.model,
                "run": row.run.__name__,
                "prepare": row.prepare.__name__ if row.prepare else None,
                "int8_layers": len(systems[name].int8_quantization.layers) if row.prepare is int8_copy else None,
                "precision": row.precision,
                "ours": row.ours,
                "reference": row.reference,
            }
            for name, row in table.items()
        },
        "configs": {name: model_config(model) for name, model in models.items() if isinstance(model, torch.nn.Module)},
        "parameters_note": PARAMETERS_NOTE,
        "parameters": {
            name: sum(p.numel() for p in model.parameters())
            for name, model in models.items()
            if isinstance(model, torch.nn.Module)
        },
        "ctranslate2": {
            "converter_assumptions": CONVERTER_ASSUMPTIONS,
            "configs": {p: json.loads((path / "config.json").read_text()) for p, path in converted.items()},
        },
        "shape": dataclasses.asdict(shape),
        "tokenizer": {
            "kind": "bpe",
            "pieces": len(tokenizer),
            "trained_on": f"train.{args.source_lang} + train.{args.target_lang}",
        },
    }
    return systems, table, tokenizer, sources, records


def round_batches(tokenizer, sources: list[str], setting: Setting, *, rounds: int, sentences: int) -> list[list[Batch]]:
    """Per round, that round's next ``sentences`` sentences (wrapping around) in batches of the setting's size."""
    batches = []
    for number in range(rounds):
        chosen = [sources[(number * sentences + i) % len(sources)] for i in range(sentences)]
        batches.append(
            [Batch.encode(tokenizer, chosen[i : i + setting.batch]) for i in range(0, sentences, setting.batch)]
        )
    return batches


def measure(
    systems: dict, table: dict[str, Row], batches: dict[str, list[list[Batch]]], settings: list[Setting]
) -> dict:
    """Translate every round's batches with every row in every setting; per setting and row: tokens,
    wall and CPU seconds, per-round tokens/s, and the output tokens of every sentence."""
    records = {}
    for setting in settings:
        torch.set_num_threads(setting.threads)
        for name, row in table.items():  # warm-up: the first batch of two rounds (a compiled row traces a second size)
            for first_rounds in batches[setting.name][:2]:
                row.run(systems[name], first_rounds[0], setting)

        def translate_round(row, system, setting=setting):
            def run(number):  # number: the round
                return [output for batch in batches[setting.name][number] for output in row.run(system, batch, setting)]

            return run

        functions = {name: translate_round(row, systems[name]) for name, row in table.items()}
        rounds = len(batches[setting.name])
        timings = interleaved(functions, rounds=rounds, warmup=0, rotate=True)
        records[setting.name] = {name: record_of(timing) for name, timing in timings.items()}
    return records


def record_of(timing: Timing) -> dict:
    """Tokens, wall and CPU seconds, per-round tokens/s and the outputs of one row's timed rounds
    (``timing.values``: each round's output token lists)."""
    tokens = [sum(len(output) for output in outputs) for outputs in timing.values]
    return {
        "seconds": timing.total_s,
        "cpu_s": timing.cpu_total_s,
        "tokens": sum(tokens),
        "rounds": [count / seconds for count, seconds in zip(tokens, timing.wall_s, strict=True)],
        "outputs": [output for outputs in timing.values for output in outputs],
    }


def results_of(records: dict, table: dict[str, Row], settings: list[Setting]) -> dict:
    """Per setting and row: tokens/s (wall, CPU), per-round spread, full-length outputs, the fraction
    of sentences equal to the reference row's."""
    results = {}
    for setting in settings:
        per_row = {}
        for name, record in records[setting.name].items():
            outputs, reference = record["outputs"], table[name].reference
            per_row[name] = {
                "tokens_per_s": record["tokens"] / record["seconds"],
                "tokens_per_cpu_s": record["tokens"] / record["cpu_s"],
                "round_tokens_per_s": spread(record["rounds"]),
                "tokens": record["tokens"],
                "seconds": record["seconds"],
                "sentences": len(outputs),
                "all_outputs_full_length": all(len(output) == setting.new_tokens for output in outputs),
                "distinct_outputs": len({tuple(output) for output in outputs}),
            }
            if reference is not None:
                expected = records[setting.name][reference]["outputs"]
                per_row[name]["reference"] = reference
                per_row[name]["same_tokens_as_reference"] = sum(
                    a == b for a, b in zip(outputs, expected, strict=True)
                ) / len(outputs)
        results[setting.name] = per_row
    return results


def summarise(results: dict, table: dict[str, Row]) -> dict:
    """Per setting: each row's tokens/s; ours over CTranslate2 (same precision) and over transformers."""
    summary = {}
    for setting, per_row in results.items():
        rows_summary = {}
        for name, measured in per_row.items():
            row, speed = table[name], measured["tokens_per_s"]
            entry = {"tokens_per_s": speed}
            if row.ours:
                entry["ours_over_ctranslate2"] = speed / per_row[ctranslate2_row(row.precision)]["tokens_per_s"]
                entry["ours_over_transformers"] = speed / per_row[MARIAN]["tokens_per_s"]
            elif name != MARIAN:
                entry["over_transformers"] = speed / per_row[MARIAN]["tokens_per_s"]
            rows_summary[name] = entry
        summary[setting] = rows_summary
    return summary


def print_table(summary: dict) -> None:
    for setting, per_row in summary.items():
        for name, entry in per_row.items():
            ratios = "  ".join(f"{key} {value:.2f}" for key, value in entry.items() if key != "tokens_per_s")
            print(f"{setting:20s} {name:42s} {entry['tokens_per_s']:9.1f} tokens/s  {ratios}", flush=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_shape_options(parser, SHAPE)
    parser.add_argument("--data-dir", type=Path, default=MULTI30K, help="Multi30k: train.* and test_2016_flickr.*")
    parser.add_argument("--source-lang", default="de")
    parser.add_argument("--target-lang", default="en")
    parser.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))
    parser.add_argument("--new-tokens", type=int, default=30, help="target tokens of every sentence")
    parser.add_argument("--sentences", type=int, default=32, help="sentences per round and setting")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument(
        "--translation", action=argparse.BooleanOptionalAction, default=True, help="the translation section (CPU)"
    )
    parser.add_argument("--lm", action=argparse.BooleanOptionalAction, default=True, help="the LM section")
    parser.add_argument("--device", default="cpu", help="where the LM section runs (cuda: with --no-translation)")
    parser.add_argument("--lm-d-model", type=int, default=512, help="LM width (heads: d / 64, FFN: 4 d)")
    parser.add_argument("--lm-layers", type=int, default=6)
    parser.add_argument("--lm-positions", type=int, nargs="+", default=[16, 2048])
    parser.add_argument("--lm-new-tokens", type=int, default=32, help="tokens per LM generate (steps + 1)")
    parser.add_argument("--lm-rounds", type=int, default=5)
    parser.add_argument("--gpt2-compile", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--compile-backend", default="inductor", help="torch.compile backend of compiled rows")
    parser.add_argument("--quick", action="store_true", help="1 round of 4 sentences, 1 LM round of 8 tokens")
    add_cpu_options(parser)
    return parser


def parse_command_line() -> tuple[argparse.Namespace, bool]:
    """The command line, and whether it is the full-size run (every option that changes what is
    measured at its default); ``--quick`` shrinks the rounds."""
    parser = build_parser()
    args = parse_cpu_args(parser)
    if args.device != "cpu" and args.translation:
        parser.error(f"--device {args.device}: the translation section runs on the CPU only; add --no-translation")
    if not (args.translation or args.lm):
        parser.error("--no-translation with --no-lm measures nothing")
    full_size = all(
        value == parser.get_default(key) for key, value in vars(args).items() if key not in FULL_SIZE_EXEMPT
    )
    if args.quick:
        args.rounds, args.sentences, args.lm_rounds, args.lm_new_tokens = 1, 4, 1, 8
    return args, full_size


def translate_all(args, settings: list[Setting]) -> tuple[dict, dict[str, Row], dict]:
    """(results, rows, what the report records of the systems) of every row in every setting."""
    with tempfile.TemporaryDirectory() as folder:  # CTranslate2's models, loaded when first used
        systems, table, tokenizer, sources, records = build_systems(args, Path(folder))
        batches = {
            s.name: round_batches(tokenizer, sources, s, rounds=args.rounds, sentences=args.sentences) for s in settings
        }
        return results_of(measure(systems, table, batches, settings), table, settings), table, records


def ctranslate2_agreement(results: dict) -> dict:
    """The fraction of sentences on which CTranslate2 float32 gives transformers' Marian's tokens, per
    setting; and whether it gives them all in every greedy setting (None without one)."""
    same = {
        setting: per_row[ctranslate2_row("float32")]["same_tokens_as_reference"] for setting, per_row in results.items()
    }
    greedy = [fraction for setting, fraction in same.items() if setting.startswith("greedy")]
    return {
        "ctranslate2_float32_same_tokens": same,
        "ctranslate2_float32_greedy_tokens_equal": all(f == 1.0 for f in greedy) if greedy else None,
    }


def translation_report(args, thread_counts: list[int]) -> dict:
    """The translation section's part of the report: its data, systems, settings, results, summary."""
    settings = [Setting(d, *SETTINGS[d], threads, args.new_tokens) for threads in thread_counts for d in args.settings]
    results, table, records = translate_all(args, settings)
    summary = summarise(results, table)
    print_table(summary)
    return {
        "data": {"sources": f"multi30k {TEST_SPLIT}.{args.source_lang}", "sentences": args.rounds * args.sentences},
        **records,
        "settings": {s.name: s._asdict() for s in settings},
        **ctranslate2_agreement(results),
        "results": results,
        "summary": summary,
    }


def main() -> None:
    args, full_size = parse_command_line()
    if args.device != "cpu":  # host threads only feed the GPU: torch's choice
        thread_counts = [args.threads or torch.get_num_threads()]
    else:
        thread_counts = [args.threads] if args.threads else sorted({1, os.cpu_count()})
    started = time.perf_counter()
    report = {
        "benchmark": "bench_serving",
        **run_metadata(args.device),
        "thread_counts": thread_counts,
        "full_size": full_size,
        "options": {key: value for key, value in vars(args).items() if key not in FULL_SIZE_EXEMPT},
        "elapsed_s": {},
    }
    if args.translation:
        report.update(translation_report(args, thread_counts))
        report["versions"]["ctranslate2"] = importlib.metadata.version("ctranslate2")
        report["elapsed_s"]["translation"] = time.perf_counter() - started
    lm_shape = ModelShape(
        args.lm_d_model, args.lm_layers, max(1, args.lm_d_model // 64), 4 * args.lm_d_model, args.vocab
    )
    report["lm"] = None
    if args.lm:
        lm_options = dict(positions=args.lm_positions, thread_counts=thread_counts, new_tokens=args.lm_new_tokens)
        lm_options.update(rounds=args.lm_rounds, compile_gpt2=args.gpt2_compile, compile_backend=args.compile_backend)
        lm = measure_lm(lm_shape, device=args.device, **lm_options)
        report["lm"] = {"shape": dataclasses.asdict(lm_shape), **lm}
        print(json.dumps(lm["summary"], indent=2))
    report["elapsed_s"]["total"] = time.perf_counter() - started
    small = Path(tempfile.gettempdir()) / f"bench_serving_{torch.device(args.device).type}_small.json"
    out = args.out or (RESULTS / f"bench_serving_cpu_{cpu_family()}.json" if full_size else small)
    write_report(report, out, out.name, announce=False)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
