"""The language-model part of `bench_serving.py`: batch-1 greedy decoding steps of our causal LMs in
eager and compiled `generate` (``compile_config=CompileConfig(fullgraph=True)``) against GPT-2 of the same size in eager `generate` and in `generate` with a static
cache compiled by `torch.compile` (transformers' recipe: ``cache_implementation="static"`` and a
`CompileConfig`; on a CPU transformers compiles only when ``CompileConfig._compile_all_devices`` is set).

Each measurement runs `generate` on a random prompt of P tokens (the cache filled up to position P),
with a streamer that clocks every new token: the intervals after the first token are decoding steps
(forward, logits processing, the loop around them); the prefill is not counted.  Rounds visit every
(row, position) in turn.  A row is a function ``(model, prompt, new_tokens, clock)`` that generates.
On a GPU the clock waits for the device's queued work before it reads the time, and the compiled rows
run as CUDA graphs (`CompileConfig`'s default mode, ``reduce-overhead``).
"""

from __future__ import annotations

import functools

import torch
from _models import LM_BASELINE, ModelShape, build_model, causal_lm_models
from _timing import Laps, Stopwatch, Timing
from transformers import CompileConfig
from transformers.generation.streamers import BaseStreamer

GPT2_COMPILED = "GPT2 static cache + compile"


class StepClock(BaseStreamer):
    """A `generate` streamer keeping a `Stopwatch` reading at every `put`: the prompt's, then each new
    token's (once the device has finished its queued work)."""

    def __init__(self, stopwatch: Stopwatch):
        self.laps = Laps(stopwatch)

    def put(self, value):
        self.laps.mark()

    def end(self):
        pass

    def steps(self) -> tuple[list[float], list[float]]:
        """(wall, CPU) seconds of each decoding step after the first new token."""
        return self.laps.intervals(skip=1)


def eager_generate(model, prompt: torch.Tensor, new_tokens: int, clock: StepClock, **options) -> None:
    """Greedy `generate` of exactly ``new_tokens`` tokens (transformers' dynamic cache, or ours)."""
    model.generate(
        input_ids=prompt,
        attention_mask=torch.ones_like(prompt),
        do_sample=False,
        min_new_tokens=new_tokens,
        max_new_tokens=new_tokens,
        streamer=clock,
        **options,
    )


def gpt2_compile_config() -> CompileConfig:
    """transformers' default `CompileConfig` but one graph per cache length (``dynamic=False``: GPT-2's
    best case at each position; a dynamic graph made the short positions slower), on any device."""
    compile_config = CompileConfig(dynamic=False)
    compile_config._compile_all_devices = True  # transformers compiles on the CPU only when told to
    return compile_config


def static_compiled_generate(model, prompt: torch.Tensor, new_tokens: int, clock: StepClock) -> None:
    """`eager_generate` with transformers' static cache, its decoding step compiled by `generate`."""
    eager_generate(
        model, prompt, new_tokens, clock, cache_implementation="static", compile_config=gpt2_compile_config()
    )


def compiled_generate(model, prompt: torch.Tensor, new_tokens: int, clock: StepClock, backend: str) -> None:
    """`eager_generate` with our decoding step compiled: the one line of docs/serving.md."""
    eager_generate(model, prompt, new_tokens, clock, compile_config=CompileConfig(fullgraph=True, backend=backend))


def lm_rows(compile_backend: str = "inductor") -> dict:
    """row name -> (model name, function): ours eager and compiled (with ``compile_backend``), GPT-2
    eager, GPT-2 with a compiled static cache."""
    rows = {}
    for name in causal_lm_models():
        rows[name] = (name, eager_generate)
        if name != LM_BASELINE:
            compiled = functools.partial(compiled_generate, backend=compile_backend)
            compiled.__name__ = compiled_generate.__name__
            rows[f"{name} compiled"] = (name, compiled)
    rows[GPT2_COMPILED] = (LM_BASELINE, static_compiled_generate)
    return rows


