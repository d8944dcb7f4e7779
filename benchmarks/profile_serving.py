"""What bounds serving on the CPU: where the exported models' decoding time goes, in one run.

The models, sentences and settings of `bench_serving` (its ``small`` shape, Multi30k test2016, exactly
30 target tokens; batch-1 greedy and 32 sentences x 5 beams), at one thread.  For TaLK and DynamicConv,
float32 and int8, each setting is decoded in interleaved rounds by:

* the folder's runner (`talk_hf.export.OnnxGenerator.generate`),
* transformers' ``generate`` over ``talk_hf.onnx.ORTModelForSeq2SeqLM`` ("ORTModel"),
* CTranslate2's Marian of the same size and precision (the baseline),

and each of our calls is split into the seconds inside ONNX Runtime, per graph (encoder, decoding
step, beam candidates), and the Python around them (numpy or transformers' loop, processors and
cache handling).  Per decoding step: ``step_ms`` (the step graph), ``python_ms``, ``total_ms``, and
CTranslate2's whole time per step.  Then ONNX Runtime's own profiler times every node of the step
graph (one profiled pass of the runner): milliseconds per step by operator type, and the share of
the matrix products (``MatMul``, ``FusedMatMul``, ``MatMulInteger`` ... : the weights the step
streams).

    python benchmarks/profile_serving.py      # results/profile_serving_cpu_<family>.json
    python benchmarks/profile_serving.py --quick --out /tmp/profile.json   # one short round
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import json
import tempfile
import time
from pathlib import Path

import onnxruntime as ort
from _device import add_cpu_options, cpu_family, parse_cpu_args, run_metadata, write_report
from _models import SEQ2SEQ_BASELINE, ModelShape, add_shape_options
from _serving import MULTI30K, CTranslate2Model, convert_marian, multi30k, translation_models
from _serving_onnx import exported_copy, exported_int8_copy, exported_model_copy, exported_model_int8_copy
from _timing import interleaved
from bench_serving import (
    SETTINGS,
    SHAPE,
    Setting,
    ctranslate2_translate,
    exported_model_generate,
    onnx_runtime_generate,
    round_batches,
)

from talk_hf.export.runner_sessions import session_options

MODELS = ("TaLKForConditionalGeneration", "DynamicConvForConditionalGeneration")
# precision -> (the runner's system, the ORTModel's system), as bench_serving prepares them
SYSTEMS = {"float32": (exported_copy, exported_model_copy), "int8": (exported_int8_copy, exported_model_int8_copy)}
MATRIX_PRODUCTS = ("MatMul", "FusedMatMul", "Gemm", "MatMulInteger", "DynamicQuantizeMatMul", "MatMulIntegerToFloat")
STEP_GRAPH = "decoder_step.onnx"


class OrtClock:
    """Seconds spent inside ONNX Runtime, per graph file, while `counting` (``InferenceSession.run``
    and ``run_with_iobinding``, wrapped on the class for the duration), and the calls per graph."""

    def __init__(self):
        self.seconds, self.calls = collections.Counter(), collections.Counter()

    @contextlib.contextmanager
    def counting(self):
        names = ("run", "run_with_iobinding")
        own = {name: vars(ort.InferenceSession).get(name) for name in names}  # None: inherited

        def timed(original):
            def run(session, *args, **kwargs):
                start = time.perf_counter()
                try:
                    return original(session, *args, **kwargs)
                finally:
                    graph = Path(session._model_path).name
                    self.seconds[graph] += time.perf_counter() - start
                    self.calls[graph] += 1

            return run

        for name in names:
            setattr(ort.InferenceSession, name, timed(getattr(ort.InferenceSession, name)))
        try:
            yield self
        finally:
            for name, original in own.items():
                if original is None:
                    delattr(ort.InferenceSession, name)
                else:
                    setattr(ort.InferenceSession, name, original)


def split_time(total_s: float, clock: OrtClock, tokens: int) -> dict:
    """Per decoding step (a call of the step graph): the step graph's, the other graphs', the Python's
    and the whole milliseconds, and the tokens per second."""
    step_s, steps = clock.seconds[STEP_GRAPH], clock.calls[STEP_GRAPH]
    other_graphs_s = sum(clock.seconds.values()) - step_s
    return {
        "steps": steps,
        "tokens_per_s": tokens / total_s,
        "total_ms": 1e3 * total_s / steps,
        "step_ms": 1e3 * step_s / steps,
        "other_graphs_ms": {graph: 1e3 * s / steps for graph, s in clock.seconds.items() if graph != STEP_GRAPH},
        "python_ms": 1e3 * (total_s - step_s - other_graphs_s) / steps,
    }


def node_profile(system, batches, setting: Setting) -> dict:
    """ONNX Runtime's profile of the runner's step graph over ``batches``: ms per step by operator type."""
    generator = system.generator(setting.threads)
    plain = generator.sessions["decoder_step"]
    options = session_options(setting.threads, "all", spin=False)  # as the runner's own sessions
    options.enable_profiling = True
    options.profile_file_prefix = str(Path(plain._model_path).with_name("profile"))
    generator.sessions["decoder_step"] = ort.InferenceSession(plain._model_path, options, ["CPUExecutionProvider"])
    try:
        for batch in batches:
            onnx_runtime_generate(system, batch, setting)
        events = json.loads(Path(generator.sessions["decoder_step"].end_profiling()).read_text())
    finally:
        generator.sessions["decoder_step"] = plain
    runs = sum(1 for event in events if event.get("name") == "model_run")
    by_type = collections.Counter()
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            by_type[event["args"]["op_name"]] += event["dur"] / 1e3 / runs
    nodes_ms = sum(by_type.values())
    products_ms = sum(ms for op, ms in by_type.items() if op in MATRIX_PRODUCTS)
    return {
        "profiled_steps": runs,
        "nodes_ms_per_step": nodes_ms,
        "matrix_products_share": products_ms / nodes_ms,
        "ms_per_step_by_operator": dict(by_type.most_common()),
    }


def profile_setting(systems: dict, baseline, batches, setting: Setting) -> dict:
    """Runner, ORTModel and CTranslate2 (``systems``: name -> (run, system)) over each round's
    ``batches``, interleaved after one untimed round; the split of each of ours, CTranslate2's time
    per step of the runner, and the runner's node profile."""
    clocks = {name: OrtClock() for name in systems}

    def decode(name, run, system):
        def call(number):
            with clocks[name].counting():
                for batch in batches[number]:
                    run(system, batch, setting)

        return call

    functions = {name: decode(name, *pair) for name, pair in systems.items()}
    functions["CTranslate2"] = lambda number: [
        ctranslate2_translate(baseline, batch, setting) for batch in batches[number]
    ]
    for function in functions.values():
        function(0)  # warm-up (sessions' first runs, CTranslate2's loading), not counted
    clocks.update({name: OrtClock() for name in clocks})  # the warm-up's runs are not counted
    timings = interleaved(functions, rounds=len(batches), warmup=0, rotate=True)
    tokens = sum(batch.input_ids.shape[0] for per_round in batches for batch in per_round) * setting.new_tokens
    report = {name: split_time(timings[name].total_s, clocks[name], tokens) for name in systems}
    ctranslate2_s = timings["CTranslate2"].total_s
    report["CTranslate2"] = {
        "tokens_per_s": tokens / ctranslate2_s,
        "total_ms": 1e3 * ctranslate2_s / report["runner"]["steps"],
    }
    for name in systems:
        report[name]["over_ctranslate2"] = report[name]["tokens_per_s"] / report["CTranslate2"]["tokens_per_s"]
    report["runner"]["step_graph_profile"] = node_profile(systems["runner"][1], batches[0], setting)
    return report


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_shape_options(parser, SHAPE)
    parser.add_argument("--data-dir", type=Path, default=MULTI30K)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=32, help="sentences per round and setting")
    parser.add_argument("--new-tokens", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="1 round of 4 sentences, 8 tokens")
    add_cpu_options(parser)
    return parser


