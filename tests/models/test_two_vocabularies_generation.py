"""generate() of an encoder-decoder whose target vocabulary (``decoder_vocab_size``) differs from the
source's (``vocab_size``), as fairseq models with two dictionaries convert.

transformers sizes the scores of generated tokens by ``config.get_text_config().vocab_size``: beam
search's candidates before 5.24 (``RuntimeError: shape '[B, beams*vocab]' is invalid`` without the
configuration's target view), and ``compute_transition_scores`` in every 5.x release.  The reference
is the same model with a source vocabulary as large as the target's (the extra source rows unused),
for which both sizes agree."""

import pytest
import torch

from .helpers import CASES, random_tokens

SEQ2SEQ_CASES = [case for case in CASES if case.is_seq2seq and hasattr(case.config_class, "decoder_vocab_size")]
SOURCE_VOCAB, TARGET_VOCAB = 30, 45


def _model(case, source_vocab: int):
    return case.model(vocab_size=source_vocab, decoder_vocab_size=TARGET_VOCAB, share_encoder_decoder_embeddings=False)


def _one_size_twin(model, case):
    """The same weights in a model whose source vocabulary has the target's size: source rows past
    the original ones are random and never read."""
    twin = _model(case, TARGET_VOCAB)
    weights = model.state_dict()
    source_rows = weights["model.encoder.embed_tokens.weight"]
    extra_rows = twin.model.encoder.embed_tokens.weight[SOURCE_VOCAB:].detach()
    weights["model.encoder.embed_tokens.weight"] = torch.cat([source_rows, extra_rows])
    twin.load_state_dict(weights)
    return twin


@pytest.mark.parametrize("case", SEQ2SEQ_CASES, ids=[case.name for case in SEQ2SEQ_CASES])
def test_the_text_configuration_reads_the_target_vocabulary(case):
    config = _model(case, SOURCE_VOCAB).config
    assert config.get_text_config().vocab_size == TARGET_VOCAB
    assert config.get_text_config(decoder=True).vocab_size == TARGET_VOCAB
    assert config.get_text_config(encoder=True).vocab_size == SOURCE_VOCAB
    assert (config.vocab_size, config.decoder_vocab_size) == (SOURCE_VOCAB, TARGET_VOCAB)  # the view is a copy
    one_vocabulary = case.config()
    assert one_vocabulary.get_text_config() is one_vocabulary


@pytest.mark.parametrize("case", SEQ2SEQ_CASES, ids=[case.name for case in SEQ2SEQ_CASES])
def test_beam_search_equals_the_model_with_one_vocabulary_size(case):
    model = _model(case, SOURCE_VOCAB)
    twin = _one_size_twin(model, case)
    source = random_tokens(2, 7, seed=5) % SOURCE_VOCAB
    mask = torch.ones_like(source)
    mask[1, :2] = 0
    settings = dict(num_beams=3, num_return_sequences=3, max_new_tokens=6, do_sample=False)
    settings.update(return_dict_in_generate=True, output_scores=True)
    expected, found = (m.generate(input_ids=source, attention_mask=mask, **settings) for m in (twin, model))
    assert torch.equal(found.sequences, expected.sequences)
    torch.testing.assert_close(found.sequences_scores, expected.sequences_scores)
    assert all(step.shape[-1] == TARGET_VOCAB for step in found.scores)
    transitions = [
        m.compute_transition_scores(found.sequences, found.scores, found.beam_indices) for m in (twin, model)
    ]
    torch.testing.assert_close(transitions[1], transitions[0])
