"""The Trainer scripts' silent wrongs, refused or fixed: an automatic resume of a checkpoint in `--output_dir`
is announced, and refused when its run started from another `--model_name_or_path`; evaluations during
training decode with `--num_beams` / `--max_target_length` as the final one does; a best-model metric that only
`--predict_with_generate` measures, `run_clm.py --do_predict` and a run with nothing to do stop at the start."""

import json
import shutil
from types import SimpleNamespace

import pytest
from common import hf_trainer
from common.data import load_columns

from .conftest import MULTI30K, load_script, requires_data, run
from .test_start_faults import trainer_script_error
from .test_trainer_scripts import tiny_checkpoint

CLM = "language-modeling/run_clm.py"
TRANSLATION = "translation/run_translation.py"


def fake_checkpoint(folder, step, started_from=None):
    """A `checkpoint-<step>` in `folder` as far as `resume_point` reads it: its trainer_state.json and, when
    `started_from` is given, the record of the model its run started from."""
    checkpoint = folder / f"checkpoint-{step}"
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    if started_from is not None:
        record = {"model_name_or_path": hf_trainer.model_source(str(started_from))}
        (checkpoint / hf_trainer.START_RECORD).write_text(json.dumps(record))
    return checkpoint


def test_run_clm_refuses_do_predict_by_name(tmp_path, monkeypatch):
    flags = ["--model_name_or_path", tmp_path / "absent", "--output_dir", tmp_path / "out", "--do_predict"]
    message = trainer_script_error(monkeypatch, CLM, *flags)
    assert message.startswith("error: --do_predict: run_clm.py has no test split")


@pytest.mark.parametrize(
    ("script", "options"), [(CLM, "--do_train, --do_eval"), (TRANSLATION, "--do_train, --do_eval, --do_predict")]
)
def test_a_run_with_nothing_to_do_is_refused(tmp_path, monkeypatch, script, options):
    flags = ["--model_name_or_path", tmp_path / "absent", "--output_dir", tmp_path / "out"]
    message = trainer_script_error(monkeypatch, script, *flags)
    assert message == f"error: nothing to do: give at least one of {options} (or --push_to_hub)"


@pytest.mark.parametrize("metric", ["bleu", "eval_gen_len"])
def test_a_generated_text_metric_without_predict_with_generate_is_refused_before_training(
    tmp_path, monkeypatch, metric
):
    flags = ["--model_name_or_path", tmp_path / "absent", "--output_dir", tmp_path / "out", "--do_train"]
    flags += ["--eval_strategy", "steps", "--load_best_model_at_end", "--metric_for_best_model", metric]
    message = trainer_script_error(monkeypatch, TRANSLATION, *flags)
    assert message.startswith(f"error: --metric_for_best_model {metric} needs --predict_with_generate")


def test_num_beams_and_max_target_length_set_every_evaluations_decoding():
    script = load_script(TRANSLATION)
    data_args = SimpleNamespace(num_beams=2, max_target_length=24)
    training_args = SimpleNamespace(generation_num_beams=None, generation_max_length=24)
    script.decode_like_data_args(data_args, training_args)
    assert (training_args.generation_num_beams, training_args.generation_max_length) == (2, 24)
    with pytest.raises(SystemExit, match="^error: --generation_num_beams 3 differs from --num_beams 2: give --num"):
        script.decode_like_data_args(data_args, SimpleNamespace(generation_num_beams=3, generation_max_length=None))


@pytest.mark.parametrize("explicit", [False, True])
def test_a_checkpoint_of_a_run_from_another_model_is_refused_before_loading_anything(tmp_path, monkeypatch, explicit):
    output = tmp_path / "out"
    checkpoint = fake_checkpoint(output, 3, started_from=tmp_path / "first")
    fake_checkpoint(output, 1, started_from=tmp_path / "absent")  # not the last: not the one resumed
    flags = ["--model_name_or_path", tmp_path / "absent", "--output_dir", output, "--do_train"]
    if explicit:
        flags += ["--resume_from_checkpoint", checkpoint]
    message = trainer_script_error(monkeypatch, CLM, *flags)
    assert message.startswith(f"error: --resume_from_checkpoint {checkpoint} continues" if explicit else "error: ")
    assert f"{checkpoint} {'' if explicit else '(the last checkpoint in --output_dir) '}continues a run" in message
    assert (
        f"started from --model_name_or_path {tmp_path / 'first'}, not from this run's {tmp_path / 'absent'}" in message
    )
    assert f"give --model_name_or_path {tmp_path / 'first'}" in message