def main() -> None:
    args = parse_cpu_args(build_parser())
    if args.quick:
        args.rounds, args.sentences, args.new_tokens = 1, 4, 8
    tokenizer, sources = multi30k(args.data_dir, "de", "en", args.vocab)
    shape = dataclasses.replace(ModelShape.from_args(args), vocab=len(tokenizer))
    models = translation_models(shape, tokenizer)
    with tempfile.TemporaryDirectory(prefix="profile_serving_") as folder:
        report = profile_all(
            args,
            models,
            tokenizer,
            sources,
            convert_marian(models[SEQ2SEQ_BASELINE], tokenizer, Path(folder), tuple(SYSTEMS)),
        )
    write_report(report, args.out, f"profile_serving_cpu_{cpu_family()}.json")


def profile_all(args, models: dict, tokenizer, sources: list[str], converted: dict[str, Path]) -> dict:
    """`profile_setting` of every model, precision and setting: the report."""
    results = {}
    for decoding, (batch_size, beams) in SETTINGS.items():
        setting = Setting(decoding, batch_size, beams, 1, args.new_tokens)
        sentences = max(args.sentences, batch_size)
        batches = round_batches(tokenizer, sources, setting, rounds=args.rounds, sentences=sentences)
        for precision, (runner_system, model_system) in SYSTEMS.items():
            baseline = CTranslate2Model(converted[precision], precision, tokenizer)
            for name in MODELS:
                systems = {
                    "runner": (onnx_runtime_generate, runner_system(models[name])),
                    "ORTModel": (exported_model_generate, model_system(models[name])),
                }
                key = f"{name} {precision} {decoding}"
                results[key] = profile_setting(systems, baseline, batches, setting)
                print(key, {n: round(r.get("over_ctranslate2", 1.0), 3) for n, r in results[key].items()}, flush=True)
    return {"meta": run_metadata("cpu"), "args": vars(args), "results": results}


if __name__ == "__main__":
    main()
