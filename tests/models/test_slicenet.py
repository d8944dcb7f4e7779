"""SliceNet as a model: configuration and presets (the paper's parameter counts), causality and the
finite receptive field, the fixed-window cache, padding, attention, dropout placement and the
paper-text options.  The generic model tests (tests/models/helpers.py CASES) run on SliceNet too."""

import pytest
import torch
from transformers import GenerationConfig

import talk_hf
from talk_hf import SliceNetConfig, SliceNetForConditionalGeneration, SliceNetModel
from talk_hf.layers import slicenet_step
from talk_hf.models.slicenet.configuration_slicenet import TABLE2_ROWS

from . import test_generation
from .helpers import PAD, VOCAB, Case, random_tokens, returned_cache

# d_model 24 divides the groups of separability -2 (3, 2) and of the IO mixer (4).
TINY = dict(
    vocab_size=VOCAB,
    d_model=24,
    encoder_layers=2,
    decoder_layers=2,
    kernel_sizes=[3, 5, 3],
    dilations=[1, 2, 1],
    separability=-2,
    timing_num_timescales=8,
    dropout=0.0,
    pad_token_id=PAD,
    bos_token_id=0,
    eos_token_id=2,
    decoder_start_token_id=2,
)
# Receptive field of TINY: attention 4 + 16 and IO mixer 2, then per layer module 2 + 8 + 2 and attention 20.
TINY_REACH = 22 + 2 * (12 + 20)
# Shorter windows for the generation tests (receptive field 8 + 2 * 12 = 32).
SHORT = dict(
    TINY, kernel_sizes=[3, 3, 3], dilations=[1, 1, 1], attention_kernel_sizes=[3, 3], attention_dilations=[1, 2]
)
SHORT_REACH = 32

OPTIONS = {
    "t2t": {},
    "paper-module-residual": dict(module_residual="paper"),
    "paper-attention": dict(attention_residual="paper"),
    "module-dropout": dict(dropout_placement="module"),
    "paper-timing": dict(timing_num_timescales=None),
    "final-layer-norm": dict(final_layer_norm=True),
}


def _model(seed=0, dtype=torch.float32, **overrides):
    torch.manual_seed(seed)
    return SliceNetForConditionalGeneration(SliceNetConfig(**{**TINY, **overrides})).to(dtype).eval()


def _logits(model, source, target, **kwargs):
    with torch.no_grad():
        return model(input_ids=source, decoder_input_ids=target, use_cache=False, **kwargs).logits


# --- configuration -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(d_model=32, separability=-2), r"d_model=32 must be divisible by 3: separability=-2"),
        (
            dict(d_model=18, kernel_sizes=[3, 7, 15, 31, 63], dilations=[1] * 5, separability=-2),
            r"d_model=18 must be divisible by 4: separability=-2",
        ),  # 5 steps: groups 3, 2 | 4, 3, 2
        (dict(d_model=30, io_mixer_separability=4), "d_model=30 must be divisible by 4: io_mixer_separability=4"),
        (dict(kernel_sizes=[3, 4, 5]), r"kernel_sizes\[1\] must be odd"),
        (dict(kernel_sizes=[3, 5], dilations=[1, 1]), "kernel_sizes must be a list of at least 3"),
        (dict(dilations=[1, 1]), r"dilations must hold one dilation per entry of kernel_sizes \(4\)"),
        (dict(dilations=[1, 0, 1, 1]), r"dilations\[1\] must be >= 1"),
        (dict(attention_kernel_sizes=[5, 6]), r"attention_kernel_sizes\[1\] must be odd"),
        (dict(io_mixer_kernel_size=2), "io_mixer_kernel_size must be odd"),
        (dict(d_model=24), r"timing_num_timescales=16 needs 2 \* timing_num_timescales <= d_model=24"),
        (dict(dropout=1.0), "dropout must be a probability"),
        (dict(token_dropout=-0.1), "token_dropout must be a probability"),
        (dict(token_dropout=0.1, pad_token_id=None), "token_dropout > 0 replaces ids by pad_token_id"),
        (dict(dropout_placement="layer"), "dropout_placement must be one of"),
        (dict(module_residual="t2t-head"), "module_residual must be one of"),
        (dict(initializer="xavier"), "initializer must be one of"),
        (dict(final_layer_norm="yes"), "final_layer_norm must be True or False, got 'yes'"),
        (dict(layer_norm_eps=0.0), "layer_norm_eps must be a number > 0"),
        (dict(decoder_start_token_id=None), "decoder_start_token_id must be set"),
        (dict(vocab_size=10, decoder_start_token_id=10), "decoder_start_token_id=10 must be < vocab_size=10"),
    ],
)
def test_invalid_fields_raise_naming_the_field(fields, message):
    with pytest.raises((ValueError, TypeError), match=message):
        SliceNetConfig(**fields)


