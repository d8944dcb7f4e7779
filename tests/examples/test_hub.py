"""`--push_to_hub`: best/ uploaded with our modeling code and talk_hf's model card, whose pipeline tag is the task
that the scripts record in the model's configuration; the Trainer scripts' ``trainer.push_to_hub()`` uploads
talk_hf's card for our model types too, transformers' for its own.

huggingface_hub's create_repo and upload_folder (and HfApi's, which transformers' Trainer calls) are replaced by
stand-ins that record what they get: nothing reaches a server."""

import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace

import huggingface_hub
import pytest
import torch
from accelerate import Accelerator
from common import checkpoints, hub, signals
from common.models import build_model
from common.tokenizer import train_tokenizer
from huggingface_hub import HfApi, ModelCard, RepoUrl
from huggingface_hub.utils import filter_repo_objects
from safetensors.torch import load_file
from transformers import AutoConfig

import talk_hf
from talk_hf.model_card import checkpoint_model_card

from .conftest import TRANSLATION, WIKITEXT, load_script, requires_data
from .test_summarization import FILES, FLAGS

REPO_ID = "someone/talk-small"
# Runs a card's loading lines where `import talk_hf` fails, and saves the loaded model's weights.
CHILD = """
import sys
sys.modules["talk_hf"] = None  # any import of talk_hf raises ImportError
import torch
{snippet}
assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
torch.save(model.state_dict(), {weights})
"""
OWN_CARD = "---\nlicense: mit\n---\n\n# My run\n\nTrained by me.\n"
# What `whoami` answers for a token that may write: `check_upload` at the start of a script's run asks.
WRITER = {"name": "someone", "auth": {"accessToken": {"role": "write"}}}


@pytest.fixture
def uploads(monkeypatch) -> list[dict]:
    """What each upload_folder call sent: its repository and the uploaded folder's README.md (None: none)."""
    sent = []

    def upload_folder(repo_id, folder_path, **kwargs):
        card = Path(folder_path) / "README.md"
        sent.append({"repo_id": repo_id, "card": card.read_text(encoding="utf-8") if card.exists() else None})

    monkeypatch.setattr(huggingface_hub, "create_repo", lambda repo_id, **kwargs: None)
    monkeypatch.setattr(huggingface_hub, "upload_folder", upload_folder)
    return sent


@pytest.fixture
def trainer_uploads(monkeypatch, tmp_path) -> list[Path]:
    """The folders that transformers' Trainer uploads (``HfApi.upload_folder``), each copied as the Hub would
    receive it (without the files its ``ignore_patterns`` leave out) into ``tmp_path/uploaded/<n>``."""
    sent = []

    def create_repo(self, repo_id, **kwargs):
        return RepoUrl(f"https://huggingface.co/{repo_id}")

    def upload_folder(self, repo_id, folder_path, run_as_future=False, ignore_patterns=None, **kwargs):
        assert repo_id == REPO_ID
        folder, copy = Path(folder_path), tmp_path / "uploaded" / str(len(sent))
        files = [path.relative_to(folder).as_posix() for path in folder.rglob("*") if path.is_file()]
        for name in filter_repo_objects(files, ignore_patterns=ignore_patterns):
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(folder / name, copy / name)
        sent.append(copy)
        done = Future()  # the checkpoints' pushes run as futures, which the Trainer asks whether they are done
        done.set_result(None)
        return done if run_as_future else None

    monkeypatch.setattr(HfApi, "create_repo", create_repo)
    monkeypatch.setattr(HfApi, "upload_folder", upload_folder)
    return sent


def save_best(output_dir: Path, model_type: str, encoder_decoder: bool):
    """best/ as the training scripts write it (`build_model`, `checkpoints.save_model`): the model it holds."""
    tokenizer = train_tokenizer(["ein hund", "a dog"], kind="word", vocab_size=20, min_frequency=1)
    sizes = {"d_model": 16, "heads": 2, "decoder_layers": 1, **({"encoder_layers": 1} if encoder_decoder else {})}
    model = build_model(model_type, tokenizer, encoder_decoder, ffn_dim=32, **sizes)
    checkpoints.save_model(Accelerator(cpu=True), model, tokenizer, output_dir / "best", {"step": 1})
    return model


