"""``generate`` of the encoder-decoders hands each sentence's source to the decoder once for all its rows
(beams, returned sequences: `SourceOncePerSentenceMixin`), and decodes what it decoded with the source
repeated for every row (transformers' ``_expand_inputs_for_generation``, "the old way"); the cache holds
each source's cross-attention keys and values once and beam search reorders only the decoder's state
(`ConvEncoderDecoderCache`)."""

import inspect

import pytest
import torch
from transformers import CompileConfig, GenerationMixin
from transformers.modeling_outputs import BaseModelOutput

from .helpers import CASES, LIGHT_CONV_SEQ2SEQ, random_tokens, returned_cache

SEQ2SEQ = [*(case for case in CASES if case.is_seq2seq and not case.name.startswith("toy")), LIGHT_CONV_SEQ2SEQ]
SEQ2SEQ_IDS = [case.name for case in SEQ2SEQ]
SLICENET = next(case for case in SEQ2SEQ if case.name == "slicenet")
CACHING_SOURCE = [case for case in SEQ2SEQ if case is not SLICENET]  # SliceNet caches nothing of the source
SENTENCES, NEW_TOKENS = 3, 5
# Decoder prompts of two tokens (the start token first), for the chunked prefill.
PROMPT = torch.tensor([[2, 5], [2, 6], [2, 7]])
SETTINGS = {
    "beam": dict(num_beams=3),
    "beam-returning-2": dict(num_beams=3, num_return_sequences=2),
    "beam-sampling": dict(do_sample=True, num_beams=2),
    "sampling-3-per-row": dict(do_sample=True, top_k=5, num_return_sequences=3),
    "beam-chunked-prefill": dict(num_beams=2, prefill_chunk_size=1, decoder_input_ids=PROMPT),
}


def _source() -> tuple[torch.Tensor, torch.Tensor]:
    """(3, 7) source ids and mask, row 1 left-padded by 3 and row 2 right-padded by 2."""
    ids = random_tokens(SENTENCES, 7, seed=3)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    mask[2, 5:] = 0
    return ids, mask


def _rows_per_sentence(settings: dict) -> int:
    return max(settings.get("num_beams", 1), settings.get("num_return_sequences", 1))


def _generate(model, **settings):
    ids, mask = _source()
    torch.manual_seed(0)  # the same draws for sampling
    return model.generate(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=NEW_TOKENS,
        return_dict_in_generate=True,
        output_scores=True,
        **settings,
    )


def _repeating_the_source(model):
    """``model``, its generate repeating the encoder outputs and the source mask for every row as transformers
    does (``GenerationMixin._expand_inputs_for_generation``: a static method in 5.17, a method in 5.24)."""
    expand = inspect.getattr_static(GenerationMixin, "_expand_inputs_for_generation")
    model._expand_inputs_for_generation = expand.__get__(model, type(model))
    return model


def _spy_on_the_decoder(model, monkeypatch) -> list[tuple[int, int]]:
    """The (source rows, decoder rows) of every call of ``model``'s decoder, filled as it runs."""
    seen, forward = [], model.model.decoder.forward

    def recording_forward(input_ids=None, **kwargs):
        seen.append((kwargs["encoder_hidden_states"].shape[0], input_ids.shape[0]))
        return forward(input_ids, **kwargs)

    monkeypatch.setattr(model.model.decoder, "forward", recording_forward)
    return seen