def test_separability_rule_is_t2ts():
    assert SliceNetConfig(d_model=48, separability=-2).module_separabilities() == [-3, -2, -3, -2]
    five = SliceNetConfig(d_model=48, separability=-2, kernel_sizes=[3, 7, 15, 31, 63], dilations=[1] * 5)
    assert five.module_separabilities() == [-3, -2, -4, -3, -2]
    assert five.attention_separabilities() == [-3, -2]
    assert SliceNetConfig(separability=16).module_separabilities() == [16] * 4
    model = SliceNetModel(SliceNetConfig(**TINY))
    steps = model.decoder.layers[0].module.steps
    assert [step.conv.pointwise_weight.shape[1] for step in steps] == [24 // 3, 24 // 2, 24 // 2]  # grouped 1x1s
    mixer = model.decoder.io_mixer.mix.conv  # 4-group k = 3 convolution from 2d to d, then a 1x1 with bias
    assert mixer.spatial_weight.shape == (24, 48 // 4, 3) and mixer.pointwise_bias is not None


@pytest.mark.parametrize(
    "name, non_embedding",
    [("wmt-en-de-full-2048", 264_955_904), ("wmt-en-de-super-3072", 222_422_016)],
)
def test_large_presets_have_the_papers_parameter_counts(name, non_embedding):
    """Table 2: 265 M and 222 M (t2t's 32 x d target-space table, our start token, is not counted)."""
    with torch.device("meta"):
        model = SliceNetModel(SliceNetConfig.from_preset(name))
    embedding = model.get_input_embeddings().weight
    assert sum(p.numel() for p in model.parameters()) - embedding.numel() == non_embedding


def _reach_formula(config) -> int:
    """SLICENET.md section 3.5: middle attention and IO mixer, then per layer the module and attention."""
    attention = sum((k - 1) * d for k, d in zip(config.attention_kernel_sizes, config.attention_dilations, strict=True))
    module = sum((k - 1) * d for k, d in zip(config.kernel_sizes, config.dilations, strict=True))
    return attention + (config.io_mixer_kernel_size - 1) + config.decoder_layers * (module + attention)


@pytest.mark.parametrize("row", sorted(TABLE2_ROWS))
def test_table2_rows_build_with_the_windows_of_their_schemes(row):
    config = SliceNetConfig.from_table2_row(row, d_model=96 if row < 8 else None)
    with torch.device("meta"):
        model = SliceNetModel(config)
    windows = model.decoder.history_sizes()
    assert len(windows) == 3 + config.decoder_layers * (len(config.kernel_sizes) + 2)
    assert sum(windows) == _reach_formula(config)
    expected = {1: 222, 2: 222, 3: 278, 4: 302, 5: 310, 6: 222, 7: 310, 8: 558, 9: 310}
    assert sum(windows) == expected[row]


def test_presets_and_their_width_rules():
    assert sum(SliceNetModel(SliceNetConfig.from_preset("small")).decoder.history_sizes()) > 0
    tiny = SliceNetConfig.from_preset("t2t-slicenet_1tiny")
    assert (tiny.d_model, tiny.encoder_layers, tiny.decoder_layers, tiny.separability) == (128, 3, 2, 0)
    section = SliceNetConfig.from_preset("paper-section-3.1", d_model=128)
    assert section.kernel_sizes == [3, 3, 15, 15] and section.dilations == [1, 1, 1, 8]
    assert _reach_formula(section) == 622
    with pytest.raises(ValueError, match="states no width: pass d_model"):
        SliceNetConfig.from_preset("paper-section-3.1")
    with pytest.raises(ValueError, match="Table 2 row 3 states no width"):
        SliceNetConfig.from_table2_row(3)
    with pytest.raises(ValueError, match="one of Table 2's rows"):
        SliceNetConfig.from_table2_row(10, d_model=64)
    with pytest.raises(ValueError, match="wmt-en-de-full-2048"):
        SliceNetConfig.from_preset("wmt")


def test_generation_defaults_to_the_papers_beam_of_4(tmp_path):
    model = _model()
    assert model.generation_config.num_beams == 4
    model.save_pretrained(tmp_path)
    assert GenerationConfig.from_pretrained(tmp_path).num_beams == 4
    source = random_tokens(1, 6)
    generated = model.generate(input_ids=source, max_new_tokens=5, output_scores=True, return_dict_in_generate=True)
    assert generated.sequences.shape[0] == 1 and generated.beam_indices is not None  # beam search ran


# --- causality, receptive field, cache ------------------------------------------------------------


@pytest.mark.parametrize("option", OPTIONS, ids=list(OPTIONS))
def test_logits_do_not_depend_on_later_targets(option):
    model = _model(**OPTIONS[option])
    source, target = random_tokens(2, 9), random_tokens(2, 30, seed=2)
    logits = _logits(model, source, target)
    for position in (0, 12, 28):
        changed = target.clone()
        changed[:, position + 1 :] = random_tokens(2, 29 - position, seed=3)
        assert torch.equal(_logits(model, source, changed)[:, : position + 1], logits[:, : position + 1])


# With the query taken from the layer input (paper), a layer's module and attention are parallel
# paths: the reach per layer is the larger of the two, not their sum (the windows still bound it).
REACH = {"t2t": TINY_REACH, "paper-attention": 22 + 2 * max(12, 20)}


@pytest.mark.parametrize("option", REACH)
def test_receptive_field_is_bounded_by_the_sum_of_the_windows(option):
    """A target token reaches exactly the logits of positions p .. p + reach (float64: nothing vanishes)."""
    model = _model(dtype=torch.float64, **OPTIONS[option])
    assert sum(model.model.decoder.history_sizes()) == TINY_REACH == _reach_formula(model.config)
    source, target = random_tokens(1, 9), random_tokens(1, TINY_REACH + 30, seed=2)
    logits = _logits(model, source, target)
    position = 10
    changed = target.clone()
    changed[:, position] = (changed[:, position] + 1 - 3) % (VOCAB - 3) + 3
    moved = (_logits(model, source, changed) != logits).any(-1)[0].nonzero().flatten()
    assert moved.min() == position and moved.max() == position + REACH[option]


def _cached_logits(model, source, target, chunks):
    """Logits of ``target`` fed to the decoder in chunks of the given sizes through one cache."""
    outputs, pieces, start = None, [], 0
    for size in chunks:
        extra = (
            {}
            if outputs is None
            else dict(encoder_outputs=(outputs.encoder_last_hidden_state,), cache=returned_cache(outputs))
        )
        with torch.no_grad():
            outputs = model(
                input_ids=source, decoder_input_ids=target[:, start : start + size], use_cache=True, **extra
            )
        pieces.append(outputs.logits)
        start += size
    assert start == target.shape[1]
    return torch.cat(pieces, dim=1), returned_cache(outputs)


@pytest.mark.parametrize("option", OPTIONS, ids=list(OPTIONS))
def test_cached_decoding_equals_the_full_forward_beyond_the_receptive_field(option):
    # t2t's attention windows for the default; the options on shorter windows (fewer steps to run).
    model = _model(**OPTIONS[option]) if option == "t2t" else _model(**{**SHORT, **OPTIONS[option]})
    length = sum(model.model.decoder.history_sizes()) + 14  # longer than every window and than their sum
    source, target = random_tokens(2, 9), random_tokens(2, length, seed=2)
    full = _logits(model, source, target)
    one_by_one, cache = _cached_logits(model, source, target, [5] + [1] * (length - 5))
    torch.testing.assert_close(one_by_one, full, rtol=1e-5, atol=1e-5)
    assert cache.get_seq_length() == length
    chunked, _ = _cached_logits(model, source, target, [5, 1, 30, 7, 1, length - 44])
    torch.testing.assert_close(chunked, full, rtol=1e-5, atol=1e-5)


def test_cached_decoding_summing_the_taps_one_by_one_equals_the_full_forward(monkeypatch):
    # Beam-search batches sum a depthwise step's taps one by one (slicenet_step.depthwise_taps); any batch does at 0.
    monkeypatch.setattr(slicenet_step, "TAP_PRODUCT_ELEMENTS", 0)
    model = _model(**SHORT)
    source, target = random_tokens(2, 9), random_tokens(2, SHORT_REACH + 6, seed=2)
    one_by_one, _ = _cached_logits(model, source, target, [3] + [1] * (SHORT_REACH + 3))
    torch.testing.assert_close(one_by_one, _logits(model, source, target), rtol=1e-5, atol=1e-5)


def test_decoding_state_keeps_its_shapes_bytes_and_storage_step_after_step():
    model = _model()
    source, target = random_tokens(2, 9), random_tokens(2, 120, seed=2)
    outputs, cache, seen = None, None, []
    for position in range(target.shape[1]):
        extra = {} if cache is None else dict(encoder_outputs=(outputs.encoder_last_hidden_state,), cache=cache)
        with torch.no_grad():
            outputs = model(
                input_ids=source, decoder_input_ids=target[:, position : position + 1], use_cache=True, **extra
            )
        cache = returned_cache(outputs)
        histories = [layer.history for layer in cache.self_attention_cache.layers]
        seen.append(
            (
                [tuple(history.shape) for history in histories],
                [history.data_ptr() for history in histories],
                cache.self_attention_cache.nbytes,
                cache.cross_attention_cache.get_seq_length(),
            )
        )
    assert all(state == seen[0] for state in seen)  # position 1 to 120: nothing grows or moves
    assert seen[0][2] == 2 * 4 * 24 * (
        sum(model.model.decoder.history_sizes()) + 2
    )  # the IO mixer's 2 rows are 2 d wide
    assert seen[0][3] == 0  # the attention reads the encoder output itself: no keys/values are stored


def test_generate_keeps_the_step_weights_only_while_it_runs():
    model = _model(**SHORT)
    source = random_tokens(2, 7, seed=3)
    settings = dict(max_new_tokens=12, min_new_tokens=12, num_beams=2, pad_token_id=PAD)
    model.generate(input_ids=source, **settings)
    convs = [step.conv for step in model.model.decoder.causal_steps()]
    assert all(conv.kept_step_weights is None and not conv.keeps_step_weights for conv in convs)
    with torch.no_grad():  # weights changed between two calls: the second decodes with the new ones
        for conv in convs:
            conv.spatial_weight.mul_(-1.5)
    cached = model.generate(input_ids=source, use_cache=True, **settings)
    assert torch.equal(cached, model.generate(input_ids=source, use_cache=False, **settings))


def test_cache_is_one_fixed_window_per_causal_step():
    model = _model()
    source, target = random_tokens(1, 9), random_tokens(1, 200, seed=2)
    shapes = {}
    _, cache = _cached_logits(model, source, target[:, :10], [10])
    shapes[10] = [tuple(layer.history.shape) for layer in cache.self_attention_cache.layers]
    _, cache = _cached_logits(model, source, target, [10] + [1] * 190)
    shapes[200] = [tuple(layer.history.shape) for layer in cache.self_attention_cache.layers]
    windows = model.model.decoder.history_sizes()
    assert shapes[10] == shapes[200]
    assert [shape[1] for shape in shapes[200]] == windows
    assert [shape[2] for shape in shapes[200]][:3] == [24, 24, 48]  # the IO mixer's step reads 2 d channels
    assert cache.cross_attention_cache.get_seq_length() == 0  # the attention reads the encoder output itself


# --- generation -----------------------------------------------------------------------------------

SHORT_CASE = Case(
    "slicenet-short", SliceNetForConditionalGeneration, SliceNetModel, SliceNetConfig, dict(SHORT, num_beams=1)
)


def test_beam_search_with_and_without_cache_beyond_the_receptive_field():
    model = _model(**SHORT)
    assert model.generation_config.num_beams == 4 and sum(model.model.decoder.history_sizes()) == SHORT_REACH
    source = random_tokens(2, 7, seed=3)
    settings = dict(
        max_new_tokens=SHORT_REACH + 4,
        min_new_tokens=SHORT_REACH + 4,
        num_return_sequences=2,
        output_scores=True,
        return_dict_in_generate=True,
        pad_token_id=PAD,
    )
    cached = model.generate(input_ids=source, use_cache=True, **settings)
    uncached = model.generate(input_ids=source, use_cache=False, **settings)
    assert torch.equal(cached.sequences, uncached.sequences)
    for step_cached, step_uncached in zip(cached.scores, uncached.scores, strict=True):
        finite = torch.isfinite(step_uncached)
        torch.testing.assert_close(step_cached[finite], step_uncached[finite], rtol=1e-4, atol=1e-4)


def test_beam_search_needs_cache_reordering(monkeypatch):
    test_generation.test_beam_search_needs_cache_reordering(SHORT_CASE, monkeypatch)


def test_cache_rows_can_be_repeated_and_selected():
    test_generation.test_cache_rows_can_be_repeated_and_selected(SHORT_CASE)


# --- padding --------------------------------------------------------------------------------------


def _pad(tokens, count, left):
    pads = torch.full((tokens.shape[0], count), PAD)
    mask = torch.cat(
        [torch.zeros_like(pads), torch.ones_like(tokens)]
        if left
        else [torch.ones_like(tokens), torch.zeros_like(pads)],
        dim=1,
    )
    return (torch.cat([pads, tokens], 1) if left else torch.cat([tokens, pads], 1)), mask


@pytest.mark.parametrize("option", OPTIONS, ids=list(OPTIONS))
def test_source_padding_changes_nothing(option):
    model = _model(**OPTIONS[option])
    source, target = random_tokens(1, 8), random_tokens(1, 12, seed=2)
    expected = _logits(model, source, target)
    for count in (3, 7):
        for left in (False, True):
            padded, mask = _pad(source, count, left)
            outputs = model(input_ids=padded, attention_mask=mask, decoder_input_ids=target, output_hidden_states=True)
            torch.testing.assert_close(outputs.logits, expected, rtol=1e-5, atol=1e-5)
            for hidden in outputs.encoder_hidden_states[1:]:  # after each encoder layer
                assert not hidden[mask == 0].any()
            scrambled = padded.masked_scatter(mask == 0, random_tokens(1, count, seed=9))
            assert torch.equal(
                _logits(model, scrambled, target, attention_mask=mask),
                _logits(model, padded, target, attention_mask=mask),
            )


@pytest.mark.parametrize("option", OPTIONS, ids=list(OPTIONS))
def test_decoder_left_padding_changes_nothing(option):
    """A left-padded target row (masked) gives the logits, and generates the tokens, of the row alone."""
    model = _model(**OPTIONS[option])
    source = random_tokens(2, 8)
    start = torch.full((2, 1), model.config.decoder_start_token_id)
    target = torch.cat([start, random_tokens(2, 11, seed=2)], dim=1)
    short = target[1:, :7]
    padded, mask = _pad(short, 5, left=True)
    logits = _logits(model, source[1:], padded, decoder_attention_mask=mask)
    torch.testing.assert_close(logits[:, 5:], _logits(model, source[1:], short), rtol=1e-5, atol=1e-5)

    settings = dict(max_new_tokens=10, num_beams=1, do_sample=False, pad_token_id=PAD)
    batch = model.generate(
        input_ids=source,
        decoder_input_ids=torch.cat([target[:1, :12], padded]),
        decoder_attention_mask=torch.cat([torch.ones(1, 12, dtype=torch.long), mask]),
        **settings,
    )
    alone = model.generate(input_ids=source[1:], decoder_input_ids=short, **settings)
    assert torch.equal(batch[1:, 5:], alone)


# --- attention, dropout, options ------------------------------------------------------------------


def test_attention_rows_are_distributions_over_the_real_source():
    model = _model()
    source, mask = _pad(random_tokens(2, 6), 3, left=False)
    mask[1, :2] = 0  # the second row also left-padded
    outputs = model(
        input_ids=source, attention_mask=mask, decoder_input_ids=random_tokens(2, 5, seed=2), output_attentions=True
    )
    weights = outputs.cross_attentions
    assert len(weights) == model.config.decoder_layers + 1  # the IO mixer's, then each layer's
    for block in weights:
        assert block.shape == (2, 1, 5, 9)
        torch.testing.assert_close(block.sum(-1), torch.ones(2, 1, 5))
        assert not block.masked_select(mask[:, None, None, :] == 0).any()


def _dropouts_that_drop(model, source, target) -> list[str]:
    """Names of the dropout modules that zeroed activations in one training forward."""
    fired = []

    def record(module, inputs, output, name):
        if ((output == 0) & (inputs[0] != 0)).any():
            fired.append(name)

    hooks = [
        module.register_forward_hook(lambda m, i, o, name=name: record(m, i, o, name))
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Dropout)
    ]
    model.train()(input_ids=source, labels=target)
    for hook in hooks:
        hook.remove()
    return fired


def test_reentrant_gradient_checkpointing_gives_the_same_gradients():
    # Reentrant checkpointing sees only the tensor arguments of a layer: the encoder output must be one.
    source, target = random_tokens(2, 7), random_tokens(2, 6, seed=2)
    gradients = []
    for checkpointing in (False, True):
        model = _model().train()
        if checkpointing:  # transformers 5.23 renamed gradient_checkpointing_enable; 5.17 has only that name
            getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)(
                {"use_reentrant": True}
            )
        model(input_ids=source, labels=target).loss.backward()
        gradients.append({name: p.grad for name, p in model.named_parameters() if p.grad is not None})
    assert gradients[0].keys() == gradients[1].keys()
    for name, gradient in gradients[0].items():
        torch.testing.assert_close(gradients[1][name], gradient, msg=name)


