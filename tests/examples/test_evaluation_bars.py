"""Evaluations show a progress bar as training does (issue #57, item 8): the LM script's perplexity
and the translation script's loss and BLEU generation, on the main process only."""

from types import SimpleNamespace

import pytest
import torch
from accelerate import Accelerator
from common import records
from common.models import build_model
from common.tokenizer import train_tokenizer

import talk_hf

from .conftest import load_script
from .test_start_faults import PAIRS


def test_the_language_model_evaluation_shows_its_batches(capsys):
    config = talk_hf.TaLKLMConfig.from_preset("small", vocab_size=40, d_model=16, decoder_ffn_dim=32)
    model = talk_hf.TaLKForCausalLM(config).eval()
    blocks = list(torch.randint(3, 40, (10, 9), generator=torch.Generator().manual_seed(0)))
    evaluate = load_script("language-modeling/train.py").make_evaluate
    with torch.no_grad():
        evaluate(Accelerator(cpu=True), blocks, SimpleNamespace(eval_batch_size=4), "test")(model)
    err = capsys.readouterr().err
    assert "\rtest:   0%|" in err and "| 0/3 [" in err  # 10 blocks in batches of 4


def test_the_translation_evaluation_shows_its_batches_with_the_bleu_generation(capsys):
    tokenizer = train_tokenizer(PAIRS["de"] + PAIRS["en"], "bpe", vocab_size=60, add_eos=True)
    sizes = {"d_model": 16, "ffn_dim": 32, "heads": 2, "encoder_layers": 1, "decoder_layers": 1}
    model = build_model("talk", tokenizer, True, **sizes).eval()
    pairs = {"source": PAIRS["de"], "target": PAIRS["en"]}
    args = SimpleNamespace(eval_batch_size=4)
    evaluate = load_script("translation/train.py").make_evaluate
    with torch.no_grad():
        metrics = evaluate(Accelerator(cpu=True), tokenizer, pairs, model.config, args, num_beams=1)(model)
    assert "bleu" in metrics
    assert "\rvalidation (loss, BLEU):   0%|" in capsys.readouterr().err


@pytest.mark.parametrize("main", [True, False])
def test_the_bar_is_shown_on_the_main_process_only(capsys, main):
    accelerator = SimpleNamespace(is_main_process=main)
    assert list(records.evaluation_bar(accelerator, range(3), "validation")) == [0, 1, 2]
    assert ("\rvalidation:   0%|" in capsys.readouterr().err) == main
