"""examples/results/plot.py on synthetic run folders: curves, parameter counts, table and summary."""

import json
import subprocess
import sys

import pytest
from transformers import GPT2Config, GPT2LMHeadModel, MarianConfig

import talk_hf

from .conftest import EXAMPLES, load_script

# Tiny models of each kind whose run folders plot.py reads.
TINY = dict(vocab_size=40, d_model=16, decoder_layers=1, decoder_ffn_dim=32, decoder_conv_heads=2)
SEQ2SEQ = dict(
    TINY,
    encoder_layers=1,
    encoder_ffn_dim=32,
    encoder_conv_heads=2,
    decoder_attention_heads=2,
    decoder_start_token_id=2,
)
TALK = talk_hf.TaLKConfig(**SEQ2SEQ, encoder_max_offsets=[2], decoder_max_offsets=[2])
LIGHTCONV = talk_hf.DynamicConvConfig(
    **SEQ2SEQ, conv_type="light_conv", encoder_kernel_sizes=[3], decoder_kernel_sizes=[3]
)
SLICENET = talk_hf.SliceNetConfig(
    vocab_size=40,
    d_model=32,
    encoder_layers=1,
    decoder_layers=1,
    kernel_sizes=[3, 3, 3],
    dilations=[1, 1, 1],
    decoder_start_token_id=2,
)
GPT2 = GPT2Config(vocab_size=40, n_embd=8, n_layer=1, n_head=2, n_positions=16)
MARIAN = MarianConfig(
    vocab_size=40,
    d_model=8,
    encoder_layers=1,
    decoder_layers=1,
    encoder_attention_heads=2,
    decoder_attention_heads=2,
    encoder_ffn_dim=16,
    decoder_ffn_dim=16,
    max_position_embeddings=16,
    pad_token_id=1,
    decoder_start_token_id=2,
)
TALK_LM = talk_hf.TaLKLMConfig(**TINY, decoder_max_offsets=[2])


def parameters(model_class, config):
    """The parameter count of `model_class(config)`, tied weights once."""
    return sum(p.numel() for p in model_class(config).parameters())