def test_dropout_runs_where_its_placement_says_and_only_in_training():
    source, target = random_tokens(2, 8), random_tokens(2, 10, seed=2)
    model = _model(dropout=0.5)
    assert torch.equal(_logits(model, source, target), _logits(model, source, target))
    assert _dropouts_that_drop(model, source, target) == ["model.encoder.dropout", "model.decoder.dropout"]
    model = _model(dropout=0.5, dropout_placement="module")
    fired = _dropouts_that_drop(model, source, target)
    assert fired == [f"model.{stack}.layers.{index}.dropout" for stack in ("encoder", "decoder") for index in range(2)]


def test_token_dropout_replaces_ids_by_pad_in_training_only():
    model = _model(token_dropout=0.5)
    seen = []
    model.get_input_embeddings().register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    source, target = random_tokens(4, 20), random_tokens(4, 20, seed=2)
    model.train()(input_ids=source, decoder_input_ids=target)
    model.eval()(input_ids=source, decoder_input_ids=target)
    dropped = [(ids == PAD).float().mean().item() for ids in seen]
    assert 0.3 < dropped[0] < 0.7 and 0.3 < dropped[1] < 0.7 and dropped[2:] == [0.0, 0.0]


@pytest.mark.parametrize("option", ["paper-module-residual", "paper-attention", "paper-timing"])
def test_paper_options_change_the_outputs(option):
    source, target = random_tokens(2, 8), random_tokens(2, 10, seed=2)
    t2t = _logits(_model(), source, target)
    assert not torch.allclose(_logits(_model(**OPTIONS[option]), source, target), t2t)


