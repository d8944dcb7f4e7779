"""Config fields that let checkpoints of other layouts load (fairseq's): the position offset, a
pre-norm decoder without a final LayerNorm, and separate source and target vocabularies."""

import pytest
import torch

from talk_hf.cache import ConvCache

from .helpers import CASES, random_tokens, returned_cache

OUR_CASES = [case for case in CASES if hasattr(case.config_class, "position_offset")]
SEQ2SEQ_CASES = [case for case in OUR_CASES if case.is_seq2seq]


@pytest.mark.parametrize("case", OUR_CASES, ids=[case.name for case in OUR_CASES])
def test_position_offset_shifts_the_sinusoidal_positions(case):
    model = case.model(position_offset=2)
    decoder = model.model.decoder
    ids = random_tokens(2, 5)
    three_tokens_seen = ConvCache([1])
    three_tokens_seen.count_new_tokens(None, batch=2, length=3, device="cpu")
    embedded = decoder.embed(ids, None, None, three_tokens_seen)
    expected = decoder.embed_tokens(ids) * decoder.embed_scale + decoder.embed_positions(torch.arange(5, 10)[None])
    torch.testing.assert_close(embedded, expected)
    # and with padding, real tokens count from the offset: a left-padded row matches the unpadded one
    mask = torch.tensor([[0, 0, 1, 1, 1]] * 2)
    torch.testing.assert_close(decoder.embed(ids, None, mask)[:, 2:], decoder.embed(ids[:, 2:], None, None))


@pytest.mark.parametrize("case", OUR_CASES, ids=[case.name for case in OUR_CASES])
def test_position_offset_keeps_cached_decoding_exact(case):
    model = case.model(position_offset=2)
    tokens = random_tokens(2, 8, seed=4)
    source = {"input_ids": random_tokens(2, 7)} if case.is_seq2seq else {}
    key = "decoder_input_ids" if case.is_seq2seq else "input_ids"
    full = model(**source, **{key: tokens}, use_cache=False).logits
    prefix = model(**source, **{key: tokens[:, :5]}, use_cache=True)
    rest = model(**source, **{key: tokens[:, 5:]}, cache=returned_cache(prefix)).logits
    torch.testing.assert_close(torch.cat([prefix.logits, rest], 1), full, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(case.model(position_offset=0)(**source, **{key: tokens}).logits, full)


@pytest.mark.parametrize("case", OUR_CASES, ids=[case.name for case in OUR_CASES])
def test_pre_norm_decoder_without_final_layer_norm(case, tmp_path):
    model = case.model(decoder_normalize_before=True, decoder_final_layer_norm=False)
    assert model.model.decoder.final_layer_norm is None
    assert not any(name.startswith("model.decoder.final_layer_norm") for name in model.state_dict())
    if case.is_seq2seq:
        with_encoder_norm = case.model(
            encoder_normalize_before=True, decoder_normalize_before=True, decoder_final_layer_norm=False
        )
        assert with_encoder_norm.model.encoder.final_layer_norm is not None  # the field is the decoder's
    assert case.model(decoder_normalize_before=True).model.decoder.final_layer_norm is not None
    model.save_pretrained(tmp_path)
    assert case.head.from_pretrained(tmp_path).model.decoder.final_layer_norm is None


def _two_vocabularies(case, **overrides):
    return case.model(vocab_size=30, decoder_vocab_size=45, share_encoder_decoder_embeddings=False, **overrides)


@pytest.mark.parametrize("case", SEQ2SEQ_CASES, ids=[case.name for case in SEQ2SEQ_CASES])
def test_separate_source_and_target_vocabularies(case, tmp_path):
    model = _two_vocabularies(case)
    assert model.model.encoder.embed_tokens.num_embeddings == 30
    assert model.get_input_embeddings().num_embeddings == 45 and model.lm_head.weight.shape[0] == 45
    assert model.lm_head.weight is model.get_input_embeddings().weight  # tied to the target side
    source, target = random_tokens(2, 6) % 30, random_tokens(2, 5) + 5  # target ids up to 44
    logits = model(input_ids=source, decoder_input_ids=target).logits
    assert logits.shape[-1] == 45
    out_of_range = source.clone()
    out_of_range[0, 0] = 35  # a target token, not a source token
    with pytest.raises(ValueError, match="input_ids"):
        model(input_ids=out_of_range, decoder_input_ids=target)
    model.save_pretrained(tmp_path)
    loaded = case.head.from_pretrained(tmp_path)
    torch.testing.assert_close(loaded(input_ids=source, decoder_input_ids=target).logits, logits)
    generated = loaded.generate(input_ids=source, max_new_tokens=4, min_new_tokens=4, do_sample=False)
    assert generated.shape == (2, 5)


@pytest.mark.parametrize("case", SEQ2SEQ_CASES, ids=[case.name for case in SEQ2SEQ_CASES])
def test_resizing_separate_vocabularies_resizes_the_target_side(case, tmp_path):
    model = _two_vocabularies(case)
    head_class = type(model.lm_head)
    model.resize_token_embeddings(52)
    assert type(model.lm_head) is head_class  # tied to the target embeddings: resized through them
    assert (model.config.vocab_size, model.config.decoder_vocab_size) == (30, 52)
    assert model.model.encoder.embed_tokens.num_embeddings == 30 and model.lm_head.weight.shape[0] == 52
    model.save_pretrained(tmp_path)
    assert case.head.from_pretrained(tmp_path).lm_head.weight.shape[0] == 52


@pytest.mark.parametrize("case", SEQ2SEQ_CASES, ids=[case.name for case in SEQ2SEQ_CASES])
def test_shared_embeddings_need_one_vocabulary(case):
    with pytest.raises(ValueError, match="decoder_vocab_size=45 differs from vocab_size=30"):
        case.config(vocab_size=30, decoder_vocab_size=45)
    with pytest.raises(ValueError, match="decoder_start_token_id=40 must be < decoder_vocab_size=35"):
        case.config(
            vocab_size=45, decoder_vocab_size=35, share_encoder_decoder_embeddings=False, decoder_start_token_id=40
        )
    assert case.config().decoder_vocab_size == case.config().vocab_size
