"""The PyTorch models' ``push_to_hub`` and ``save_pretrained(..., push_to_hub=True)`` (transformers' own, through
``_upload_modified_files``) upload talk_hf's model card into a repository without a README.md: metadata
``library_name: talk_hf``, the tags ``talk_hf`` and the model type before transformers' (``model_tags``, then
``tags``), the pipeline tag, and how to load the checkpoint; a repository's own README.md is kept as transformers
tags it.  huggingface_hub's API is replaced by a recording stand-in: nothing reaches a server.
"""

from __future__ import annotations

import json
from pathlib import Path

import huggingface_hub
import pytest
from huggingface_hub import ModelCard, RepoUrl
from huggingface_hub.errors import EntryNotFoundError
from transformers import AutoModelForSeq2SeqLM
from transformers.dynamic_module_utils import get_class_from_dynamic_module

import talk_hf
from talk_hf.model_card import INSTALL, checkpoint_model_card

from .helpers import CASES, word_tokenizer

CASE = {case.name: case for case in CASES}
CHECKPOINT_FILES = ["README.md", "config.json", "generation_config.json", "model.safetensors"]
OWN_CARD = "---\nlicense: mit\ntags:\n- mine\n---\n\n# My model\n\nTrained by me.\n"


@pytest.fixture
def hub(monkeypatch) -> list[dict]:
    """What would be sent to the Hub: each create_repo, card download (``ModelCard.load`` of the repository, as
    transformers' ``create_and_tag_model_card`` reads it) and create_commit call (a commit's
    files by their names in the repository; ``card``: its README.md, ``config``: its config.json); the
    repository has no README.md unless a test appends ``{"readme": text}``; any other upload fails the test."""
    calls = []

    def readme() -> str | None:
        return next((call["readme"] for call in reversed(calls) if "readme" in call), None)

    def create_repo(self, repo_id, private=None, token=None, exist_ok=False, **kwargs):
        calls.append({"call": "create_repo", "repo_id": repo_id})
        return RepoUrl(f"https://huggingface.co/{repo_id}")

    def load_card(repo_id_or_path, token=None, **kwargs):
        calls.append({"call": "load_card", "repo_id": repo_id_or_path, "token": token})
        if readme() is None:
            raise EntryNotFoundError(f"{repo_id_or_path} has no README.md")
        return ModelCard(readme())

    def create_commit(self, repo_id, operations, **kwargs):
        files = {operation.path_in_repo: Path(operation.path_or_fileobj) for operation in operations}
        calls.append({"call": "create_commit", "repo_id": repo_id, "files": sorted(files)})
        calls[-1]["card"] = ModelCard(files["README.md"].read_text()) if "README.md" in files else None
        calls[-1]["config"] = json.loads(files["config.json"].read_text())
        return "commit"

    def refused(*args, **kwargs):
        pytest.fail("an upload other than create_commit was reached")

    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", create_repo)
    monkeypatch.setattr(huggingface_hub.HfApi, "create_commit", create_commit)
    monkeypatch.setattr(ModelCard, "load", load_card)
    for name in ("upload_folder", "upload_file", "preupload_lfs_files"):
        monkeypatch.setattr(huggingface_hub.HfApi, name, refused)
    return calls


def loading_lines(auto_class: str, remote_code: bool = False) -> str:
    """The line of the card that loads the model from "user/tiny"."""
    keywords = ", trust_remote_code=True" if remote_code else ""
    return f'model = {auto_class}.from_pretrained("user/tiny"{keywords})'


@pytest.mark.parametrize(
    "name, model_type, task, auto_class",
    [
        ("talk-seq2seq", "talk", "text2text-generation", "AutoModelForSeq2SeqLM"),
        ("dynamic-lm", "dynamic_conv_lm", "text-generation", "AutoModelForCausalLM"),
        ("slicenet", "slicenet", "text2text-generation", "AutoModelForSeq2SeqLM"),
    ],
)
def test_push_to_hub_uploads_talk_hfs_card_with_the_checkpoint(hub, name, model_type, task, auto_class):
    model = CASE[name].model()
    assert model.push_to_hub("user/tiny", tags=["x"], token="secret") == "commit"
    commit = hub[-1]
    assert [call["call"] for call in hub] == ["create_repo", "load_card", "load_card", "create_commit"]
    assert hub[2] == {"call": "load_card", "repo_id": "user/tiny", "token": "secret"}
    assert commit["files"] == CHECKPOINT_FILES
    card = commit["card"]
    assert card.data.to_dict() == {
        "library_name": "talk_hf",
        "pipeline_tag": task,
        "tags": ["talk_hf", model_type, "x"],
    }
    assert (
        f"import talk_hf  # registers talk_hf's model types with the Auto classes\nfrom transformers import {auto_class}\n"
        in card.text
    )
    assert INSTALL in card.text
    assert loading_lines(auto_class) in card.text and "trust_remote_code" not in card.text
    assert "{" not in card.text and "transformers model that has been pushed" not in card.text


def test_an_encoder_decoders_pipeline_tag_is_the_task_its_configuration_names(hub):
    """As the ONNX card's (`talk_hf.model_card.pipeline_tag`): read from the pushed config.json."""
    CASE["slicenet"].model(task_specific_params={"translation_en_to_de": {}}).push_to_hub("user/tiny")
    assert hub[-1]["card"].data.pipeline_tag == "translation"
    CASE["talk-lm"].model(task_specific_params={"summarization": {}}).push_to_hub("user/tiny")
    assert hub[-1]["card"].data.pipeline_tag == "text-generation"