def test_paper_attention_has_no_layer_norm_and_reads_the_layer_input():
    model = _model(attention_residual="paper")
    layer = model.model.decoder.layers[0]
    assert layer.attention.norm is None and layer.query_from_input
    assert _model().model.decoder.layers[0].attention.norm is not None


def test_final_layer_norm_normalises_the_decoder_output_of_the_papers_design():
    """The option adds one LayerNorm (the only new weights) on what the decoder returns without it."""
    source, target = random_tokens(2, 8), random_tokens(2, 10, seed=2)
    paper, normed = _model(), _model(final_layer_norm=True)
    new_weights = set(normed.state_dict()) - set(paper.state_dict())
    assert new_weights == {"model.decoder.final_norm.weight", "model.decoder.final_norm.bias"}
    assert SliceNetConfig(**TINY).final_layer_norm is False
    normed.load_state_dict(paper.state_dict(), strict=False)
    with torch.no_grad():
        normed.model.decoder.final_norm.weight.normal_()
        normed.model.decoder.final_norm.bias.normal_()
        kwargs = dict(input_ids=source, decoder_input_ids=target, use_cache=False)
        hidden = paper.model(**kwargs).last_hidden_state
        expected = normed.model.decoder.final_norm(hidden)
        torch.testing.assert_close(normed.model(**kwargs).last_hidden_state, expected)


