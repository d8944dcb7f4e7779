"""The source mask that reaches an encoder-decoder's decoder with ``encoder_outputs``: one of another
length is refused (a (B, 1) mask broadcast over the source in the cross-attention), and every path of
generate hands the forward the whole (B, S) mask, chunked prefill included (transformers cuts
``attention_mask`` to the decoder prompt's chunks: `EncoderDecoderChunkedPrefillMixin`)."""

import pytest
import torch

from .helpers import BOS, CASES, random_tokens

SEQ2SEQ_CASES = [case for case in CASES if case.is_seq2seq]
TALK = SEQ2SEQ_CASES[0]
NEW_TOKENS = 6


def _padded_source(batch: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, 7) source ids and mask, the last row left-padded by 3."""
    source = random_tokens(batch, 7, seed=3)
    mask = torch.ones_like(source)
    mask[-1, :3] = 0
    return source, mask


@pytest.mark.parametrize("case", SEQ2SEQ_CASES, ids=[case.name for case in SEQ2SEQ_CASES])
@pytest.mark.parametrize("wrong_shape", [(2, 1), (2, 6), (1, 7)])
def test_a_source_mask_unlike_the_encoder_output_is_refused(case, wrong_shape):
    model = case.model()
    source, mask = _padded_source()
    target = random_tokens(2, 3, seed=4)
    encoder_outputs = model.get_encoder()(source, attention_mask=mask)
    with pytest.raises(ValueError, match=r"attention_mask \(the source's\) must have the shape .* \(2, 7\)"):
        model(encoder_outputs=encoder_outputs, attention_mask=torch.ones(wrong_shape), decoder_input_ids=target)
    expected = model(input_ids=source, attention_mask=mask, decoder_input_ids=target).logits
    found = model(encoder_outputs=encoder_outputs, attention_mask=mask, decoder_input_ids=target).logits
    torch.testing.assert_close(found, expected)


def _generate(model, source, mask, **settings) -> torch.Tensor:
    torch.manual_seed(7)  # the same draws for sampling
    return model.generate(input_ids=source, attention_mask=mask, max_new_tokens=NEW_TOKENS, **settings)


@pytest.mark.parametrize(
    "settings",
    [dict(), dict(num_beams=3), dict(do_sample=True, top_k=5)],
    ids=["greedy", "beam", "sampling"],
)
def test_a_chunked_prefill_keeps_the_source_mask(settings):
    model = TALK.model()
    source, mask = _padded_source()
    expected = _generate(model, source, mask, **settings)
    assert torch.equal(_generate(model, source, mask, prefill_chunk_size=1, **settings), expected)
    if not settings.get("do_sample"):  # the padded row as if alone: the mask reached the cross-attention
        assert torch.equal(_generate(model, source[-1:, 3:], None, **settings)[0], expected[-1])


def test_a_chunked_decoder_prompt_takes_its_own_mask_in_chunks():
    model = TALK.model()
    source, mask = _padded_source()
    prompt = dict(
        decoder_input_ids=torch.tensor([[2, 5, 6], [1, 2, 7]]),
        decoder_attention_mask=torch.tensor([[1, 1, 1], [0, 1, 1]]),
    )
    for beams in (1, 2):
        expected = _generate(model, source, mask, num_beams=beams, **prompt)
        assert torch.equal(_generate(model, source, mask, num_beams=beams, prefill_chunk_size=2, **prompt), expected)


@pytest.mark.parametrize("chunk", [None, 1], ids=["whole-prefill", "chunked-prefill"])
def test_assisted_and_prompt_lookup_decoding_keep_the_source_mask(chunk):
    """Batch 1 (transformers' limit for both).  The decoder starts from BOS, not EOS: transformers 5.17's
    prompt lookup stops at once on a decoder prompt that ends in EOS."""
    model = TALK.model(decoder_start_token_id=BOS)
    smaller = TALK.model(decoder_start_token_id=BOS, decoder_layers=1, decoder_max_offsets=[2])
    source, mask = _padded_source(batch=1)
    expected = _generate(model, source, mask)
    assert torch.equal(_generate(model, source[:, 3:], None), expected)
    for settings in (dict(assistant_model=smaller), dict(prompt_lookup_num_tokens=2)):
        assert torch.equal(_generate(model, source, mask, prefill_chunk_size=chunk, **settings), expected), settings