def test_a_resume_names_the_checkpoint_its_step_and_how_to_start_afresh(tmp_path, capsys):
    output = tmp_path / "out"
    model = tmp_path / "model"
    model.mkdir()
    training_args = SimpleNamespace(resume_from_checkpoint=None, output_dir=str(output), process_index=0)
    model_args = SimpleNamespace(model_name_or_path=str(model))
    assert hf_trainer.resume_point(model_args, training_args) is None  # no folder yet: a fresh start
    checkpoint = fake_checkpoint(output, 4, started_from=model)
    assert hf_trainer.resume_point(model_args, training_args) == str(checkpoint)
    printed = capsys.readouterr().out
    assert printed.startswith(f"Checkpoint detected: resuming training at {checkpoint} (step 4, started from {model})")
    assert f"give another --output_dir or delete the checkpoint-* folders in {output}" in printed
    (checkpoint / hf_trainer.START_RECORD).unlink()  # made before the scripts recorded it: resumed, and said so
    assert hf_trainer.resume_point(model_args, training_args) == str(checkpoint)
    assert "(step 4, which does not record the model its run started from)" in capsys.readouterr().out


def test_resume_from_checkpoint_that_is_no_checkpoint_is_refused(tmp_path, monkeypatch):
    flags = ["--model_name_or_path", tmp_path / "absent", "--output_dir", tmp_path / "out", "--do_train"]
    message = trainer_script_error(monkeypatch, CLM, *flags, "--resume_from_checkpoint", tmp_path / "none")
    assert message.startswith(f"error: --resume_from_checkpoint {tmp_path / 'none'} is not a Trainer checkpoint")


@requires_data
@pytest.mark.slow  # a subprocess run of run_translation.py
def test_a_fine_tune_records_its_model_decodes_alike_throughout_and_writes_its_card(tmp_path, monkeypatch):
    """One step, evaluated during training and at the end with --num_beams 2 --max_target_length 40 (the
    untrained model generates to the limit): both evaluations agree. Its checkpoint records the model it started
    from, so a run from another folder into the same --output_dir is refused; the card is talk_hf's."""
    pairs = load_columns(MULTI30K, "train", ["de", "en"], limit=200)
    start = tiny_checkpoint(
        tmp_path / "start", "talk", pairs["de"] + pairs["en"], True, kind="bpe", vocab_size=300, add_eos=True
    )
    output = tmp_path / "out"
    flags = ["--model_name_or_path", start, "--data_dir", MULTI30K, "--output_dir", output]
    flags += "--do_train --do_eval --predict_with_generate --max_train_samples 16 --max_eval_samples 8".split()
    flags += "--per_device_train_batch_size 8 --per_device_eval_batch_size 8 --report_to none".split()
    run(
        TRANSLATION,
        *flags,
        *"--max_steps 1 --eval_strategy steps --eval_steps 1 --save_steps 1".split(),
        *"--num_beams 2 --max_target_length 40".split(),
    )
    during = [
        entry
        for entry in json.loads((output / "trainer_state.json").read_text())["log_history"]
        if "eval_bleu" in entry
    ]
    final = json.loads((output / "eval_results.json").read_text())
    assert len(during) == 1 and during[0]["eval_gen_len"] == final["eval_gen_len"] > 20
    assert during[0]["eval_bleu"] == final["eval_bleu"]
    assert "library_name: talk_hf" in (output / "README.md").read_text()
    other = shutil.copytree(start, tmp_path / "other")
    message = trainer_script_error(monkeypatch, TRANSLATION, *flags[:1], other, *flags[2:])
    assert f"continues a run that started from --model_name_or_path {start}, not from this run's {other}" in message