def test_package_exports_and_auto_classes():
    from transformers import AutoConfig, AutoModelForSeq2SeqLM

    assert talk_hf.SliceNetConfig is SliceNetConfig
    config = AutoConfig.for_model("slicenet", **TINY)
    assert type(AutoModelForSeq2SeqLM.from_config(config)) is SliceNetForConditionalGeneration


@pytest.mark.parametrize(
    "device,dtype",
    [
        ("cpu", torch.bfloat16),
        pytest.param("cuda", torch.bfloat16, marks=pytest.mark.gpu),
        pytest.param("cuda", torch.float16, marks=pytest.mark.gpu),
    ],
    ids=["cpu-bf16", "cuda-bf16", "cuda-fp16"],
)
def test_autocast_training_and_cached_decoding(device, dtype):
    model = _model().to(device)
    source, target = random_tokens(2, 9).to(device), random_tokens(2, TINY_REACH + 10, seed=2).to(device)
    with torch.autocast(device, dtype=dtype):
        loss = model.train()(input_ids=source, labels=target).loss
    loss.backward()
    assert torch.isfinite(loss) and all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    model.eval()
    exact = _logits(model, source, target)
    with torch.autocast(device, dtype=dtype):
        full = _logits(model, source, target).float()
        cached, _ = _cached_logits(model, source, target, [5] + [1] * (target.shape[1] - 5))
    # Low precision rounds the two paths differently; measured on the scale of the full pass's own
    # rounding error, decoding through the cache must be about as accurate as the full pass.
    full_error, cached_error = (full - exact).norm(), (cached.float() - exact).norm()
    assert cached_error <= 1.5 * full_error + 1e-3 * exact.norm(), (cached_error, full_error)
