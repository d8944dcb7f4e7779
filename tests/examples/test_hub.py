"""`--push_to_hub`: best/ uploaded with our modeling code."""

import json
from pathlib import Path
from types import SimpleNamespace

import huggingface_hub
from accelerate import Accelerator
from common import hub

import talk_hf


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
