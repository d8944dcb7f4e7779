"""The shared command-line options: their help and defaults, the presets, the recipe's dropout."""

import re

import pytest
from common import options
from common.models import build_config

from .conftest import Vocabulary, load_script


@pytest.mark.parametrize("script", ["translation/train.py", "language-modeling/train.py"])
def test_help_shows_every_default_and_the_presets(script, capsys):
    module = load_script(script)
    with pytest.raises(SystemExit):
        module.parse_args(["--help"])
    text = capsys.readouterr().out
    options = text.split("\noptions:", 1)[1]
    blocks = re.split(r"\n  (?=-)", options)[1:]  # one block per option: its line and its help
    assert len(blocks) > 30
    for block in blocks:
        name = block.split()[0]
        if name not in ("-h,", "--output_dir"):  # --output_dir is required
            assert "(default" in " ".join(block.split()), block
    assert "--preset NAME" in text and "small" in text


@pytest.mark.parametrize(
    "flags, dropout",
    [
        ([], 0.0),  # the recipe's: --preset small trains without dropout
        (["--model_type", "transformer"], 0.0),  # the baseline too (it takes TaLK's sizes)
        (["--model_type", "light_conv"], 0.0),
        (["--dropout", "0.2"], 0.2),  # a given --dropout wins
        (["--preset", "iwslt14-de-en"], 0.3),  # the preset's own
        (["--model_type", "slicenet"], 0.5),  # SliceNet's `small` keeps its configuration's
    ],
)
def test_the_recipe_trains_the_small_preset_without_dropout(flags, dropout):
    args = load_script("translation/train.py").parse_args(["--output_dir", "x", *flags])
    tokenizer = Vocabulary(pad_token_id=1, bos_token_id=0, eos_token_id=2)
    config = build_config(args.model_type, tokenizer, True, args.preset, **options.model_sizes(args))
    assert getattr(config, "dropout", None) == dropout
    assert args.dropout == (dropout if "--dropout" in flags else None)  # args.json records what was given


def _help(script, capsys):
    with pytest.raises(SystemExit):
        load_script(script).parse_args(["--help"])
    return capsys.readouterr().out


def _option_help(text, name):
    """The help of option `name` in `--help` output, on one line."""
    block = re.split(r"\n  (?=-)", text.split("\noptions:", 1)[1])
    return " ".join(next(b for b in block if b.split() and b.split()[0].rstrip(",") == name).split())


@pytest.mark.parametrize("script", ["translation/train.py", "language-modeling/train.py"])
def test_help_says_what_the_defaults_mean(script, capsys):
    text = _help(script, capsys)
    assert "the run's folder" in _option_help(text, "--output_dir")
    mixed = _option_help(text, "--mixed_precision")
    assert "accelerate config" in mixed and "(default: None)" not in mixed
    threads = _option_help(text, "--threads")
    assert "torch.set_num_threads" in threads and "(default: on a CPU run, one per core that other" in threads


def test_the_help_describes_the_main_job_paced_by_minutes(capsys):
    text = _help("translation/train.py", capsys)
    description = " ".join(text.split("\noptions:", 1)[0].split())
    assert "--max_train_minutes 10 --eval_every_minutes 5" in description
    assert "after every 5 minutes" in description and "bentrevett/multi30k" in description


@pytest.mark.parametrize(
    "script, encoder_decoder", [("translation/train.py", True), ("language-modeling/train.py", False)]
)
def test_preset_offers_each_model_type_its_own_presets(script, encoder_decoder, capsys):
    preset = _option_help(_help(script, capsys), "--preset")
    talk = "talk, dynamic_conv, light_conv, transformer: "
    if encoder_decoder:
        assert talk + "cnn-dm, cnn-dm-deep, iwslt14-de-en, small, wmt-big;" in preset
        assert "slicenet: paper-section-3.1, small, t2t-slicenet_1," in preset
    else:
        assert talk + "small, wikitext-103" in preset and "slicenet" not in preset
    assert preset.endswith("(default: small)")  # after every model type, a registered family's too
    module = load_script(script)
    with pytest.raises(SystemExit, match="--preset t2t-slicenet_1 is not a preset of --model_type talk: give one of"):
        module.parse_args(["--output_dir", "x", "--preset", "t2t-slicenet_1"])
    if encoder_decoder:
        assert module.parse_args(["--output_dir", "x", "--model_type", "slicenet", "--preset", "t2t-slicenet_1tiny"])
        with pytest.raises(SystemExit, match="not a preset of --model_type slicenet"):
            module.parse_args(["--output_dir", "x", "--model_type", "slicenet", "--preset", "wmt-big"])
