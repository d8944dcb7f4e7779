"""An encoder-decoder with its own source and target vocabularies (``decoder_vocab_size``, as converted
fairseq translation models have): the export writes the source's size into the manifest
(``source_vocab_size``), and the runner checks the source's ids against it and the decoder's against the
target's.  Checked against the target's, a source id the model takes (here 30 to 39) was refused, and
with a source smaller than the target an id beyond the source reached ONNX Runtime's Gather.

One export of its own (a one-layer DynamicConv: the shared exports have one vocabulary).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import numpy as np
import pytest
import torch

from talk_hf.export import OnnxGenerator, export_onnx
from talk_hf.onnx import ORTModelForSeq2SeqLM

from ..models.helpers import CASES, VOCAB

pytest.importorskip("onnxruntime")

TARGET_VOCAB = 30
_DYNAMIC = next(case for case in CASES if case.name == "dynamic-seq2seq")
SEPARATE_VOCABULARIES = replace(
    _DYNAMIC,
    config_kwargs={
        **_DYNAMIC.config_kwargs,
        "encoder_layers": 1,
        "decoder_layers": 1,
        "encoder_kernel_sizes": [3],
        "decoder_kernel_sizes": [3],
        "share_encoder_decoder_embeddings": False,
        "tie_word_embeddings": False,
        "decoder_vocab_size": TARGET_VOCAB,
    },
)
# Row 0 holds source ids beyond the target vocabulary, row 1 is right-padded.
SOURCE = np.array([[5, 35, 7, 38, 39], [4, 31, 6, 1, 1]], np.int64)
SOURCE_MASK = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], np.int64)


@pytest.fixture(scope="module")
def separate(tmp_path_factory):
    """(the model, its exported folder)."""
    model = SEPARATE_VOCABULARIES.model()
    folder = tmp_path_factory.mktemp("separate-vocabularies") / "onnx"
    export_onnx(model, folder)
    return model, folder


def test_source_ids_beyond_the_target_vocabulary_decode_as_the_pytorch_models(separate):
    model, folder = separate
    manifest = json.loads((folder / "manifest.json").read_text())
    assert (manifest["source_vocab_size"], manifest["vocab_size"]) == (VOCAB, TARGET_VOCAB)
    source, mask = torch.from_numpy(SOURCE), torch.from_numpy(SOURCE_MASK)
    for settings in (dict(do_sample=False), dict(num_beams=2)):
        expected = model.generate(input_ids=source, attention_mask=mask, max_new_tokens=5, **settings)
        runner = OnnxGenerator(folder, threads=1).generate(SOURCE, SOURCE_MASK, max_new_tokens=5, **settings)
        np.testing.assert_array_equal(runner, expected.numpy())
        ort = ORTModelForSeq2SeqLM.from_pretrained(folder, threads=1)
        assert torch.equal(ort.generate(input_ids=source, attention_mask=mask, max_new_tokens=5, **settings), expected)


def test_each_side_is_checked_against_its_own_vocabulary(separate):
    generator = OnnxGenerator(separate[1], threads=1)
    with pytest.raises(
        ValueError, match=rf"^input_ids must hold token ids in \[0, {VOCAB}\), got values from 1 to 40$"
    ):
        generator.generate(SOURCE + SOURCE_MASK, SOURCE_MASK)
    with pytest.raises(ValueError, match=rf"^OnnxGenerator\.encode: input_ids must hold token ids in \[0, {VOCAB}\)"):
        generator.encode(SOURCE + SOURCE_MASK, SOURCE_MASK)
    ids = np.array([[2], [TARGET_VOCAB]], np.int64)
    arguments = (np.zeros_like(ids), np.ones_like(ids), generator.new_states(2), generator.encode(SOURCE, SOURCE_MASK))
    with pytest.raises(
        ValueError, match=rf"^OnnxGenerator\.step: ids \(input_ids\) must hold token ids in \[0, {TARGET_VOCAB}\)"
    ):
        generator.step(ids, *arguments)


def test_a_folder_without_the_field_checks_the_source_against_the_target_vocabulary(separate, tmp_path):
    """A folder exported before the field: its source ids are checked as they were, against ``vocab_size``."""
    folder = shutil.copytree(separate[1], tmp_path / "older")
    manifest = json.loads((folder / "manifest.json").read_text())
    del manifest["source_vocab_size"]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(
        ValueError,
        match=rf"^OnnxGenerator\.encode: input_ids must hold token ids in \[0, {TARGET_VOCAB}\), got values from 1 to 39$",
    ):
        OnnxGenerator(folder, threads=1).encode(SOURCE, SOURCE_MASK)