def assert_same_weights(loaded: dict, trained) -> None:
    assert loaded.keys() == trained.state_dict().keys()
    assert all(torch.equal(loaded[name], weight) for name, weight in trained.state_dict().items())


def in_this_process(main) -> None:
    """Call a script's ``main`` in this process, then restore torch's thread count, which the scripts set."""
    threads = torch.get_num_threads()
    try:
        main()
    finally:
        torch.set_num_threads(threads)


def python_snippets(card: ModelCard) -> list[str]:
    """The card's Python code blocks: its loading lines."""
    return re.findall(r"```python\n(.*?)```", card.text, flags=re.DOTALL)


def load_by_snippet(snippet: str, folder: Path):
    """The ``model`` that a card's loading lines load from ``folder`` in place of the repository."""
    namespace = {}
    exec(snippet.replace(f'"{REPO_ID}"', repr(str(folder))), namespace)
    return namespace["model"]


def push(output_dir: Path):
    hub.upload(Accelerator(cpu=True), SimpleNamespace(push_to_hub=True, hub_model_id=REPO_ID, output_dir=output_dir))


def test_push_to_hub_uploads_best_with_our_code(tmp_path, monkeypatch):
    """`--push_to_hub`: create the repository, then upload best/ with the modeling code and auto_map."""
    config = talk_hf.TaLKConfig.from_preset("small", vocab_size=40, d_model=16, encoder_ffn_dim=32, decoder_ffn_dim=32)
    talk_hf.TaLKForConditionalGeneration(config).save_pretrained(tmp_path / "best")
    calls = []
    monkeypatch.setattr(huggingface_hub, "create_repo", lambda repo_id, **kw: calls.append(("create", repo_id, kw)))

    def upload_folder(repo_id, folder_path, **kw):
        folder = Path(folder_path)
        calls.append(("upload", repo_id, json.loads((folder / "config.json").read_text())["auto_map"]))
        assert (folder / "model.safetensors").exists() and list(folder.glob("modeling_*.py"))

    monkeypatch.setattr(huggingface_hub, "upload_folder", upload_folder)
    args = SimpleNamespace(push_to_hub=True, hub_model_id="someone/talk-small", output_dir=str(tmp_path))
    hub.upload(Accelerator(cpu=True), args)
    assert [c[:2] for c in calls] == [("create", "someone/talk-small"), ("upload", "someone/talk-small")]
    assert calls[0][2] == {"exist_ok": True}
    assert calls[1][2]["AutoModelForSeq2SeqLM"].endswith("TaLKForConditionalGeneration")
    calls.clear()
    hub.upload(Accelerator(cpu=True), SimpleNamespace(**{**vars(args), "push_to_hub": False}))
    assert calls == []


