"""Generation with the fixed-size ConvCache: equivalence with full recomputation, beam reordering,
left padding, continuation, and a state that does not grow."""

import pytest
import torch
import transformers
from packaging.version import Version
from transformers import GenerationConfig

from talk_hf import ConvCache, ConvHistoryLayer

from .helpers import CACHE_NAME, CASE_IDS, CASES, PAD, generation_prompt, random_tokens, returned_cache

MODES = {
    "greedy": dict(do_sample=False, num_beams=1),
    "sample": dict(do_sample=True, num_beams=1, top_k=0),
    "beam": dict(do_sample=False, num_beams=3, num_return_sequences=2),
    "beam_sample": dict(do_sample=True, num_beams=3, top_k=0),
}


def _generate(model, inputs, seed=0, **kwargs):
    torch.manual_seed(seed)
    settings = dict(
        max_new_tokens=8, min_new_tokens=8, return_dict_in_generate=True, output_scores=True, pad_token_id=PAD
    )
    return model.generate(**inputs, **{**settings, **kwargs})


def _assert_same_generation(output, expected):
    """The same tokens, and the same scores (-inf where the expected scores are -inf) at every step."""
    assert torch.equal(output.sequences, expected.sequences)
    for step, expected_step in zip(output.scores, expected.scores, strict=True):
        finite = torch.isfinite(expected_step)
        assert torch.equal(finite, torch.isfinite(step))
        torch.testing.assert_close(step[finite], expected_step[finite], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_cached_forward_equals_full_forward(case):
    """Prefill on a prefix, then one token at a time, gives the logits of one full forward."""
    model = case.model()
    tokens = random_tokens(2, 9, seed=4)
    source = {"input_ids": random_tokens(2, 7)} if case.is_seq2seq else {}
    key = "decoder_input_ids" if case.is_seq2seq else "input_ids"
    full = model(**source, **{key: tokens}, use_cache=False).logits
    outputs = model(**source, **{key: tokens[:, :4]}, use_cache=True)
    steps = [outputs.logits]
    for position in range(4, 9):
        extra = {"encoder_outputs": (outputs.encoder_last_hidden_state,)} if case.is_seq2seq else {}
        outputs = model(
            **source,
            **extra,
            **{key: tokens[:, position : position + 1]},
            cache=returned_cache(outputs),
            use_cache=True,
        )
        steps.append(outputs.logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", MODES, ids=list(MODES))
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_generate_is_identical_with_and_without_cache(case, mode):
    model = case.model()
    inputs = generation_prompt(case)
    cached = _generate(model, inputs, use_cache=True, **MODES[mode])
    uncached = _generate(model, inputs, use_cache=False, **MODES[mode])
    _assert_same_generation(cached, uncached)
    cache = returned_cache(cached)
    assert isinstance(getattr(cache, "self_attention_cache", cache), ConvCache)


@pytest.mark.parametrize("case", CASES[:2], ids=CASE_IDS[:2])
def test_a_cache_implementation_is_ignored_with_our_own_message(case, caplog):
    """transformers would say the model "does not support `Cache` instances"; ours says what it keeps."""
    model = case.model()
    inputs = generation_prompt(case)
    expected = _generate(model, inputs, **MODES["beam"])
    with caplog.at_level("WARNING", logger="talk_hf"):
        static = _generate(model, inputs, cache_implementation="static", **MODES["beam"])
    _assert_same_generation(static, expected)
    cache = returned_cache(static)
    assert isinstance(getattr(cache, "self_attention_cache", cache), ConvCache)
    assert f"{type(model).__name__} keeps its own fixed-size decoding state" in caplog.text
    assert "cache_implementation='static' is ignored" in caplog.text


SEQ2SEQ = [case for case in CASES if case.is_seq2seq]


@pytest.mark.parametrize("case", SEQ2SEQ, ids=[case.name for case in SEQ2SEQ])
def test_an_encoder_decoders_guidance_is_refused_naming_it(case):
    """Classifier-free guidance's unconditional forward would give the decoder no source: refused before
    decoding, naming guidance_scale (the forward alone would name decoder_input_ids); its inert value
    decodes as without it."""
    model = case.model()
    inputs = generation_prompt(case)
    with pytest.raises(
        ValueError, match=r"cannot apply guidance_scale=1.5: classifier-free guidance .* without a source"
    ):
        _generate(model, inputs, guidance_scale=1.5, **MODES["greedy"])
    expected = _generate(model, inputs, **MODES["greedy"])
    _assert_same_generation(_generate(model, inputs, guidance_scale=1.0, **MODES["greedy"]), expected)


@pytest.mark.parametrize("case", CASES[:2], ids=CASE_IDS[:2])
def test_beam_search_needs_cache_reordering(case, monkeypatch):
    """With reordering disabled, beam search gives other beams: reordering is really exercised."""
    model = case.model()
    inputs = generation_prompt(case)
    settings = dict(num_beams=4, num_return_sequences=4, max_new_tokens=10, min_new_tokens=10)
    reference = _generate(model, inputs, use_cache=False, **settings).sequences
    assert torch.equal(_generate(model, inputs, **settings).sequences, reference)
    monkeypatch.setattr(ConvCache, "reorder_cache", lambda self, beam_idx: None)  # the negative control
    assert not torch.equal(_generate(model, inputs, **settings).sequences, reference)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_left_padded_batch_generates_like_single_rows(case):
    model = case.model()
    rows = [random_tokens(1, 6, seed=7), random_tokens(1, 3, seed=8)]
    width = max(row.shape[1] for row in rows)
    batch = torch.cat([torch.cat([torch.full((1, width - row.shape[1]), PAD), row], 1) for row in rows])
    mask = torch.cat(
        [torch.cat([torch.zeros(1, width - row.shape[1]), torch.ones_like(row)], 1) for row in rows]
    ).long()
    settings = dict(do_sample=False, max_new_tokens=7, min_new_tokens=7)
    batched = _generate(model, {"input_ids": batch, "attention_mask": mask}, **settings).sequences
    for index, row in enumerate(rows):
        single = _generate(model, {"input_ids": row}, **settings).sequences[0]
        new_tokens = single if case.is_seq2seq else single[row.shape[1] :]
        assert torch.equal(batched[index, -new_tokens.shape[0] :], new_tokens)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_generation_continues_from_a_returned_cache(case):
    model = case.model()
    inputs = generation_prompt(case, batch=1)
    settings = dict(do_sample=False)
    whole = _generate(model, inputs, max_new_tokens=10, min_new_tokens=10, **settings).sequences
    first = _generate(model, inputs, max_new_tokens=4, min_new_tokens=4, **settings)
    key = "decoder_input_ids" if case.is_seq2seq else "input_ids"
    continued_inputs = dict(inputs) if case.is_seq2seq else {}
    continued_inputs[key] = first.sequences
    if case.is_seq2seq:  # the decoder mask tells generate() which decoder tokens the cache has not seen yet
        continued_inputs["decoder_attention_mask"] = torch.ones_like(first.sequences)
    rest = _generate(
        model, continued_inputs, **{CACHE_NAME: returned_cache(first)}, max_new_tokens=6, min_new_tokens=6, **settings
    ).sequences
    assert torch.equal(rest, whole)


@pytest.mark.parametrize("case", CASES[:2], ids=CASE_IDS[:2])
def test_cache_tensors_keep_their_size_from_step_10_to_step_500(case):
    model = case.model()
    inputs = generation_prompt(case, batch=1)
    sizes = {}

    def record(step_outputs, step):
        cache = returned_cache(step_outputs)
        conv = getattr(cache, "self_attention_cache", cache)
        sizes[step] = [tuple(layer.history.shape) for layer in conv.layers] + [conv.nbytes]
        if case.is_seq2seq:
            sizes[step] += [tuple(layer.keys.shape) for layer in cache.cross_attention_cache.layers]

    source = {"input_ids": inputs["input_ids"]} if case.is_seq2seq else {}
    tokens = random_tokens(1, 501, seed=9)
    key = "decoder_input_ids" if case.is_seq2seq else "input_ids"
    outputs = model(**source, **{key: tokens[:, :1]}, use_cache=True)
    with torch.no_grad():
        for step in range(1, 501):
            extra = {"encoder_outputs": (outputs.encoder_last_hidden_state,)} if case.is_seq2seq else {}
            outputs = model(**extra, **{key: tokens[:, step : step + 1]}, cache=returned_cache(outputs))
            if step in (10, 500):
                record(outputs, step)
    assert sizes[10] == sizes[500]
    cache = returned_cache(outputs)
    assert cache.get_seq_length() == 501
    expected_windows = [layer.mixer.core.history_size for layer in model.model.decoder.layers]
    assert [shape[1] for shape in sizes[500][: len(expected_windows)]] == expected_windows


def test_generation_config_defaults_come_from_the_config():
    case = CASES[0]
    model = case.model()
    assert isinstance(model.generation_config, GenerationConfig)
    assert model.generation_config.decoder_start_token_id == model.config.decoder_start_token_id


@pytest.mark.parametrize("case", CASES[:2], ids=CASE_IDS[:2])
def test_cache_rows_can_be_repeated_and_selected(case):
    """batch_repeat_interleave / batch_select_indices on a prefilled cache act row by row."""
    model = case.model()
    source = {"input_ids": random_tokens(1, 7)} if case.is_seq2seq else {}
    key = "decoder_input_ids" if case.is_seq2seq else "input_ids"
    prefix, step = random_tokens(1, 5, seed=4), random_tokens(1, 1, seed=5)
    single = model(**source, **{key: prefix}, use_cache=True)
    expected = model(**source, **{key: step}, cache=returned_cache(single)).logits
    cache = returned_cache(model(**source, **{key: prefix}, use_cache=True))
    cache.batch_repeat_interleave(3)
    cache.batch_select_indices(torch.tensor([0, 2]))
    repeated = {key: value.repeat(2, 1) for key, value in source.items()}
    logits = model(**repeated, **{key: step.repeat(2, 1)}, cache=cache).logits
    torch.testing.assert_close(logits, expected.expand(2, -1, -1), rtol=1e-5, atol=1e-5)


def test_crop_rolls_a_recorded_window_back_exactly():
    """After activate_past_recording, crop(-n) gives the state of a layer that never saw the last n rows."""
    chunks = torch.randn(2, 9, 3).split([4, 5], dim=1)
    recorded, reference = ConvHistoryLayer(3), ConvHistoryLayer(3)
    recorded.activate_past_recording()
    for layer in (recorded, reference):
        layer.extend(chunks[0])
    recorded.extend(chunks[1])
    reference.extend(chunks[1][:, :2])
    recorded.crop(-3)
    assert recorded.get_seq_length() == reference.get_seq_length() == 6
    assert torch.equal(recorded.history, reference.history)
    assert recorded.recorded.shape[1] == recorded.history.shape[1] == 3  # back to the fixed size
    step = torch.randn(2, 1, 3)
    assert torch.equal(recorded.extend(step), reference.extend(step))


def test_crop_refuses_what_the_window_no_longer_holds():
    layer = ConvHistoryLayer(2)
    layer.extend(torch.randn(1, 5, 4))
    with pytest.raises(ValueError, match="recorded 0 since its last crop"):
        layer.crop(-1)  # not recording: the rows before the window are gone
    layer.activate_past_recording()
    layer.extend(torch.randn(1, 2, 4))
    layer.crop(0)  # cuts the context back to the window
    with pytest.raises(ValueError, match="recorded 0"):
        layer.crop(-1)
    with pytest.raises(ValueError, match="minus the number of tokens"):
        layer.crop(1)


def _count_rollbacks(monkeypatch) -> list[int]:
    """Record how many tokens each ConvHistoryLayer.crop removes."""
    removed, crop = [], ConvHistoryLayer.crop

    def counting_crop(self, tokens_to_remove):
        removed.append(-tokens_to_remove)
        crop(self, tokens_to_remove)

    monkeypatch.setattr(ConvHistoryLayer, "crop", counting_crop)
    return removed


def _repetitive_prompt() -> dict:
    """A prompt that repeats a phrase, so that prompt lookup finds n-gram matches to draft from."""
    phrase = random_tokens(1, 4, seed=11)
    return dict(input_ids=phrase.repeat(1, 4))


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_prompt_lookup_decoding_gives_the_greedy_tokens(case, monkeypatch):
    if case.is_seq2seq and Version(transformers.__version__) < Version("5.23"):
        pytest.skip("prompt lookup on encoder-decoder models returns no tokens in transformers 5.17 (BART too)")
    model = case.model()
    inputs = _repetitive_prompt()
    settings = dict(do_sample=False, max_new_tokens=24, min_new_tokens=24)
    greedy = _generate(model, inputs, **settings)
    removed = _count_rollbacks(monkeypatch)
    drafted = _generate(model, inputs, prompt_lookup_num_tokens=4, max_matching_ngram_size=2, **settings)
    _assert_same_generation(drafted, greedy)
    assert any(count > 0 for count in removed), "no draft was rejected: the rollback went untested"


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_assisted_decoding_gives_the_greedy_tokens(case, monkeypatch):
    """A different assistant (drafts are often rejected) and the model itself (always accepted).

    The scores are compared too: with a crop that forgets to roll the windows back, the tokens
    of these tiny models can survive, their scores do not."""
    model = case.model()
    torch.manual_seed(5)
    other = case.head(case.config()).eval()
    inputs = generation_prompt(case, batch=1)
    settings = dict(do_sample=False, max_new_tokens=20, min_new_tokens=20)
    greedy = _generate(model, inputs, **settings)
    removed = _count_rollbacks(monkeypatch)
    for assistant in (other, model):
        _assert_same_generation(_generate(model, inputs, assistant_model=assistant, **settings), greedy)
    assert any(count > 0 for count in removed)


def test_extend_returns_the_window_then_the_inputs_and_keeps_the_state_small():
    """extend(u) -> [the window before u, u], or None for the first inputs (the window is zeros: the
    causal step without a cache computes the same); the stored window is history_size rows, and a
    chunk longer than the window is copied out of (its storage is not kept alive)."""
    layer = ConvHistoryLayer(3)
    prompt = torch.randn(2, 50, 4)
    assert layer.extend(prompt) is None
    assert torch.equal(layer.history, prompt[:, -3:])
    assert layer.window.untyped_storage().nbytes() == layer.window.nbytes  # not a view of the prompt
    step = torch.randn(2, 1, 4)
    assert torch.equal(layer.extend(step), torch.cat([prompt[:, -3:], step], dim=1))
    assert torch.equal(layer.history, torch.cat([prompt[:, -2:], step], dim=1))
    assert layer.get_seq_length() == 51
    half = layer.extend(torch.randn(2, 1, 4, dtype=torch.float64))  # the caller's dtype comes back
    assert half.dtype == torch.float64 and layer.window.dtype == torch.float32


def test_a_reset_window_layer_starts_over_like_a_new_one():
    """reset() zeroes the window and the count, keeping the state's shape; before any input there is
    no window; mask sizes and the unbounded length follow the count; key/value updates are refused."""
    layer, fresh = ConvHistoryLayer(3), ConvHistoryLayer(3)
    assert layer.history is None and layer.get_max_length() == -1
    layer.extend(torch.randn(2, 5, 4))
    assert layer.get_mask_sizes(1) == (6, 0)
    layer.reset()
    assert layer.get_seq_length() == 0 and layer.window.shape == (2, 3, 4)
    tokens, step = torch.randn(2, 2, 4), torch.randn(2, 1, 4)
    assert layer.extend(tokens) is None and fresh.extend(tokens) is None  # both start from zeros
    assert torch.equal(layer.extend(step), fresh.extend(step))
    assert layer.get_seq_length() == fresh.get_seq_length() == 3
    with pytest.raises(NotImplementedError, match="call extend"):
        layer.update(torch.randn(2, 1, 1, 4), torch.randn(2, 1, 1, 4))


def test_an_offloaded_window_layer_comes_back_unchanged():
    """offload() moves the window to the CPU and prefetch() back to the layer's device, values intact."""
    layer = ConvHistoryLayer(3)
    layer.offload()  # nothing to move yet
    layer.extend(torch.randn(2, 5, 4))
    window = layer.history.clone()
    layer.offload()
    assert layer.window.device.type == "cpu"
    layer.prefetch()
    assert layer.window.device == layer.device and torch.equal(layer.history, window)
