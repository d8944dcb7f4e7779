"""A checkpoint that lacks the token embeddings says so on loading, whatever ties the model has.

transformers ties the LM head (and talk_hf the source embedding, by sharing one module) to the
target embeddings after loading; a weight missing from the checkpoint must still be reported
missing, not silently kept at its random initialisation (transformers' own common test
``test_model_weights_reload_no_missing_tied_weights`` checks the same with every weight missing).
"""

from __future__ import annotations

import pytest
from safetensors.torch import load_file, save_file

from .helpers import CASE_IDS, CASES

EMBEDDINGS = "model.decoder.embed_tokens.weight"


@pytest.mark.parametrize("tie_word_embeddings", [True, False], ids=["tied-head", "untied-head"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_missing_embeddings_are_reported(case, tie_word_embeddings, tmp_path):
    case.model(tie_word_embeddings=tie_word_embeddings).save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    del weights[EMBEDDINGS]
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    _, info = case.head.from_pretrained(tmp_path, output_loading_info=True)
    assert EMBEDDINGS in info["missing_keys"]