def test_a_base_model_loads_with_automodel_and_has_no_pipeline_tag(hub):
    CASE["talk-seq2seq"].base(CASE["talk-seq2seq"].config()).push_to_hub("user/tiny")
    card = hub[-1]["card"]
    assert card.data.to_dict() == {"library_name": "talk_hf", "tags": ["talk_hf", "talk"]}
    assert loading_lines("AutoModel") in card.text and "A base model (talk) of talk_hf" in card.text


def test_tags_follow_the_models_own_as_transformers_merges_them(hub):
    """``model_tags`` (``add_model_tags``) then ``tags`` (a list or one string), each once, after the card's own."""
    model = CASE["talk-lm"].model()
    model.add_model_tags(["mine", "talk_hf"])
    model.push_to_hub("user/tiny", tags=["de-en", "mine", "wmt"])
    assert hub[-1]["card"].data.tags == ["talk_hf", "talk_lm", "mine", "de-en", "wmt"]
    CASE["talk-lm"].model().push_to_hub("user/tiny", tags="de-en")
    assert hub[-1]["card"].data.tags == ["talk_hf", "talk_lm", "de-en"]


def test_a_repos_own_card_is_kept_with_the_tags_appended(hub):
    hub.append({"readme": OWN_CARD})
    CASE["talk-seq2seq"].model().push_to_hub("user/tiny", tags=["wmt", "mine"])
    card = hub[-1]["card"]
    assert hub[-1]["files"] == CHECKPOINT_FILES
    assert card.data.to_dict() == {"license": "mit", "tags": ["mine", "wmt"]} and card.text == ModelCard(OWN_CARD).text


def test_save_pretrained_pushes_the_card_it_writes_into_the_folder(hub, tmp_path):
    CASE["dynamic-seq2seq"].model().save_pretrained(tmp_path / "tiny", push_to_hub=True, repo_id="user/tiny")
    card = hub[-1]["card"]
    assert hub[-1]["files"] == CHECKPOINT_FILES and str(card) == (tmp_path / "tiny" / "README.md").read_text()
    assert card.data.tags == ["talk_hf", "dynamic_conv"] and loading_lines("AutoModelForSeq2SeqLM") in card.text


def test_a_folder_exported_for_remote_code_is_loaded_with_trust_remote_code(hub, tmp_path):
    """A model of the remote code (as loaded without talk_hf) pushes the code with its checkpoint (transformers'
    ``save_pretrained``), and its card loads it both ways; so does a talk_hf model loaded from the exported
    folder, whose configuration keeps the ``auto_map`` (before, it pushed that ``auto_map`` without the code it
    names, and trust_remote_code loading of the repository failed)."""
    folder = tmp_path / "exported"
    CASE["talk-seq2seq"].model().save_pretrained(folder)
    talk_hf.export_for_remote_code(folder)
    remote_class = get_class_from_dynamic_module("modeling_talk.TaLKForConditionalGeneration", str(folder))
    remote_class.register_for_auto_class("AutoModelForSeq2SeqLM")
    remote_class.from_pretrained(folder).push_to_hub("user/tiny")
    card = hub[-1]["card"]
    assert {"modeling_talk.py", "configuration_talk.py", "model_card.py"} <= set(hub[-1]["files"])
    assert hub[-1]["config"]["auto_map"]["AutoModelForSeq2SeqLM"] == "modeling_talk.TaLKForConditionalGeneration"
    assert card.data.tags == ["talk_hf", "talk"] and loading_lines("AutoModelForSeq2SeqLM") in card.text
    assert loading_lines("AutoModelForSeq2SeqLM", remote_code=True) in card.text
    AutoModelForSeq2SeqLM.from_pretrained(folder).push_to_hub("user/tiny")
    assert hub[-1]["config"]["auto_map"]["AutoModelForSeq2SeqLM"] == "modeling_talk.TaLKForConditionalGeneration"
    assert {"modeling_talk.py", "configuration_talk.py"} <= set(hub[-1]["files"])
    assert loading_lines("AutoModelForSeq2SeqLM", remote_code=True) in hub[-1]["card"].text


def test_save_pretrained_pushing_an_exported_folder_exports_it_again_before_the_upload(hub, tmp_path):
    """transformers' save_pretrained wrote config.json without the auto_map, and uploaded it so, with the copies
    and a card that said nothing of remote code."""
    folder = tmp_path / "exported"
    CASE["talk-seq2seq"].model().save_pretrained(folder)
    auto_map = talk_hf.export_for_remote_code(folder)
    CASE["talk-seq2seq"].model().save_pretrained(folder, push_to_hub=True, repo_id="user/tiny")
    assert hub[-1]["config"]["auto_map"] == auto_map and "modeling_talk.py" in hub[-1]["files"]
    assert loading_lines("AutoModelForSeq2SeqLM", remote_code=True) in hub[-1]["card"].text


def test_the_card_loads_the_tokenizer_a_folder_holds_with_trust_remote_code_where_the_model_needs_it(tmp_path):
    """transformers' AutoTokenizer asks "Do you wish to run the custom code?" of a folder with an auto_map (its
    AutoConfig reads it), and the card passed trust_remote_code=True to the model only."""
    CASE["talk-lm"].model().save_pretrained(tmp_path)
    assert "AutoTokenizer" not in checkpoint_model_card("user/tiny", tmp_path, True, []).text
    word_tokenizer().save_pretrained(tmp_path)
    talk_hf.export_for_remote_code(tmp_path)
    text = checkpoint_model_card("user/tiny", tmp_path, True, []).text
    assert text.count("from transformers import AutoModelForCausalLM, AutoTokenizer\n") == 2
    assert 'tokenizer = AutoTokenizer.from_pretrained("user/tiny")\n' in text
    assert (
        loading_lines("AutoModelForCausalLM", remote_code=True)
        + '\ntokenizer = AutoTokenizer.from_pretrained("user/tiny", trust_remote_code=True)\n'
        in text
    )
