"""The Accelerate translation script end to end on tiny slices of shared/data: every model type trains,
evaluates, saves checkpoints that the Auto classes reload and generate with; on a visible GPU without
`accelerate launch`; bad flags fail with a clear message.  (The language-modeling script:
test_train_scripts_lm.py; exact resume and two processes: test_train_resume.py.)"""

import json

import pytest
import torch
from common.hub import hub_folder
from common.records import describe_package_source
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

import talk_hf  # noqa: F401  (registers our models with the Auto classes)

from .conftest import SLICENET_TRANSLATION, TRANSLATION, load_script, read_log, requires_data, run

pytestmark = [requires_data, pytest.mark.slow]  # subprocess runs of the scripts
TRANSLATION_MODEL_TYPES = ["talk", "dynamic_conv", "light_conv", "transformer", "slicenet"]


@pytest.mark.parametrize("model_type", TRANSLATION_MODEL_TYPES)
def test_translation_trains_evaluates_saves_and_reloads(tmp_path, model_type):
    report = model_type == "talk"  # the final test-set report (reload, BLEU, translations), once
    flags = ["--model_type", model_type, "--output_dir", tmp_path, *"--max_steps 2 --eval_every 2".split()]
    flags += ["--save_every", "1", "--test_split", "test" if report else ""]
    flags += ["--threads", "1"] if report else []
    if model_type in ("dynamic_conv", "light_conv"):  # bf16 autocast (CPU here), as GPU runs train
        flags += ["--mixed_precision", "bf16"]
    output = run("translation/train.py", *(SLICENET_TRANSLATION if model_type == "slicenet" else TRANSLATION), *flags)
    steps, evaluations = read_log(tmp_path)
    assert [r["step"] for r in steps] == [1, 2] and all(r["tokens"] > 0 for r in steps)
    assert [r["step"] for r in evaluations] == [2] and 0 <= evaluations[0]["bleu"] <= 100
    # The test line names the split as the data spells it: `--test_split test` finds test_2016_flickr.
    assert ("test (test_2016_flickr) with" in output and "->" in output) == report
    assert "Writing model shards" not in output  # no progress bar per save in the training log
    if report:
        test_results = json.loads((tmp_path / "test_results.json").read_text())
        assert test_results["split"] == "test_2016_flickr" and 0 <= test_results["test_bleu"] <= 100
        report_line = next(line for line in output.splitlines() if line.startswith("test (test_2016_flickr) with"))
        assert "test_loss" in report_line and "test_bleu" in report_line and "valid" not in report_line
    for checkpoint in ("best", "last"):
        model = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / checkpoint)
        assert model.config.model_type == (
            "marian" if model_type == "transformer" else model_type.replace("light_conv", "dynamic_conv")
        )
    assert json.loads((tmp_path / "last" / "training_state.json").read_text())["step"] == 2
    settings = json.loads((tmp_path / "args.json").read_text())  # given flags and defaults alike
    assert (
        settings["model_type"] == model_type
        and settings["max_steps"] == 2
        and settings["max_tokens"] > 0
        and settings["num_processes"] == 1
    )
    environment = json.loads((tmp_path / "environment.json").read_text())  # where it trained
    assert environment["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert environment["processes"] == 1 and environment["versions"]["torch"] == torch.__version__
    assert environment["device"].startswith("cuda" if torch.cuda.is_available() else "cpu")  # Accelerate picks
    if report:  # --threads 1
        assert environment["torch_threads"] == 1
    assert environment["talk_hf_source"] == describe_package_source()  # the code it ran
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "best")
    batch = tokenizer(["Ein Hund läuft."], return_tensors="pt")
    assert model.generate(**batch, max_new_tokens=5).shape[0] == 1
    # What --push_to_hub uploads: our models carry their code for trust_remote_code.
    hub_config = json.loads((hub_folder(tmp_path) / "config.json").read_text())
    assert ("auto_map" in hub_config) == (model_type != "transformer")


@pytest.mark.gpu
def test_the_plain_command_trains_on_a_visible_gpu(tmp_path):
    """Without `accelerate launch` the script trains on the GPU when one is visible (Accelerate picks
    it), and says so in environment.json."""
    flags = ["--model_type", "talk", "--output_dir", tmp_path, *"--max_steps 2 --eval_every 2".split()]
    run("translation/train.py", *TRANSLATION, *flags, "--test_split", "")
    environment = json.loads((tmp_path / "environment.json").read_text())
    assert environment["device"].startswith("cuda") and environment["gpus"]
    assert [r["step"] for r in read_log(tmp_path)[0]] == [1, 2]


@pytest.mark.parametrize(
    "script, flags, message",
    [
        ("translation/train.py", ["--data_dir", "/no/such/folder"], "--data_dir /no/such/folder is not a folder"),
        ("translation/train.py", ["--push_to_hub"], "--push_to_hub needs --hub_model_id"),
        ("translation/train.py", ["--label_smoothing", "1.5"], "--label_smoothing must be in"),
        ("language-modeling/train.py", ["--max_tokens", "64", "--block_size", "128"], "holds no block"),
        ("language-modeling/train.py", ["--gradient_accumulation_steps", "0"], "must be >= 1"),
        ("translation/train.py", ["--average_last", "1"], "--average_last must be 0 \\(off\\) or >= 2"),
    ],
)
def test_bad_flags_fail_with_a_clear_message(tmp_path, script, flags, message):
    with pytest.raises(SystemExit, match=message):
        load_script(script).parse_args(["--output_dir", str(tmp_path), *flags])
