"""A family registered with `talk_hf.register_family` trains with the scripts and benchmarks with no
edit of theirs: the toy family (tests/models/toy_family.py, registered when imported) proves it."""

import sys

from common import signals
from common.models import model_types
from transformers import AutoModelForSeq2SeqLM

from tests.models import toy_family

from .conftest import ROOT, TRANSLATION, load_script, read_log, requires_data

sys.path.insert(0, str(ROOT / "benchmarks"))

import _models  # noqa: E402
import bench_train  # noqa: E402


def test_the_scripts_offer_a_registered_family_under_its_name():
    assert "toy" in model_types(encoder_decoder=True) and "toy" in model_types(encoder_decoder=False)


@requires_data
def test_a_registered_family_trains_through_the_translation_script(tmp_path, monkeypatch):
    monkeypatch.setattr(signals, "stop_on_terminal_stop", lambda: None)  # leave pytest's signal handlers alone
    monkeypatch.setenv("TALK_HF_BACKEND", "torch")
    flags = ["--model_type", "toy", "--max_steps", "2", "--eval_every", "2", "--test_split", ""]
    load_script("translation/train.py").main([*TRANSLATION, *flags, "--output_dir", str(tmp_path)])
    steps, evaluations = read_log(tmp_path)
    assert [record["step"] for record in steps] == [1, 2] and [record["step"] for record in evaluations] == [2]
    model = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "best")
    assert isinstance(model, toy_family.ToyForConditionalGeneration)
    assert model.config.d_model == 32 and model.config.encoder_kernel_widths == [3]  # the flags, then the schedule


def test_the_benchmarks_list_and_train_a_registered_family():
    assert "ToyForCausalLM" in _models.causal_lm_models()
    assert "ToyForConditionalGeneration" in _models.seq2seq_models()
    args = bench_train.parse_args(
        "--d-model 16 --layers 2 --heads 2 --ffn 32 --vocab 50 --blocks 8 --tokens 16 --warmup 0 --steps 1".split()
    )
    assert {"ToyForCausalLM", "ToyForConditionalGeneration"} <= set(args.models)  # the default: every model
    model = bench_train.build_model("ToyForCausalLM", _models.ModelShape.from_args(args), 16)
    assert model.config.decoder_kernel_widths == [4, 8]  # reaching 3 and 7 tokens back, as the others' layers
    assert bench_train.measure_one("ToyForCausalLM", 8, 2, args)["status"] == "ok"