@pytest.mark.parametrize(
    "model_type, encoder_decoder, tag, task",
    [
        # A checkpoint whose configuration names no task (one not trained by the scripts): the generic task.
        ("talk", True, "talk", "text2text-generation"),
        ("light_conv", False, "dynamic_conv_lm", "text-generation"),
    ],
)
def test_the_upload_carries_talk_hfs_card_whose_lines_load_the_folder(
    tmp_path, uploads, model_type, encoder_decoder, tag, task
):
    """The uploaded README.md is talk_hf's card (library, tags, the pipeline tag of the run's config.json), and
    each of its loading snippets, run against the uploaded folder, loads the trained weights: after
    ``import talk_hf`` by talk_hf's classes, with ``trust_remote_code=True`` by the code the folder holds."""
    trained = save_best(tmp_path, model_type, encoder_decoder)
    push(tmp_path)
    assert [upload["repo_id"] for upload in uploads] == [REPO_ID]
    card = ModelCard(uploads[0]["card"])
    assert card.data.to_dict() == {"library_name": "talk_hf", "pipeline_tag": task, "tags": ["talk_hf", tag]}
    snippets = python_snippets(card)
    assert len(snippets) == 2 and "import talk_hf" in snippets[0] and "trust_remote_code=True" in snippets[1]
    folder = repr(str(tmp_path / "hub"))
    assert all(f'"{REPO_ID}"' in snippet for snippet in snippets)
    model = load_by_snippet(snippets[0], tmp_path / "hub")
    assert type(model).__module__.startswith("talk_hf.")
    assert_same_weights(model.state_dict(), trained)
    # The remote-code lines, in a process where talk_hf cannot be imported: the folder's own code loads it.
    child = CHILD.format(snippet=snippets[1].replace(f'"{REPO_ID}"', folder), weights=repr(str(tmp_path / "w.pt")))
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    done = subprocess.run([sys.executable, "-c", child], env=environment, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert_same_weights(torch.load(tmp_path / "w.pt"), trained)


def test_a_card_that_best_holds_is_uploaded_untouched(tmp_path, uploads):
    save_best(tmp_path, "dynamic_conv", True)
    (tmp_path / "best" / "README.md").write_text(OWN_CARD, encoding="utf-8")
    push(tmp_path)
    assert uploads[0]["card"] == OWN_CARD and (tmp_path / "best" / "README.md").read_text() == OWN_CARD


def test_transformers_own_baseline_is_uploaded_without_a_card(tmp_path, uploads):
    """The Marian baseline: transformers' push asks the Hub before it writes its generic card; none is written."""
    save_best(tmp_path, "transformer", True)
    push(tmp_path)
    assert uploads == [{"repo_id": REPO_ID, "card": None}]


@pytest.mark.parametrize(
    "script, flags, task, tag",
    [
        pytest.param(
            "translation/train.py",
            [*TRANSLATION, "--test_split", ""],
            {"translation_de_to_en": {"num_beams": 2}},
            "translation",
            marks=requires_data,
        ),
        (
            "summarization/train.py",
            [*FILES, *FLAGS],
            {
                "summarization": {
                    "num_beams": 2,
                    "no_repeat_ngram_size": 3,
                    "min_new_tokens": 4,
                    "max_new_tokens": 24,
                    "length_penalty": 2.0,
                }
            },
            "summarization",
        ),
    ],
)
def test_a_script_names_its_task_in_the_checkpoint_and_on_the_card_of_its_upload(
    tmp_path, monkeypatch, uploads, script, flags, task, tag
):
    """A run of one step with `--push_to_hub` (`main` in this process): best/config.json's
    task_specific_params name the task with the test's decoding settings, and the uploaded card tags it."""
    monkeypatch.setattr(signals, "stop_on_terminal_stop", lambda: None)  # leave pytest's signal handlers alone
    monkeypatch.setenv("TALK_HF_BACKEND", "torch")
    monkeypatch.setattr(huggingface_hub, "is_offline_mode", lambda: False)
    monkeypatch.setattr(huggingface_hub, "whoami", lambda *args, **kwargs: WRITER)
    run = [*"--max_steps 1 --eval_every 1 --push_to_hub --hub_model_id".split(), REPO_ID, "--output_dir", tmp_path]
    in_this_process(lambda: load_script(script).main([*map(str, flags), *map(str, run)]))
    assert json.loads((tmp_path / "best" / "config.json").read_text())["task_specific_params"] == task
    assert [upload["repo_id"] for upload in uploads] == [REPO_ID]
    assert ModelCard(uploads[0]["card"]).data.pipeline_tag == tag


@requires_data
def test_run_translation_names_its_pair_in_place_of_the_tasks_of_the_checkpoint_it_tunes(tmp_path, monkeypatch):
    """run_translation.py (Seq2SeqTrainer, one step) tuning a checkpoint that names T5's tasks: the checkpoint it
    saves names the pair it was tuned for alone, so that the card of an upload of it says ``translation``."""
    save_best(tmp_path, "talk", True)
    start = tmp_path / "best"
    config = AutoConfig.from_pretrained(start)
    config.task_specific_params = {"summarization": {"num_beams": 4}, "translation_en_to_de": {"num_beams": 4}}
    config.save_pretrained(start)
    assert checkpoint_model_card(REPO_ID, start, True, []).data.pipeline_tag == "text2text-generation"
    output = tmp_path / "tuned"
    flags = ["--model_name_or_path", start, *TRANSLATION[:2], "--output_dir", output, "--do_train"]
    flags += "--max_steps 1 --max_train_samples 8 --per_device_train_batch_size 8 --report_to none".split()
    monkeypatch.setattr(sys, "argv", ["run_translation.py", *map(str, flags)])
    in_this_process(load_script("translation/run_translation.py").main)
    tasks = json.loads((output / "config.json").read_text())["task_specific_params"]
    assert tasks == {"translation_de_to_en": {"max_length": 128, "num_beams": 4}}
    assert checkpoint_model_card(REPO_ID, output, True, []).data.pipeline_tag == "translation"


def run_trainer_script(tmp_path, monkeypatch, script: str, model_type: str, flags: list) -> Path:
    """``examples/<script>`` (run_translation.py or run_clm.py: transformers' Trainer) in this process, one
    optimizer step and an evaluation, tuning a tiny `save_best` ``model_type`` with ``--push_to_hub``: its
    output_dir, which its pushes upload."""
    save_best(tmp_path, model_type, script.startswith("translation/"))
    output = tmp_path / "tuned"
    flags = ["--model_name_or_path", tmp_path / "best", *flags, "--output_dir", output, "--do_train", "--do_eval"]
    flags += "--max_steps 1 --per_device_train_batch_size 4 --report_to none --push_to_hub --hub_model_id".split()
    monkeypatch.setattr(sys, "argv", [script, *map(str, flags), REPO_ID])
    in_this_process(load_script(script).main)
    return output


TRAINER_SCRIPTS = {
    "translation/run_translation.py": [*TRANSLATION[:2], *"--max_train_samples 8 --max_eval_samples 4".split()],
    "language-modeling/run_clm.py": ["--data_dir", WIKITEXT, *"--max_train_samples 40 --max_eval_samples 20".split()],
}


@requires_data
@pytest.mark.parametrize(
    "script, model_type, tag, task",
    [
        ("translation/run_translation.py", "talk", "talk", "translation"),
        ("language-modeling/run_clm.py", "light_conv", "dynamic_conv_lm", "text-generation"),
    ],
)
def test_a_trainer_scripts_push_uploads_talk_hfs_card_whose_lines_load_the_folder(
    tmp_path, monkeypatch, trainer_uploads, script, model_type, tag, task
):
    """``trainer.push_to_hub()`` of a run of our model: every uploaded README.md is talk_hf's card (library, the
    talk_hf and model-type tags before the Trainer's, the pipeline tag of the task the run records), keeping the
    Trainer's model-index, last evaluation and training procedure but not its placeholders; its one loading snippet
    (no modeling code is uploaded, so no ``trust_remote_code`` line) loads the uploaded weights by talk_hf's class."""
    output = run_trainer_script(tmp_path, monkeypatch, script, model_type, TRAINER_SCRIPTS[script])
    cards = [
        ModelCard((folder / "README.md").read_text()) for folder in trainer_uploads if (folder / "README.md").exists()
    ]
    assert len(cards) == 2  # train_and_save's save_model pushes, then the script's push_to_hub
    for card in cards:
        assert card.data.to_dict() == {
            "library_name": "talk_hf",
            "pipeline_tag": task,
            "tags": ["talk_hf", tag, "generated_from_trainer"],
            "model-index": [{"name": REPO_ID.split("/")[1], "results": []}],
        }
    eval_loss = json.loads((output / "eval_results.json").read_text())["eval_loss"]
    text = cards[-1].text
    assert f"## Evaluation results\n\nThe Trainer's last evaluation:\n- Loss: {eval_loss:.4f}\n" in text
    assert "### Training hyperparameters" in text and "More information needed" not in text
    assert "trust_remote_code" not in text and not list(trainer_uploads[-1].glob("*.py"))
    [snippet] = python_snippets(cards[-1])
    model = load_by_snippet(snippet, trainer_uploads[-1])
    assert type(model).__module__.startswith("talk_hf.") and model.config.model_type == tag
    uploaded = load_file(trainer_uploads[-1] / "model.safetensors")
    assert all(torch.equal(model.state_dict()[name], weight) for name, weight in uploaded.items())


@requires_data
def test_a_trainer_scripts_push_of_transformers_own_model_keeps_transformers_card(
    tmp_path, monkeypatch, trainer_uploads
):
    """run_clm.py tuning the GPT-2 baseline: its push uploads transformers' Trainer card unchanged."""
    run_trainer_script(
        tmp_path,
        monkeypatch,
        "language-modeling/run_clm.py",
        "transformer",
        TRAINER_SCRIPTS["language-modeling/run_clm.py"],
    )
    card = ModelCard((trainer_uploads[-1] / "README.md").read_text())
    assert card.data.library_name == "transformers" and card.data.tags == ["generated_from_trainer"]
    assert card.data.pipeline_tag is None and "import talk_hf" not in card.text
    assert "More information needed" in card.text  # transformers' body, placeholders and all