def measure_lm(
    shape: ModelShape,
    *,
    positions,
    thread_counts,
    new_tokens: int,
    rounds: int,
    compile_gpt2: bool,
    compile_backend: str = "inductor",
    device: str = "cpu",
) -> dict:
    """Step times of every LM row at every position and thread count, the models on ``device``; the
    first `generate` of each (row, position) is a warm-up (it compiles the compiled rows: its time is
    ``warmup_s``)."""
    max_positions = max(positions) + new_tokens + 8
    models = {}
    for name in causal_lm_models():
        torch.manual_seed(0)
        models[name] = build_model(name, shape, max_positions, dropout=0.0).to(device).eval()
    rows = {name: row for name, row in lm_rows(compile_backend).items() if compile_gpt2 or name != GPT2_COMPILED}
    generator = torch.Generator().manual_seed(0)
    prompts = {
        position: torch.randint(3, shape.vocab, (1, position), generator=generator).to(device) for position in positions
    }
    report = {
        "rows": {name: {"model": model, "run": run.__name__} for name, (model, run) in rows.items()},
        # warmup_s of the compiled row includes building its graphs (inductor keeps an on-disk cache
        # in the temp directory, so a rerun builds faster)
        "gpt2_compile": {"cache_implementation": "static", "compile_config": gpt2_compile_config().to_dict()},
        "failed": {},
        "results": {},
    }
    if not compile_gpt2:
        report["failed"][GPT2_COMPILED] = "not measured (--no-gpt2-compile)"
    clocks, stopwatch = {}, Stopwatch(device)
    for threads in thread_counts:
        torch.set_num_threads(threads)
        for name, (model, run) in list(rows.items()):
            for position in positions:
                try:
                    _, seconds, _ = stopwatch.time(
                        run, models[model], prompts[position], new_tokens, StepClock(stopwatch)
                    )
                except Exception as error:  # a row that cannot run here (e.g. no compiler): said in the JSON
                    report["failed"][name] = f"{type(error).__name__}: {error}"
                    del rows[name]
                    break
                report["rows"][name].setdefault("warmup_s", {})[f"{position}/{threads}"] = seconds
    for _ in range(rounds):
        for threads in thread_counts:
            torch.set_num_threads(threads)
            for name, (model, run) in rows.items():
                for position in positions:
                    clock = clocks.setdefault((threads, position, name), [])
                    step_clock = StepClock(stopwatch)
                    run(models[model], prompts[position], new_tokens, step_clock)
                    clock.append(step_clock.steps())
    for (threads, position, name), measured in clocks.items():
        wall = tuple(step for steps, _ in measured for step in steps)
        steps = Timing(wall, cpu_s=tuple(step for _, steps in measured for step in steps), values=())
        report["results"].setdefault(f"{threads}-thread", {}).setdefault(str(position), {})[name] = {
            "tokens_per_s": 1 / steps.median_s,
            "step_s": steps.median_s,
            "step_min_s": steps.best_s,
            "step_cpu_s": steps.cpu_median_s,
            "steps": len(wall),
        }
    report["summary"] = summarise_lm(report["results"])
    return report


def summarise_lm(results: dict) -> dict:
    """Per thread count and position: each row's tokens/s; ours over GPT-2 eager and compiled."""
    summary = {}
    for threads, per_position in results.items():
        for position, per_row in per_position.items():
            rows = {}
            for name, measured in per_row.items():
                row = {"tokens_per_s": measured["tokens_per_s"]}
                if name not in (LM_BASELINE, GPT2_COMPILED):
                    for baseline, key in (
                        (LM_BASELINE, "ours_over_gpt2_eager"),
                        (GPT2_COMPILED, "ours_over_gpt2_compiled"),
                    ):
                        if baseline in per_row:
                            row[key] = measured["tokens_per_s"] / per_row[baseline]["tokens_per_s"]
                rows[name] = row
            summary.setdefault(threads, {})[position] = rows
    return summary
