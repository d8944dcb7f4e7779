"""Checkpoints saved by earlier talk_hf code load with identical weights and outputs, and save back
in the same layout.

``tests/fixtures/talk_hf_checkpoints/`` holds tiny models of every family and embedding layout
(shared or separate source/target embeddings, tied or untied LM head), saved by the code of
before the change of how tied weights are declared to transformers (see its README.md): a shared
embedding is saved once, as ``model.decoder.embed_tokens.weight``, a tied head not at all.  Each
folder's ``expected.safetensors`` holds the inputs, the logits, the names of the whole
``state_dict()`` and the tied tensors the checkpoint leaves out.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from talk_hf.models.families import family_of

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "talk_hf_checkpoints"
FOLDERS = sorted(path for path in FIXTURES.iterdir() if (path / "config.json").is_file())  # not __pycache__


def _expected(folder: Path) -> tuple[dict, torch.Tensor, dict[str, torch.Tensor]]:
    """(forward inputs, logits, the earlier model's whole state by name) of a fixture."""
    expected = load_file(folder / "expected.safetensors")
    with safe_open(folder / "expected.safetensors", "pt") as file:
        state_names = json.loads(file.metadata()["state_names"])
    saved = load_file(folder / "model.safetensors")
    left_out = {name.removeprefix("state."): tensor for name, tensor in expected.items() if name.startswith("state.")}
    state = {name: saved[name] if name in saved else left_out[name] for name in state_names}
    inputs = {name.removeprefix("input."): tensor for name, tensor in expected.items() if name.startswith("input.")}
    return inputs, expected["logits"], state


def _load(folder: Path):
    config = json.loads((folder / "config.json").read_text())
    head = family_of(config["model_type"])[2]
    model, info = head.from_pretrained(folder, output_loading_info=True)
    return model.eval(), info


def test_every_layout_has_a_fixture():
    assert [folder.name for folder in FOLDERS] == sorted(
        [
            "dynamic_conv_lm_untied",
            "dynamic_conv_seq2seq_shared",
            "dynamic_conv_seq2seq_shared_untied",
            "slicenet_shared",
            "talk_lm",
            "talk_seq2seq_separate_untied",
            "talk_seq2seq_shared",
        ]
    )


@pytest.mark.parametrize("folder", FOLDERS, ids=[folder.name for folder in FOLDERS])
def test_earlier_checkpoint_loads_with_identical_weights(folder):
    model, info = _load(folder)
    assert not any(info.values()), f"loading {folder.name} reported {info}"
    _, _, earlier_state = _expected(folder)
    state = model.state_dict()
    # Every tensor of the earlier model is there under its earlier name, bit for bit; a name added
    # since (the shared embedding's) holds a tensor that the earlier model held under another name.
    for name, tensor in earlier_state.items():
        assert torch.equal(state[name], tensor), name
    for name in state.keys() - earlier_state.keys():
        storage = state[name].untyped_storage().data_ptr()
        assert any(state[earlier].untyped_storage().data_ptr() == storage for earlier in earlier_state), (
            f"{name} is new and tied to no earlier tensor"
        )


@pytest.mark.parametrize("folder", FOLDERS, ids=[folder.name for folder in FOLDERS])
def test_earlier_checkpoint_gives_the_same_logits(folder):
    model, _ = _load(folder)
    inputs, logits, _ = _expected(folder)
    with torch.no_grad():
        # The same float32 function of the same weights: equal up to the summation order of this CPU.
        torch.testing.assert_close(model(**inputs).logits, logits)


@pytest.mark.parametrize("folder", FOLDERS, ids=[folder.name for folder in FOLDERS])
def test_earlier_checkpoint_saves_back_in_its_layout(folder, tmp_path):
    model, _ = _load(folder)
    model.save_pretrained(tmp_path)
    saved = load_file(tmp_path / "model.safetensors")
    earlier = load_file(folder / "model.safetensors")
    assert saved.keys() == earlier.keys()
    for name, tensor in earlier.items():
        assert torch.equal(saved[name], tensor), name


@pytest.mark.parametrize("folder", FOLDERS, ids=[folder.name for folder in FOLDERS])
def test_earlier_checkpoint_keeps_its_ties_after_loading(folder):
    model, _ = _load(folder)
    config = model.config
    embeddings = model.get_input_embeddings()
    assert (model.lm_head.weight is embeddings.weight) == config.tie_word_embeddings
    if getattr(config, "share_encoder_decoder_embeddings", False):
        assert model.model.encoder.embed_tokens.weight is embeddings.weight
