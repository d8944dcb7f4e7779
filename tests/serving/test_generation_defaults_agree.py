"""An exported folder states its generation defaults twice: generation_config.json (what transformers and
`talk_hf.onnx`'s models read) and the manifest's ``generation`` field (what the torch-free runner reads), with the
SHA-256 of the first in the manifest.  The runner refuses a folder whose generation_config.json was edited since;
``save_pretrained`` and ``push_to_hub`` of a `talk_hf.onnx` model write its in-memory ``generation_config`` and
restate the manifest from it, so that one folder decodes one way.  The folders are copies of the session's shared
talk-lm export (`exported.SharedExports`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")

import huggingface_hub  # noqa: E402
from huggingface_hub import RepoUrl  # noqa: E402

from talk_hf.export import OnnxGenerator  # noqa: E402
from talk_hf.export.runner_checks import GENERATION_CONFIG_HASH, MANIFEST_NAME, check_manifest  # noqa: E402
from talk_hf.onnx import ORTModelForCausalLM  # noqa: E402

from ..models.helpers import VOCAB  # noqa: E402

EDITED = {"num_beams": 3, "max_new_tokens": 4, "no_repeat_ngram_size": 1}


@pytest.fixture(scope="module")
def lm_export(shared_exports):
    return shared_exports("talk-lm")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def runner_tokens(folder: Path, export) -> list:
    """The runner's tokens of ``export``'s inputs, decoded from ``folder`` with its manifest's defaults."""
    return OnnxGenerator(folder, threads=1).generate(export.ids.numpy(), export.mask.numpy()).tolist()


def model_tokens(model, export) -> list:
    """``model.generate``'s tokens of ``export``'s inputs, with its generation_config's defaults."""
    return model.generate(input_ids=export.ids, attention_mask=export.mask).tolist()


def edited_model(export) -> ORTModelForCausalLM:
    """The export's model with `EDITED` set on its in-memory generation_config."""
    model = ORTModelForCausalLM.from_pretrained(export.folder, threads=1)
    for name, value in EDITED.items():
        setattr(model.generation_config, name, value)
    return model


def test_an_edited_generation_config_json_is_refused_by_the_runner_and_honoured_by_ort_models(lm_export, tmp_path):
    folder = lm_export.copy(tmp_path / "edited")
    path = folder / "generation_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **EDITED}))
    with pytest.raises(ValueError, match=r"generation_config\.json was changed since the export .*save_pretrained"):
        OnnxGenerator(folder)
    model = ORTModelForCausalLM.from_pretrained(folder, threads=1)
    assert model_tokens(model, lm_export) == model_tokens(edited_model(lm_export), lm_export)
    unchecked = OnnxGenerator(folder, threads=1, check_generation_config=False)  # the sessions, as the model's
    with pytest.raises(ValueError, match=r"generation_config\.json was changed since the export"):
        unchecked.generate(lm_export.ids.numpy(), lm_export.mask.numpy())
    path.unlink()
    with pytest.raises(ValueError, match=r"generation_config\.json does not exist"):
        OnnxGenerator(folder)


def test_save_pretrained_writes_the_in_memory_generation_config(lm_export, tmp_path):
    model = edited_model(lm_export)
    edited = model_tokens(model, lm_export)
    assert edited != runner_tokens(lm_export.folder, lm_export)  # the edit changes the tokens
    model.save_pretrained(tmp_path / "saved")
    saved = json.loads((tmp_path / "saved" / "generation_config.json").read_text())
    assert {name: saved[name] for name in EDITED} == EDITED
    assert model_tokens(ORTModelForCausalLM.from_pretrained(tmp_path / "saved", threads=1), lm_export) == edited
    assert runner_tokens(tmp_path / "saved", lm_export) == edited


