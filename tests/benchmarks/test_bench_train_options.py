"""bench_train.py's command line refuses timing settings that time nothing and devices that cannot run here,
before any model runs."""

import re

import bench_train
import pytest
import torch


@pytest.mark.parametrize(
    "flags, message",
    [(["--steps", "0"], r"--steps \(0\) must be at least 1"), (["--warmup", "-1"], r"--warmup \(-1\)")],
)
def test_no_timed_step_or_a_negative_warm_up_is_refused(flags, message, capsys):
    with pytest.raises(SystemExit):
        bench_train.parse_args(flags)
    assert re.search(message, capsys.readouterr().err)


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ["--sources", "400", "1024", "--targets", "64"],
            r"--targets \(\[64\]\) needs one target length per --sources",
        ),
        (
            ["--sources", "32768", "--targets", "64"],
            r"--source-tokens \(16384\) must be at least the longest source \(32768\)",
        ),
        (["--beams", "0"], r"--beams \(\[0\]\) must be at least 1"),
        (["--blocks", "8"], r"--blocks apply without --long-source only"),
        (["--models", "TaLKForCausalLM", "GPT2 (baseline)"], r"--models: unknown 'TaLKForCausalLM'"),
    ],
)
def test_long_source_lengths_that_do_not_pair_up_or_belong_to_the_other_rows_are_refused(flags, message, capsys):
    with pytest.raises(SystemExit):
        bench_train.parse_args(["--long-source", *flags])
    assert re.search(message, capsys.readouterr().err)


def test_long_source_options_without_long_source_are_refused(capsys):
    with pytest.raises(SystemExit):
        bench_train.parse_args(["--sources", "400", "--beams", "4"])
    assert "--sources, --beams apply with --long-source only" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("device", "shape"),
    [("cpu", (256, 7, 6, 4, 1024)), ("cuda", (512, 7, 6, 8, 2048))],  # cnn-dm's ratios at half its width; cnn-dm's
)
def test_each_mode_has_its_defaults_and_the_command_line_sets_the_rest(device, shape):
    args = bench_train.parse_args(["--long-source", "--device", device])
    assert (args.d_model, args.encoder_layers, args.layers, args.heads, args.ffn) == shape
    assert (args.sources, args.targets, args.source_tokens) == ([400, 1024, 4096, 16384], [64, 128, 256, 256], 16384)
    assert (args.generate_source, args.generate_new_tokens, args.beams) == (4096, 64, 4)
    assert "DynamicConvForConditionalGeneration (light_conv)" in args.models and args.blocks is None
    args = bench_train.parse_args(["--long-source", "--device", device, "--d-model", "64", "--encoder-layers", "2"])
    assert (args.d_model, args.encoder_layers, args.layers) == (64, 2, 6)
    short = bench_train.parse_args(["--device", device])
    assert (short.d_model, short.layers, short.encoder_layers, short.blocks) == (256, 4, None, [256, 1024, 4096, 16384])
    assert short.sources is None and "GPT2 (baseline)" in short.models


def test_a_long_source_child_gets_the_mode_the_shape_and_the_beams():
    args = bench_train.parse_args(["--long-source", "--encoder-layers", "3", "--threads", "1"])
    child = bench_train.child_arguments(args)
    assert child[0] == "--long-source" and "--source-length" not in child
    assert all(f"{flag} {value}" in " ".join(child) for flag, value in [("--encoder-layers", 3), ("--beams", 4)])
    assert bench_train.parse_args(child).encoder_layers == 3  # the child reads it back


@pytest.mark.parametrize(
    ("device", "cuda_built", "gpus", "message"),
    [
        ("cuda", False, 0, r"--device cuda: this torch \(.*\) is built without CUDA"),
        ("cuda", True, 0, r"--device cuda: no CUDA GPU is visible"),
        ("cuda:1", True, 1, r"--device cuda:1: GPU 1 is not visible \(1 visible, numbered from 0\)"),
        ("mps", False, 0, r"--device mps: the benchmarks run on cpu or cuda devices, not mps"),
    ],
)
def test_a_device_that_cannot_run_here_stops_the_run_before_any_model(device, cuda_built, gpus, message, monkeypatch):
    """Checked at the start (torch's raw AssertionError came from the first model's .to(device))."""
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: cuda_built)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(bench_train, "run_in_subprocess", pytest.fail)  # no model may be measured
    with pytest.raises(SystemExit, match=message + r".*; or pass --device cpu"):
        bench_train.main(["--device", device, "--blocks", "16", "--tokens", "32"])


def test_a_device_name_torch_cannot_read_is_refused(capsys):
    with pytest.raises(SystemExit):
        bench_train.parse_args(["--device", "gpu0"])
    assert "argument --device: 'gpu0' is no torch device name (cpu, cuda, cuda:1 ...)" in capsys.readouterr().err
