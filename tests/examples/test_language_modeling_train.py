"""examples/language-modeling/train.py: evaluation in slices, the learning rate of the block size."""

from types import SimpleNamespace

import pytest
import torch
from accelerate import Accelerator

import talk_hf

from .conftest import load_script


def test_language_model_evaluation_in_slices_equals_whole_batches(monkeypatch):
    """The LM evaluation bounds its logits by running slices of each batch: same loss, more forwards."""
    script = load_script("language-modeling/train.py")
    config = talk_hf.TaLKLMConfig.from_preset("small", vocab_size=40, d_model=16, decoder_ffn_dim=32)
    model = talk_hf.TaLKForCausalLM(config).eval()
    forwards = []
    model.register_forward_hook(lambda module, inputs, output: forwards.append(inputs[0].shape[0]))
    blocks = list(torch.randint(3, 40, (10, 9), generator=torch.Generator().manual_seed(0)))
    args = SimpleNamespace(eval_batch_size=4)
    with torch.no_grad():
        whole = script.make_evaluate(Accelerator(cpu=True), blocks, args)(model)
        assert forwards == [4, 4, 2]
        forwards.clear()
        monkeypatch.setattr(script, "EVAL_LOGITS_ELEMENTS", 3 * 8 * 40)  # three rows of 8 tokens per slice
        sliced = script.make_evaluate(Accelerator(cpu=True), blocks, args)(model)
    assert forwards == [3, 1, 3, 1, 2]
    assert sliced["valid_loss"] == pytest.approx(whole["valid_loss"], rel=1e-6)


@pytest.mark.parametrize(
    ("flags", "lr"),
    [
        ([], 1e-3),  # blocks of 256: the rate searched there
        (["--block_size", "512"], 1e-3),
        (["--block_size", "724"], 1e-3),  # just nearer 256 than 2,048 on a log scale
        (["--block_size", "725"], 2e-3),
        (["--block_size", "2048"], 2e-3),  # the rate searched at blocks of 2,048
        (["--block_size", "16384"], 2e-3),
        (["--block_size", "2048", "--lr", "5e-4"], 5e-4),  # a given rate wins
    ],
)
def test_language_model_learning_rate_follows_the_block_size(tmp_path, flags, lr):
    """The LM script's default --lr is the searched rate of the nearer searched block size, resolved
    before the run starts so that args.json records the rate that ran."""
    script = load_script("language-modeling/train.py")
    args = script.parse_args(["--output_dir", str(tmp_path / "run"), "--max_tokens", "16384", *flags])
    assert args.lr == lr


def test_language_model_help_states_the_learning_rate_rule(capsys):
    with pytest.raises(SystemExit):
        load_script("language-modeling/train.py").parse_args(["--help"])
    assert "0.001 at 256, 0.002 at 2,048 tokens per block" in " ".join(capsys.readouterr().out.split())
