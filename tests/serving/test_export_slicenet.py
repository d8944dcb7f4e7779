"""`talk_hf.export` of SliceNet beyond the shared tests of test_export.py: the model's other options (the
paper's residuals and timing, regular and sub-separable convolutions, one-tap steps, a final LayerNorm,
untied and unshared embeddings) decode the tokens of ``model.generate``, greedy and beam.  Each option's
model has one encoder and one decoder layer (the two-layer model is test_export.py's): each layer more
is a larger graph to export, and no option depends on the number of layers.  A source of padding only
attends to nothing in the export as in eager (the shared export)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from talk_hf.export import OnnxGenerator, export_onnx

from ..models.helpers import PAD
from .exported import EXPORTED, NEW_TOKENS, inputs
from .test_export import BEAM_SETTINGS

pytest.importorskip("onnxruntime")

# The paper's variants (of the residuals, timing, norm and embeddings) and the regular convolutions are
# independent of each other: one model, one export, has both.
OPTIONS = {
    "paper-regular-convolutions": dict(
        module_residual="paper",
        attention_residual="paper",
        timing_num_timescales=None,
        final_layer_norm=True,
        tie_word_embeddings=False,
        share_encoder_decoder_embeddings=False,
        separability=1,
        io_mixer_separability=0,
    ),
    "sub-separable": dict(separability=2, io_mixer_separability=-4),
    # one-tap steps keep empty histories (B, 0, C)
    "one-tap-steps": dict(kernel_sizes=[1, 3, 3], attention_kernel_sizes=[1, 3], io_mixer_kernel_size=1),
}


@pytest.mark.slow  # an export per option
@pytest.mark.parametrize("options", OPTIONS)
def test_options_decode_the_tokens_of_generate(tmp_path, options):
    case = EXPORTED["slicenet"]
    model = case.model(encoder_layers=1, decoder_layers=1, **OPTIONS[options])
    export_onnx(model, tmp_path)
    generator = OnnxGenerator(tmp_path, threads=1)
    ids, mask = inputs(case)
    longer_than_every_window = dict(num_beams=1, max_new_tokens=3 * NEW_TOKENS, min_new_tokens=3 * NEW_TOKENS)
    for settings in [longer_than_every_window, *BEAM_SETTINGS]:
        with torch.no_grad():
            expected = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, **settings)
        tokens = generator.generate(ids.numpy(), mask.numpy(), **settings)
        np.testing.assert_array_equal(tokens, expected.numpy())


def test_a_source_of_padding_only_attends_to_nothing_as_in_eager(shared_exports):
    """Row 2's source is padding only.  The step graph reads the encoder output itself: given one that is
    not zero at padding (the encoder's own output is, where averaging and attending to nothing agree), its
    first logits are the eager decoder's, which attends to nothing there; and the tokens of greedy and beam
    search from the sources are generate's."""
    shared = shared_exports("slicenet")
    model, generator = shared.model(), OnnxGenerator(shared.folder, threads=1)
    ids, mask = shared.ids.clone(), shared.mask.clone()
    ids[2], mask[2] = PAD, 0
    assert generator.source_inputs == ["encoder_hidden_states", "encoder_attention_mask"]
    encoder_output = torch.randn(3, ids.shape[1], model.config.d_model, generator=torch.Generator().manual_seed(5))
    start = torch.full((3, 1), model.config.decoder_start_token_id)
    with torch.no_grad():
        expected = model(encoder_outputs=(encoder_output,), attention_mask=mask, decoder_input_ids=start).logits[:, 0]
    ones = np.ones((3, 1), dtype=np.int64)
    source = [encoder_output.numpy(), mask.numpy()]
    logits, _ = generator.step(start.numpy(), 0 * ones, ones, generator.new_states(3), source)
    np.testing.assert_allclose(logits, expected.numpy(), atol=1e-4, rtol=1e-4)
    for settings in [dict(max_new_tokens=NEW_TOKENS, num_beams=1), BEAM_SETTINGS[0]]:
        with torch.no_grad():
            tokens = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, **settings)
        np.testing.assert_array_equal(generator.generate(ids.numpy(), mask.numpy(), **settings), tokens.numpy())
