"""An int8 model (`talk_hf.quantize_int8`) refuses to be uploaded however ``push_to_hub`` is reached: bound,
unbound through transformers' ``PushToHubMixin.push_to_hub(model, repo)`` or ``PreTrainedModel.push_to_hub``
(which create the repository before they save, so the refusal comes at the save, naming push_to_hub), and
``save_pretrained(..., push_to_hub=True)``.  The Hub is never reached for an upload: its upload functions
fail the test, and its repository creation and model card are stand-ins.
"""

from __future__ import annotations

import huggingface_hub
import pytest
from huggingface_hub import RepoUrl
from transformers import PreTrainedModel
from transformers.utils.hub import PushToHubMixin

import talk_hf

from ..models.helpers import CASES

LM = CASES[1]
REFUSED = "was converted to int8 by talk_hf.quantize_int8"
UPLOADS = ("create_commit", "upload_file", "upload_folder", "create_branch", "preupload_lfs_files")


@pytest.fixture
def hub(monkeypatch) -> list[str]:
    """The Hub calls made: ``create_repo`` answers as for a new repository, the model card is not found
    (a new one is made from the template), and every upload fails the test."""
    reached = []

    def create_repo(self, repo_id, **kwargs):
        reached.append("create_repo")
        return RepoUrl(f"https://huggingface.co/{repo_id}")

    def no_card(*args, **kwargs):
        reached.append("model card")
        raise huggingface_hub.errors.EntryNotFoundError("no README.md")

    def upload(name: str):
        def uploading(*args, **kwargs):
            pytest.fail(f"HfApi.{name} was reached: the int8 model was uploaded")

        return uploading

    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", create_repo)
    monkeypatch.setattr(huggingface_hub.ModelCard, "load", no_card)
    for name in UPLOADS:
        monkeypatch.setattr(huggingface_hub.HfApi, name, upload(name))
    return reached


ROUTES = {
    "bound": lambda model, tmp_path: model.push_to_hub("user/tiny"),
    "PushToHubMixin-unbound": lambda model, tmp_path: PushToHubMixin.push_to_hub(model, "user/tiny"),
    "PreTrainedModel-unbound": lambda model, tmp_path: PreTrainedModel.push_to_hub(model, "user/tiny"),
}


@pytest.mark.parametrize("route", ROUTES)
def test_push_to_hub_is_refused_before_any_upload(hub, tmp_path, route):
    model = LM.model()
    talk_hf.quantize_int8(model)
    unbound = route != "bound"
    done = "nothing was uploaded .*creates the Hub repository" if unbound else "nothing was written or uploaded"
    with pytest.raises(RuntimeError, match=f"^push_to_hub: this TaLKForCausalLM {REFUSED}.*so {done}"):
        ROUTES[route](model, tmp_path)
    assert hub == (["create_repo", "model card"] if unbound else [])


def test_the_float_model_reaches_the_upload(hub):
    """What the stand-ins stop: the same calls of the floating-point model reach the upload."""
    with pytest.raises(pytest.fail.Exception, match="HfApi.create_commit was reached"):
        PushToHubMixin.push_to_hub(LM.model(), "user/tiny")


def test_save_pretrained_with_push_to_hub_writes_and_uploads_nothing(hub, tmp_path):
    model = LM.model()
    talk_hf.quantize_int8(model)
    with pytest.raises(RuntimeError, match=f"^save_pretrained: this TaLKForCausalLM {REFUSED}.*nothing was written"):
        model.save_pretrained(tmp_path / "int8", push_to_hub=True, repo_id="user/tiny")
    assert not (tmp_path / "int8").exists() and hub == []
