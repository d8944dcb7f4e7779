"""bench_train.py --long-source: the long-source seq2seq rows at tiny sizes (every model's work run in
this process), their fields and ratio arithmetic, beam search's rows, the targets' verdicts, and a
worker that runs out of memory as a result."""

import json
import statistics

import _long_source
import _long_source_work
import bench_train
import pytest
import torch
from _models import SEQ2SEQ_BASELINE, ModelShape, seq2seq_model_variants

LONG_TINY = [
    "--long-source",
    "--d-model",
    "16",
    "--layers",
    "2",
    "--encoder-layers",
    "3",
    "--heads",
    "2",
    "--ffn",
    "32",
    "--vocab",
    "50",
    "--sources",
    "8",
    "16",
    "--targets",
    "4",
    "6",
    "--source-tokens",
    "32",
    "--generate-source",
    "16",
    "--generate-new-tokens",
    "3",
    "--beams",
    "2",
    "--warmup",
    "1",
    "--steps",
    "3",
    "--threads",
    "1",  # tiny operators: a second thread only waits for the first (and for other processes' load)
]

TRAINING_FIELDS = {
    "status": str,
    "step_s": float,
    "step_times_s": list,
    "step_cpu_s": float,
    "memory_before_bytes": int,
    "peak_memory_bytes": int,
    "training_memory_bytes": int,
    "parameters": int,
    "final_loss": float,
    "rows": int,
    "tokens_per_step": int,
    "tokens_per_s": float,
}
GENERATION_FIELDS = {
    "status": str,
    "generate_s": float,
    "generate_times_s": list,
    "encoder_s": float,
    "encoder_times_s": list,
    "new_tokens_per_s": float,
    "memory_before_bytes": int,
    "peak_memory_bytes": int,
    "parameters": int,
}


