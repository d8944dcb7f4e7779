"""bench_serving.py end to end at tiny sizes: every system translates every sentence of every setting
to the fixed length, the ratios are the ones its docstring defines, CTranslate2 float32 reproduces
transformers' greedy Marian tokens, and the LM section times every row at every position."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("ctranslate2")  # the serving extra

import bench_serving  # noqa: E402

from .conftest import BENCHMARKS

TINY = {
    "--d-model": 32,  # SliceNet's timing signal needs d >= 32
    "--layers": 1,
    "--heads": 2,
    "--ffn": 32,
    "--vocab": 300,
    "--new-tokens": 5,
    "--sentences": 3,
    "--rounds": 2,
    "--lm-d-model": 16,
    "--lm-layers": 1,
    "--lm-new-tokens": 4,
    "--lm-rounds": 1,
    "--threads": 1,
    "--compile-backend": "eager",  # dynamo's capture without inductor's code generation: seconds, not minutes
}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("serving") / "serving.json"
    options = [str(part) for option, value in TINY.items() for part in (option, value)]
    subprocess.run(
        [
            sys.executable,
            "bench_serving.py",
            *options,
            "--lm-positions",
            "4",
            "12",
            "--no-gpt2-compile",
            "--out",
            str(out),
        ],
        cwd=BENCHMARKS,
        check=True,
        capture_output=True,
    )
    return json.loads(out.read_text())


def test_every_system_translates_every_sentence_to_the_fixed_length(report):
    assert report["full_size"] is False and report["thread_counts"] == [1]
    assert list(report["results"]) == ["greedy-b1/1-thread", "beam5-b32/1-thread"]
    for per_row in report["results"].values():
        assert {"Marian (transformers)", "Marian (CTranslate2 float32)", "Marian (CTranslate2 int8)"} <= set(per_row)
        assert {"TaLKForConditionalGeneration", "DynamicConvForConditionalGeneration"} <= set(per_row)
        assert "SliceNetForConditionalGeneration" in per_row
        for name in ("TaLKForConditionalGeneration", "SliceNetForConditionalGeneration"):
            assert 0 <= per_row[f"{name} int8"]["same_tokens_as_reference"] <= 1  # against its float32 model
            assert report["systems"][f"{name} int8"]["precision"] == "int8"
        for measured in per_row.values():
            assert measured["sentences"] == 6 and measured["tokens"] == 6 * 5
            assert measured["all_outputs_full_length"]
            assert measured["tokens_per_s"] == pytest.approx(measured["tokens"] / measured["seconds"])
    assert report["cpu_threads"] >= 1 and "ctranslate2" in report["versions"]


def test_our_rows_record_both_ratios_from_the_same_run(report):
    for setting, per_row in report["summary"].items():
        results = report["results"][setting]
        for name, entry in per_row.items():
            assert entry["tokens_per_s"] == results[name]["tokens_per_s"]
            if report["systems"][name]["ours"]:
                ctranslate2 = f"Marian (CTranslate2 {report['systems'][name]['precision']})"
                assert entry["ours_over_ctranslate2"] == pytest.approx(
                    results[name]["tokens_per_s"] / results[ctranslate2]["tokens_per_s"]
                )
                assert entry["ours_over_transformers"] == pytest.approx(
                    results[name]["tokens_per_s"] / results["Marian (transformers)"]["tokens_per_s"]
                )
            else:
                assert "ours_over_ctranslate2" not in entry


def test_ctranslate2_float32_decodes_the_tokens_of_transformers_marian(report):
    assert report["ctranslate2_float32_greedy_tokens_equal"] is True
    assert report["ctranslate2_float32_same_tokens"]["greedy-b1/1-thread"] == 1.0
    greedy = report["results"]["greedy-b1/1-thread"]
    assert greedy["Marian (CTranslate2 float32)"]["reference"] == "Marian (transformers)"
    # The conversion keeps Marian's vocabulary and its start token (see _serving.CONVERTER_ASSUMPTIONS).
    assert report["ctranslate2"]["configs"]["float32"]["decoder_start_token"] == "</s>"


def test_the_lm_section_times_every_row_at_every_position(report):
    lm = report["lm"]
    assert set(lm["results"]["1-thread"]) == {"4", "12"}
    assert "GPT2 static cache + compile" in lm["failed"]  # --no-gpt2-compile says so
    for per_row in lm["summary"]["1-thread"].values():
        ours = {"TaLKForCausalLM", "DynamicConvForCausalLM"}
        assert set(per_row) == {*ours, *(f"{name} compiled" for name in ours), "GPT2 (baseline)"}
        assert per_row["TaLKForCausalLM"]["ours_over_gpt2_eager"] == pytest.approx(
            per_row["TaLKForCausalLM"]["tokens_per_s"] / per_row["GPT2 (baseline)"]["tokens_per_s"]
        )


def _lm_only(device: str, out: Path, monkeypatch) -> None:
    """bench_serving's LM section alone, run by its ``main`` in this process: the translation run of
    ``report`` already runs the script as a command, and a second interpreter would only add its imports.
    torch's thread count, which ``--threads`` sets, is restored for the tests that follow."""
    options = [str(part) for option, value in TINY.items() for part in (option, value)]
    argv = ["bench_serving.py", *options, "--device", device, "--no-translation"]
    monkeypatch.setattr(sys, "argv", argv + ["--lm-positions", "4", "--no-gpt2-compile", "--out", str(out)])
    threads = torch.get_num_threads()
    try:
        bench_serving.main()
    finally:
        torch.set_num_threads(threads)


def test_the_translation_section_refuses_a_gpu(tmp_path, monkeypatch, capsys):
    options = ["--device", "cuda", "--lm-d-model", "16", "--out", str(tmp_path / "never.json")]
    monkeypatch.setattr(sys, "argv", ["bench_serving.py", *options])
    with pytest.raises(SystemExit) as exited:
        bench_serving.main()
    assert exited.value.code == 2 and "--no-translation" in capsys.readouterr().err
    assert not (tmp_path / "never.json").exists()


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_the_lm_section_runs_alone_on_its_device(device, tmp_path, monkeypatch):
    _lm_only(device, tmp_path / "lm.json", monkeypatch)
    report = json.loads((tmp_path / "lm.json").read_text())
    assert report["device"] == device and "results" not in report and "translation" not in report["elapsed_s"]
    per_row = report["lm"]["summary"][f"{report['thread_counts'][0]}-thread"]["4"]
    assert {"TaLKForCausalLM compiled", "GPT2 (baseline)"} <= set(per_row)
    assert all(row["tokens_per_s"] > 0 for row in per_row.values())
