"""`--push_to_hub`: best/ uploaded with our modeling code and talk_hf's model card.

huggingface_hub's create_repo and upload_folder are replaced by stand-ins that record what they get: nothing
reaches a server."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import huggingface_hub
import pytest
import torch
from accelerate import Accelerator
from common import checkpoints, hub
from common.models import build_model
from common.tokenizer import train_tokenizer
from huggingface_hub import ModelCard

import talk_hf

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
        # The scripts record no task_specific_params, so an encoder-decoder's card names the generic task.
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
    snippets = re.findall(r"```python\n(.*?)```", card.text, flags=re.DOTALL)
    assert len(snippets) == 2 and "import talk_hf" in snippets[0] and "trust_remote_code=True" in snippets[1]
    folder = repr(str(tmp_path / "hub"))
    assert all(f'"{REPO_ID}"' in snippet for snippet in snippets)
    namespace = {}
    exec(snippets[0].replace(f'"{REPO_ID}"', folder), namespace)
    assert type(namespace["model"]).__module__.startswith("talk_hf.")
    assert_same_weights(namespace["model"].state_dict(), trained)
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