def test_save_pretrained_restates_an_in_memory_end_token(lm_export, tmp_path):
    """The end token is a special token of the manifest (the runner stops on it), not a generation setting: an
    in-memory edit of it is saved for the runner too."""
    model = ORTModelForCausalLM.from_pretrained(lm_export.folder, threads=1)
    first = model_tokens(model, lm_export)[2][lm_export.ids.shape[1]]  # row 2's first new token
    assert first != model.generation_config.eos_token_id  # (row 0 ends early on the export's own end token)
    model.generation_config.eos_token_id = first
    edited = model_tokens(model, lm_export)
    assert edited != model_tokens(ORTModelForCausalLM.from_pretrained(lm_export.folder, threads=1), lm_export)
    model.save_pretrained(tmp_path / "saved")
    assert json.loads((tmp_path / "saved" / MANIFEST_NAME).read_text())["special_tokens"]["eos_token_id"] == first
    assert runner_tokens(tmp_path / "saved", lm_export) == edited


def test_an_unedited_save_pretrained_gives_a_folder_the_runner_loads(lm_export, tmp_path):
    """Its generation_config.json written by save_pretrained and hashed anew: here the source's file is laid out
    otherwise (as another transformers may write it), so the saved bytes differ from the source's."""
    folder = lm_export.copy(tmp_path / "source")
    path, manifest_path = folder / "generation_config.json", folder / MANIFEST_NAME
    path.write_text(json.dumps(json.loads(path.read_text()), indent=4))
    manifest = {**json.loads(manifest_path.read_text()), GENERATION_CONFIG_HASH: sha256(path)}
    manifest_path.write_text(json.dumps(manifest))
    ORTModelForCausalLM.from_pretrained(folder, threads=1).save_pretrained(tmp_path / "saved")
    assert (tmp_path / "saved" / "generation_config.json").read_bytes() != path.read_bytes()
    manifest = json.loads((tmp_path / "saved" / MANIFEST_NAME).read_text())
    assert manifest[GENERATION_CONFIG_HASH] == sha256(tmp_path / "saved" / "generation_config.json")
    assert runner_tokens(tmp_path / "saved", lm_export) == runner_tokens(lm_export.folder, lm_export)


def test_save_pretrained_refuses_a_setting_the_runner_cannot_apply(lm_export, tmp_path):
    model = ORTModelForCausalLM.from_pretrained(lm_export.folder, threads=1)
    model.generation_config.forced_bos_token_id = VOCAB + 5
    with pytest.raises(ValueError, match=r"generation_config\.forced_bos_token_id must be a token id .*cannot apply"):
        model.save_pretrained(tmp_path / "saved")
    assert list((tmp_path / "saved").iterdir()) == []


def test_push_to_hub_uploads_the_in_memory_generation_config(lm_export, tmp_path, monkeypatch):
    """The uploaded files, laid out as a folder, decode as the edited model did, in the runner too."""
    uploaded = tmp_path / "uploaded"
    uploaded.mkdir()

    def create_commit(self, repo_id, operations, **kwargs):
        for operation in operations:
            data = operation.path_or_fileobj
            (uploaded / operation.path_in_repo).write_bytes(
                data if isinstance(data, bytes) else Path(data).read_bytes()
            )

    monkeypatch.setattr(
        huggingface_hub.HfApi, "create_repo", lambda self, repo_id, **_: RepoUrl(f"https://huggingface.co/{repo_id}")
    )
    monkeypatch.setattr(huggingface_hub.HfApi, "file_exists", lambda self, *args, **kwargs: False)
    monkeypatch.setattr(huggingface_hub.HfApi, "create_commit", create_commit)
    model = edited_model(lm_export)
    model.push_to_hub("user/tiny")
    assert runner_tokens(uploaded, lm_export) == model_tokens(model, lm_export)


@pytest.mark.parametrize("digest", ["abc", 5, None, "A" * 64, "g" * 64])
def test_the_manifest_check_refuses_a_malformed_generation_config_hash(lm_export, digest):
    path = lm_export.folder / MANIFEST_NAME
    manifest = {**json.loads(path.read_text()), GENERATION_CONFIG_HASH: digest}
    with pytest.raises(ValueError, match=rf"field {GENERATION_CONFIG_HASH} must be the SHA-256 of generation_config"):
        check_manifest(manifest, path)