def make_run(folder, config, records, test=None, environment=None):
    """A run folder as the training script leaves it, less the weights (plot.py needs only the config)."""
    config.save_pretrained(folder / "best")
    (folder / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if test is not None:
        (folder / "test_results.json").write_text(json.dumps(test))
    if environment is not None:
        (folder / "environment.json").write_text(json.dumps(environment))


def evaluations(metric, values):
    """Log records: one training step and one evaluation per minute, with `metric` taking `values`."""
    records = []
    for minute, value in enumerate(values, start=1):
        record = {"step": minute, "seconds": 60.0 * minute, "train_tokens": 180 * minute}
        records += [{**record, "loss": 5.0}, {**record, "valid_loss": 4.0, metric: value}]
    return records


def test_plot_writes_the_figure_summary_and_table(tmp_path):
    runs, output = tmp_path / "runs", tmp_path / "out"
    # Two seeds of TaLK (the second stopped an evaluation early), one of the others.
    make_run(
        runs / "multi30k-en-de-talk-s0",
        TALK,
        evaluations("bleu", [7.5, 12.0]),
        test={"split": "test_2016_flickr", "test_bleu": 13.0},
    )
    make_run(
        runs / "multi30k-en-de-talk-s1",
        TALK,
        evaluations("bleu", [6.5]),
        test={"split": "test_2016_flickr", "test_bleu": 11.0},
        environment={"cpu": "AMD EPYC", "cpu_capability": "AVX512", "cpu_caches": {"L2": "1024K"}},
    )
    make_run(runs / "multi30k-en-de-light_conv", LIGHTCONV, evaluations("bleu", [6.0]))
    # The baseline: seeds 0 and 2, so TaLK pairs with it on seed 0 only.
    make_run(
        runs / "multi30k-en-de-transformer-s0",
        MARIAN,
        evaluations("bleu", [8.0]),
        test={"split": "test_2016_flickr", "test_bleu": 10.5},
    )
    make_run(
        runs / "multi30k-en-de-transformer-s2",
        MARIAN,
        evaluations("bleu", [9.0]),
        test={"split": "test_2016_flickr", "test_bleu": 99.0},
    )
    make_run(runs / "multi30k-en-de-slicenet-s0", SLICENET, evaluations("bleu", [2.0]))
    make_run(
        runs / "wikitext2-transformer-s0",
        GPT2,
        evaluations("valid_ppl", [403.4, 390.0]),
        test={"split": "test", "test_ppl": 380.0},
    )
    make_run(runs / "wikitext2-long-talk-s0", TALK_LM, evaluations("valid_ppl", [665.1]))
    # A task named as another task plus a suffix with a dash of its own: placed by the whole name.
    make_run(runs / "wikitext2-long-lr2e-3-talk-s1", TALK_LM, evaluations("valid_ppl", [612.0]))
    (runs / "unfinished").mkdir()  # no log: ignored
    result = subprocess.run(
        [sys.executable, EXAMPLES / "results" / "plot.py", runs, output], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    summary = {(s["task"], s["model"]): s for s in json.loads((output / "summary.json").read_text())}
    assert list(summary) == [  # TASKS order, then models by name
        ("multi30k-en-de", "LightConv"),
        ("multi30k-en-de", "SliceNet"),
        ("multi30k-en-de", "TaLK"),
        ("multi30k-en-de", "Transformer"),
        ("wikitext2", "GPT-2"),
        ("wikitext2-long", "TaLK"),
        ("wikitext2-long-lr2e-3", "TaLK"),
    ]
    talk = summary["multi30k-en-de", "TaLK"]
    assert talk["seeds"] == [0, 1] and [r["curve"] for r in talk["runs"]] == [[[1.0, 7.5], [2.0, 12.0]], [[1.0, 6.5]]]
    assert [r.get("machine") for r in talk["runs"]] == [None, "AMD EPYC, AVX512, L2 1024K"]  # where recorded
    talk_parameters = parameters(talk_hf.TaLKForConditionalGeneration, TALK)
    assert talk["parameters"] == [talk_parameters, 0] and talk["steps"] == [1.5, pytest.approx(0.5**0.5)]
    assert talk["best_valid"] == [9.25, pytest.approx(2.75 * 2**0.5)]  # 12.0 and 6.5
    assert talk["test"] == [12.0, pytest.approx(2**0.5)] and talk["tokens_per_second"] == [3.0, 0.0]
    assert talk["paired_seeds"] == [0] and talk["test_vs_baseline"] == [2.5, 0.0]  # 13.0 - 10.5, seed 0 only
    assert "test_vs_baseline" not in summary["multi30k-en-de", "Transformer"]
    assert "test_vs_baseline" not in summary["multi30k-en-de", "LightConv"]  # no test metric
    assert "test_vs_baseline" not in summary["wikitext2-long", "TaLK"]  # no baseline in its task
    assert summary["wikitext2-long", "TaLK"]["seeds"] == [0]
    assert summary["wikitext2-long-lr2e-3", "TaLK"]["seeds"] == [1]
    assert summary["wikitext2-long-lr2e-3", "TaLK"]["best_valid"] == [612.0, 0.0]
    assert summary["multi30k-en-de", "SliceNet"]["parameters"] == [
        parameters(talk_hf.SliceNetForConditionalGeneration, SLICENET),
        0,
    ]
    assert (
        summary["multi30k-en-de", "LightConv"]["seeds"] == [0] and "test" not in summary["multi30k-en-de", "LightConv"]
    )
    gpt2 = summary["wikitext2", "GPT-2"]
    gpt2_parameters = parameters(GPT2LMHeadModel, GPT2)
    assert gpt2["parameters"] == [gpt2_parameters, 0] and gpt2["best_valid"] == [390.0, 0.0]  # lower is better
    table = (output / "summary.md").read_text()
    assert (
        f"| Multi30k En→De | TaLK | 2 | {talk_parameters / 1e6:.2f}M | 2 ± 1 | 3 ± 0 | BLEU 9.2 ± 3.9 "
        "| BLEU 12.0 ± 1.4 | +2.5 (1 seed) |"
    ) in table
    lightconv_parameters = parameters(talk_hf.DynamicConvForConditionalGeneration, LIGHTCONV)
    assert f"| Multi30k En→De | LightConv | 1 | {lightconv_parameters / 1e6:.2f}M | 1 | 3 | BLEU 6.0 | - | - |" in table
    assert (
        f"| WikiText-2 (word level) | GPT-2 | 1 | {gpt2_parameters / 1e6:.2f}M | 2 | 3 | ppl 390.0 | ppl 380.0 | - |"
        in table
    )
    assert "| WikiText-2, blocks of 2,048 | TaLK |" in table and table in result.stdout
    assert "| WikiText-2, blocks of 2,048, lr 2e-3 | TaLK | 1 |" in table
    assert (output / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_names_a_folder_it_cannot_place(tmp_path, monkeypatch):
    """Run by the script's ``main`` in this process (the test above runs it as a command): the message
    of its SystemExit is what Python prints to stderr, exiting 1."""
    make_run(tmp_path / "runs" / "multi30k-xx-talk-s0", TALK, evaluations("bleu", [1.0]))
    monkeypatch.setattr(sys, "argv", ["plot.py", str(tmp_path / "runs"), str(tmp_path / "out")])
    with pytest.raises(SystemExit) as exited:
        load_script("results/plot.py").main()
    assert "multi30k-xx-talk-s0 is not TASK-MODEL_TYPE[-sSEED]" in str(exited.value.code)