@pytest.fixture(autouse=True)
def torch_threads_kept():
    """`bench_train.main` sets torch's threads from --threads: the other tests get theirs back."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def works_in_this_process(monkeypatch) -> list[tuple]:
    """Every worker of the run is its `Work` in this process; returns the list the started workers'
    (model, task, source, target, rows) are recorded in.  Memory comes from a stand-in whose every
    reading is 1 MiB above the one before (in this shared process the real peak would be an earlier
    model's), so each model's peak lies above its memory before its first call, as in its own process."""
    started = []
    readings = iter(range(2**20, 2**40, 2**20))
    monkeypatch.setattr(_long_source_work, "memory_in_use", lambda device, peak: next(readings))

    def start(name, task, source_length, target_length, rows, args):
        started.append((name, task, source_length, target_length, rows))
        return _long_source_work.make_work(name, task, source_length, target_length, rows, args)

    monkeypatch.setattr(bench_train, "start_worker", start)
    return started


def test_the_long_source_report_holds_every_model_at_each_length_with_its_ratios(tmp_path, monkeypatch):
    """Each model's training steps at both source lengths and its beam search, the JSON's rows with
    their fields and types, the step's rows and tokens (source + target), and every ratio recomputed
    from the rows it divides."""
    started = works_in_this_process(monkeypatch)
    out = tmp_path / "long.json"
    bench_train.main([*LONG_TINY, "--out", str(out)])
    report = json.loads(out.read_text())

    # Every registered encoder-decoder type is measured: the built-in ones, and a family another test
    # of this process registered (the toy family of tests/models) when one did.
    models = seq2seq_model_variants()
    built_in = {
        "TaLKForConditionalGeneration",
        "DynamicConvForConditionalGeneration",
        "DynamicConvForConditionalGeneration (light_conv)",
        "Marian (baseline)",
    }
    assert built_in <= set(models) and models[-1] == "Marian (baseline)"
    assert started == [
        *((name, "train", 8, 4, 4) for name in models),  # 32 source tokens: 4 rows of 8
        *((name, "train", 16, 6, 2) for name in models),
        *((name, "generate", 16, 3, 1) for name in models),
    ]
    assert report["device"] == "cpu" and isinstance(report["device_name"], str) and report["cpu_threads"] >= 1
    assert isinstance(report["cpu_flags"], list) and report["versions"]["torch"]
    assert report["shape"] == {
        "d_model": 16,
        "layers": 2,
        "heads": 2,
        "ffn": 32,
        "vocab": 50,
        "encoder_layers": 3,
        "decoder_layers": 2,
    }
    assert report["steps"]["timed"] == 3 and report["generation_setting"]["beams"] == 2

    for length, rows, tokens in (("8", 4, 4 * (8 + 4)), ("16", 2, 2 * (16 + 6))):
        baseline = report["training_results"][SEQ2SEQ_BASELINE][length]
        for name in models:
            row = report["training_results"][name][length]
            assert {key: type(row.get(key)) for key in TRAINING_FIELDS} == TRAINING_FIELDS, (name, length)
            assert (row["rows"], row["tokens_per_step"], len(row["step_times_s"])) == (rows, tokens, 3)
            assert row["step_s"] == statistics.median(row["step_times_s"])
            assert row["tokens_per_s"] == pytest.approx(tokens / row["step_s"])
            assert row["training_memory_bytes"] == row["peak_memory_bytes"] - row["memory_before_bytes"] > 0
            ratios = report["training_summary"][name][length]
            assert ratios["tokens_per_s_over_baseline"] == pytest.approx(row["tokens_per_s"] / baseline["tokens_per_s"])
            assert ratios["peak_memory_over_baseline"] == pytest.approx(
                row["peak_memory_bytes"] / baseline["peak_memory_bytes"]
            )
            per_round = [
                theirs / mine for mine, theirs in zip(row["step_times_s"], baseline["step_times_s"], strict=True)
            ]
            assert ratios["per_round_tokens_per_s_over_baseline"] == pytest.approx(
                {"min": min(per_round), "median": statistics.median(per_round), "max": max(per_round)}
            )

    baseline = report["generation_results"][SEQ2SEQ_BASELINE]["16"]
    for name in models:
        row = report["generation_results"][name]["16"]
        assert {key: type(row.get(key)) for key in GENERATION_FIELDS} == GENERATION_FIELDS, name
        assert row["encoder_s"] < row["generate_s"]  # beam search includes its encoder pass
        assert row["new_tokens_per_s"] == pytest.approx(3 / row["generate_s"])
        speedups = report["generation_summary"][name]
        assert speedups["generate_speedup_over_baseline"] == pytest.approx(baseline["generate_s"] / row["generate_s"])
        assert speedups["encoder_speedup_over_baseline"] == pytest.approx(baseline["encoder_s"] / row["encoder_s"])

    # Neither 4,096 nor 16,384 source tokens ran: judged, not guessed.
    assert set(report["targets"]) == {"4096", "16384"}
    assert all(set(target["verdicts"].values()) == {"not measured"} for target in report["targets"].values())
    assert SEQ2SEQ_BASELINE not in report["targets"]["4096"]["verdicts"]


def test_every_long_source_model_has_the_shape_and_lightconv_is_lightconv():
    """The encoder deeper than the decoder in every model, the Transformer's too; LightConv is
    DynamicConv's head with its light convolution (weights shared across positions)."""
    args = bench_train.parse_args(LONG_TINY)
    configs = {name: bench_train.build_model(name, ModelShape.from_args(args), 32).config for name in args.models}
    assert {name: (config.encoder_layers, config.decoder_layers) for name, config in configs.items()} == dict.fromkeys(
        configs, (3, 2)
    )
    assert configs["DynamicConvForConditionalGeneration (light_conv)"].conv_type == "light_conv"
    assert configs["DynamicConvForConditionalGeneration"].conv_type == "dynamic_conv"
    assert len(configs["TaLKForConditionalGeneration"].encoder_max_offsets) == 3  # a reach per encoder layer


@pytest.mark.parametrize(
    ("speed", "memory", "verdict"),
    [(2.5, 0.5, "met"), (2.0, 0.6, "met"), (1.9, 0.5, "missed"), (3.0, 0.61, "missed"), (None, None, "not measured")],
)
def test_the_targets_need_both_the_speed_and_the_memory(speed, memory, verdict):
    ratios = {"tokens_per_s_over_baseline": speed, "peak_memory_over_baseline": memory}
    judged = _long_source.judge_targets({"TaLKForConditionalGeneration": {"4096": ratios}, SEQ2SEQ_BASELINE: {}})
    assert judged["4096"]["verdicts"] == {"TaLKForConditionalGeneration": verdict}
    assert judged["16384"]["verdicts"] == {"TaLKForConditionalGeneration": "not measured"}
    assert (
        judged["4096"]["least_tokens_per_s_over_baseline"],
        judged["16384"]["least_tokens_per_s_over_baseline"],
    ) == (
        2.0,
        4.0,
    )


class FakeWorker:
    """A worker whose calls answer fixed seconds, or out of memory from call ``dies_at`` on."""

    def __init__(self, seconds: float, dies_at: int | None = None):
        self.seconds, self.dies_at, self.calls, self.closed = seconds, dies_at, 0, False
        self.ready = {"memory_before_bytes": 100, "parameters": 7}

    def run(self) -> dict:
        self.calls += 1
        if self.dies_at is not None and self.calls >= self.dies_at:
            return {"status": "out of memory", "error": "killed (SIGKILL, out of memory)"}
        return {"wall_s": self.seconds, "cpu_s": self.seconds, "loss": 1.0}

    def finish(self) -> dict:
        return {"peak_memory_bytes": 1000}

    def close(self) -> None:
        self.closed = True


def test_a_model_that_runs_out_of_memory_is_a_row_and_the_others_are_measured(monkeypatch):
    """The Transformer's worker dies in its second timed round: its row says so, our model's row
    is complete, their ratios are None and the target is not judged; every worker is closed."""
    args = bench_train.parse_args([*LONG_TINY, "--models", "TaLKForConditionalGeneration", SEQ2SEQ_BASELINE])
    workers = {"TaLKForConditionalGeneration": FakeWorker(0.5), SEQ2SEQ_BASELINE: FakeWorker(2.0, dies_at=3)}
    measured = _long_source.measure("train", 4096, 256, 1, args, lambda name, *rest: workers[name])
    rows = {name: {"4096": _long_source.training_row(answer, 1, 4352)} for name, answer in measured.items()}

    assert rows[SEQ2SEQ_BASELINE]["4096"] == {
        "status": "out of memory",
        "error": "killed (SIGKILL, out of memory)",
        "rows": 1,
        "tokens_per_step": 4352,
    }
    ours = rows["TaLKForConditionalGeneration"]["4096"]
    assert ours["status"] == "ok" and ours["step_times_s"] == [0.5] * 3 and ours["tokens_per_s"] == 4352 / 0.5
    assert ours["training_memory_bytes"] == 900
    summary = _long_source.training_summary(rows)
    assert summary["TaLKForConditionalGeneration"]["4096"]["tokens_per_s_over_baseline"] is None
    assert summary["TaLKForConditionalGeneration"]["4096"]["per_round_tokens_per_s_over_baseline"] is None
    assert summary["TaLKForConditionalGeneration"]["4096"]["baseline_status"] == "out of memory"
    verdicts = _long_source.judge_targets(summary)["4096"]["verdicts"]
    assert verdicts == {"TaLKForConditionalGeneration": "not measured"}
    assert all(worker.closed for worker in workers.values())


def test_beam_search_that_stops_early_is_refused(monkeypatch):
    """Every model must write the same tokens, or their times do not compare."""
    args = bench_train.parse_args(LONG_TINY)
    work = _long_source_work.GenerationWork("TaLKForConditionalGeneration", 16, 3, 1, args)
    work.settings["min_new_tokens"] = work.settings["max_new_tokens"] = 2  # as if it had stopped at 2
    with pytest.raises(RuntimeError, match="TaLKForConditionalGeneration wrote 2 tokens, not 3"):
        work.run()


@pytest.mark.slow
def test_a_worker_process_trains_through_the_script(tmp_path):
    """bench_train's own worker command line (--serve): one model's training in a process of its own."""
    args = bench_train.parse_args(LONG_TINY)
    worker = bench_train.start_worker("TaLKForConditionalGeneration", "train", 8, 4, 4, args)
    try:
        ready, step, finish = worker.ready, worker.run(), worker.finish()
    finally:
        worker.close()
    assert ready["parameters"] > 0 and ready["memory_before_bytes"] > 0
    assert step["wall_s"] > 0 and step["loss"] > 0
    assert finish["peak_memory_bytes"] >= ready["memory_before_bytes"]