def _assert_same_generation(found, expected) -> None:
    assert torch.equal(found.sequences, expected.sequences), (found.sequences, expected.sequences)
    for step_found, step_expected in zip(found.scores, expected.scores, strict=True):
        torch.testing.assert_close(step_found, step_expected, atol=1e-5, rtol=1e-5)
    if hasattr(expected, "sequences_scores"):  # beam search
        torch.testing.assert_close(found.sequences_scores, expected.sequences_scores, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("settings", SETTINGS.values(), ids=SETTINGS.keys())
@pytest.mark.parametrize("case", SEQ2SEQ, ids=SEQ2SEQ_IDS)
def test_each_source_is_read_once_for_its_rows_and_the_tokens_stay(case, settings, monkeypatch):
    model = case.model()
    seen = _spy_on_the_decoder(model, monkeypatch)
    found = _generate(model, **settings)
    rows = SENTENCES * _rows_per_sentence(settings)
    assert seen and set(seen) == {(SENTENCES, rows)}, seen
    cross = returned_cache(found).cross_attention_cache
    if case is not SLICENET:  # SliceNet's attention reads the encoder output itself: nothing cached
        assert {layer.keys.shape[0] for layer in cross.layers} == {SENTENCES}
    _assert_same_generation(found, _generate(_repeating_the_source(case.model()), **settings))


@pytest.mark.parametrize("case", [SEQ2SEQ[0], SLICENET], ids=lambda case: case.name)
def test_compiled_decoding_reads_each_source_once_and_keeps_the_tokens(case, monkeypatch):
    """``compile_config`` (sampling, two sequences per sentence; dynamo's eager backend: the captured graph
    runs the same kernels)."""
    settings = dict(do_sample=True, top_k=5, num_return_sequences=2)
    model = case.model()
    seen = _spy_on_the_decoder(model, monkeypatch)
    torch._dynamo.reset()
    found = _generate(model, compile_config=CompileConfig(fullgraph=True, dynamic=False, backend="eager"), **settings)
    assert seen and set(seen) == {(SENTENCES, SENTENCES * 2)}, seen
    _assert_same_generation(found, _generate(_repeating_the_source(case.model()), **settings))


@pytest.mark.parametrize("case", SEQ2SEQ, ids=SEQ2SEQ_IDS)
def test_returned_hidden_states_and_attentions_keep_transformers_shapes(case, monkeypatch):
    """With the source repeated, transformers repeats only the encoder's last state (its hidden states are a
    tuple): the encoder's hidden states come a row per sentence either way, the decoder's a row per beam."""
    settings = dict(num_beams=2, output_hidden_states=True, output_attentions=True)
    model = case.model()
    seen = _spy_on_the_decoder(model, monkeypatch)
    found, expected = _generate(model, **settings), _generate(_repeating_the_source(case.model()), **settings)
    assert seen and set(seen) == {(SENTENCES, SENTENCES * 2)}, seen
    _assert_same_generation(found, expected)
    assert found.encoder_hidden_states[0].shape[0] == SENTENCES
    for name in ("encoder_hidden_states", "decoder_hidden_states", "cross_attentions"):
        torch.testing.assert_close(getattr(found, name), getattr(expected, name), atol=1e-5, rtol=1e-5, msg=name)


@pytest.mark.parametrize("case", CACHING_SOURCE, ids=lambda case: case.name)
def test_cache_operations_on_sources_serving_several_rows(case):
    """A cache filled with a source per 2 decoder rows: reorder_cache gathers the decoder's state only (the
    source's keys and values stay where they are) and batch_repeat_interleave keeps every row on its
    source: the next step's logits equal those of the source repeated for every row; batch_select_indices
    refuses."""
    model, per_sentence = case.model(), 2
    ids, mask = _source()
    source = model.get_encoder()(ids, attention_mask=mask).last_hidden_state
    prompt = random_tokens(SENTENCES * per_sentence, 2, seed=5)
    step = random_tokens(SENTENCES * per_sentence * 2, 1, seed=6)
    beam_idx = torch.tensor([1, 0, 2, 3, 5, 4])  # within each sentence's block, as beam search's
    logits = []
    for repeats in (1, per_sentence):  # a source per sentence, then the old way: a source per row
        hidden, source_mask = source.repeat_interleave(repeats, dim=0), mask.repeat_interleave(repeats, dim=0)
        cache = returned_cache(
            model(
                encoder_outputs=BaseModelOutput(last_hidden_state=hidden),
                attention_mask=source_mask,
                decoder_input_ids=prompt,
                use_cache=True,
            )
        )
        keys = cache.cross_attention_cache.layers[0].keys
        cache.reorder_cache(beam_idx)
        if repeats == 1:
            assert cache.rows_per_source() == per_sentence
            assert cache.cross_attention_cache.layers[0].keys is keys
            with pytest.raises(ValueError, match="batch_select_indices cannot select rows .* one row per source"):
                cache.batch_select_indices(torch.tensor([0, 1]))
        cache.batch_repeat_interleave(2)
        step_outputs = model(
            encoder_outputs=BaseModelOutput(last_hidden_state=hidden.repeat_interleave(2, dim=0)),
            attention_mask=source_mask.repeat_interleave(2, dim=0),
            decoder_input_ids=step,
            cache=cache,
        )
        logits.append(step_outputs.logits)
    torch.testing.assert_close(logits[0], logits[1], atol=1e-5, rtol=1e-5)
