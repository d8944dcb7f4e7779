"""bench_packing.py end to end at tiny sizes, for one of our causal LMs (each setting's memory probe is a
fresh process, a few seconds each): every setting of every corpus is timed and probed for memory, the padded batches hold the same real tokens as the packed ones, and the summary's
ratios are the ones its docstring defines."""

import argparse
import json
import sys

import bench_packing
import pytest
import torch

SETTINGS = ("padded", "padded, length-grouped", "packed")
MODEL = "TaLKForCausalLM"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """The script's report, its timing run by ``main`` in this process (an interpreter fewer: the memory
    probes it starts run the script as a command, with this command line); torch's thread count, which
    ``--threads`` sets, is restored for the tests that follow."""
    out = tmp_path_factory.mktemp("packing") / "packing.json"
    tiny = ["--d-model", "16", "--layers", "1", "--heads", "2", "--ffn", "32", "--vocab", "300"]
    command = ["bench_packing.py", *tiny, "--documents", "40", "--batch-documents", "8"]
    command += ["--steps", "1", "--rounds", "2", "--threads", "1", "--models", MODEL, "--out", str(out)]
    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "argv", command)
        try:
            bench_packing.main()
        finally:
            torch.set_num_threads(threads)
    return json.loads(out.read_text())


def test_every_setting_of_every_corpus_is_timed_and_probed(report):
    assert set(report["results"]) == {f"{corpus}/{MODEL}" for corpus in ("multi30k", "wikitext")}
    for measured in report["results"].values():
        for setting in SETTINGS:
            assert measured[setting]["real_tokens_per_second"] > 0
            assert measured[setting]["memory"]["peak"] >= measured[setting]["memory"]["resident_before"]
        assert measured["packed"]["padding_fraction"] == 0
        assert measured["packed"]["real_tokens"] == measured["padded"]["real_tokens"]  # the same batches
        assert measured["padded"]["padding_fraction"] > 0


def test_the_summary_ratios_are_packed_over_each_padded_setting(report):
    assert {key: set(ratios) for key, ratios in report["summary"].items()} == {
        key: {f"{kind}_over_{baseline}" for kind in ("speed", "memory") for baseline in SETTINGS[:2]}
        for key in report["results"]
    }
    for key, measured in report["results"].items():
        packed = measured["packed"]
        for baseline in SETTINGS[:2]:
            speed = packed["real_tokens_per_second"] / measured[baseline]["real_tokens_per_second"]
            assert packed[f"speed_over_{baseline}"] == pytest.approx(speed)
            assert report["summary"][key][f"speed_over_{baseline}"] == round(speed, 2)
            memory = packed["memory"]["added_by_training"] / measured[baseline]["memory"]["added_by_training"]
            assert packed[f"memory_over_{baseline}"] == pytest.approx(memory)
            assert report["summary"][key][f"memory_over_{baseline}"] == round(memory, 2)


def test_too_few_documents_for_the_timed_steps_are_refused_before_timing():
    args = argparse.Namespace(documents=6, max_length=512, vocab=300, batch_documents=2, rounds=2, steps=2)
    with pytest.raises(ValueError, match=r"multi30k: 6 documents make 3 batches .* time 4 batches .*raise --documents"):
        bench_packing.prepare("multi30k", args)
    args.steps = 1
    assert len(bench_packing.prepare("multi30k", args)["packed"]) == 3
