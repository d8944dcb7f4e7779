"""The HF model checks: Auto round trip, meta init, tying, resizing, training, outputs, errors."""

import warnings

import pytest
import torch
from transformers import AutoModel, AutoModelForCausalLM, AutoModelForSeq2SeqLM

import talk_hf
from talk_hf.ops import _backend

from .helpers import CASE_IDS, CASES, PAD, model_inputs, random_tokens, returned_cache


def _auto_head(case):
    return AutoModelForSeq2SeqLM if case.is_seq2seq else AutoModelForCausalLM


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_save_load_round_trip_through_auto_classes(case, tmp_path):
    model = case.model()
    inputs = model_inputs(case)
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists()
    loaded = _auto_head(case).from_pretrained(tmp_path).eval()
    assert type(loaded) is case.head
    torch.testing.assert_close(loaded(**inputs).logits, model(**inputs).logits, rtol=0, atol=0)
    base = AutoModel.from_pretrained(tmp_path).eval()
    assert type(base) is case.base
    torch.testing.assert_close(
        base(**inputs).last_hidden_state, model.model(**inputs).last_hidden_state, rtol=0, atol=0
    )


@pytest.mark.parametrize(
    "case",
    [case for case in CASES if "slicenet" not in case.name],
    ids=[name for name in CASE_IDS if "slicenet" not in name],
)
@pytest.mark.parametrize("field", ["dropout", "input_dropout", "activation_dropout", "mixer"])
def test_each_dropout_acts_in_training_and_never_in_eval(case, field):
    """Every dropout of the layers drops in training mode; eval forwards are deterministic and
    equal to a model without dropout (dropout is skipped outright there)."""
    mixer_field = case.config_class.family.dropout_field
    field = mixer_field if field == "mixer" else field
    no_dropout = dict.fromkeys(
        ["dropout", "input_dropout", "activation_dropout", "attention_dropout", mixer_field], 0.0
    )
    inputs = model_inputs(case)
    without = case.model(**no_dropout)(**inputs).logits
    model = case.model(**{**no_dropout, field: 0.5})
    torch.testing.assert_close(model(**inputs).logits, without, rtol=0, atol=0)
    model.train()
    assert not torch.allclose(model(**inputs).logits, without)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_meta_device_init_rebuilds_every_parameter_and_buffer(case):
    with torch.device("meta"):
        model = case.head(case.config())
    model.to_empty(device="cpu")
    model.init_weights()
    for name, tensor in list(model.named_parameters()) + list(model.named_buffers()):
        assert torch.isfinite(tensor).all(), name
    reference = case.model()
    for (name, buffer), (_, expected) in zip(model.named_buffers(), reference.named_buffers(), strict=True):
        torch.testing.assert_close(buffer, expected, msg=name)
    assert model.get_input_embeddings().weight[PAD].abs().sum() == 0


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_output_embeddings_are_tied_to_the_input_embeddings(case, tmp_path):
    model = case.model()
    assert model.lm_head.weight is model.get_input_embeddings().weight
    if case.is_seq2seq:
        assert model.model.encoder.embed_tokens.weight is model.model.decoder.embed_tokens.weight
    model.save_pretrained(tmp_path)
    loaded = case.head.from_pretrained(tmp_path)
    assert loaded.lm_head.weight is loaded.get_input_embeddings().weight
    untied = case.model(
        tie_word_embeddings=False, **({"share_encoder_decoder_embeddings": False} if case.is_seq2seq else {})
    )
    assert untied.lm_head.weight is not untied.get_input_embeddings().weight
    if case.is_seq2seq:
        assert untied.model.encoder.embed_tokens.weight is not untied.model.decoder.embed_tokens.weight


@pytest.mark.parametrize("case", [c for c in CASES if c.is_seq2seq], ids=[c.name for c in CASES if c.is_seq2seq])
def test_untied_output_projection_with_shared_input_embeddings(case, tmp_path):
    """As in BART: `tie_word_embeddings=False` unties only the LM head; source and target keep one
    embedding, through training and a save/load round trip."""
    model = case.model(tie_word_embeddings=False).train()
    embeddings = model.get_input_embeddings()
    assert model.model.encoder.embed_tokens is embeddings and model.lm_head.weight is not embeddings.weight
    inputs = model_inputs(case)
    model(**inputs, labels=random_tokens(2, 6, seed=5)).loss.backward()
    torch.optim.SGD(model.parameters(), lr=1.0).step()
    assert not torch.equal(model.lm_head.weight, embeddings.weight)
    model.save_pretrained(tmp_path)
    loaded, info = case.head.from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info.values()), info  # no key missing, unexpected or mismatched
    assert loaded.model.encoder.embed_tokens is loaded.get_input_embeddings()
    assert loaded.lm_head.weight is not loaded.get_input_embeddings().weight
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], tensor, rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_resize_token_embeddings(case):
    model = case.model()
    head_class = type(model.lm_head)
    model.resize_token_embeddings(52)
    assert type(model.lm_head) is head_class  # not transformers' plain nn.Linear: the decoding kernel stays
    assert model.config.vocab_size == 52 and getattr(model.config, "decoder_vocab_size", 52) == 52
    assert model.get_input_embeddings().weight.shape[0] == 52
    assert model.lm_head.weight is model.get_input_embeddings().weight
    inputs = model_inputs(case)
    inputs["input_ids"][0, 0] = 51
    assert model(**inputs).logits.shape[-1] == 52


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_resizing_an_untied_head_keeps_its_class_and_rows(case):
    """transformers rebuilds an untied head as a plain nn.Linear (a tied one is resized through the
    embedding): the head keeps the package's Linear, so decoding keeps its kernel."""
    model = case.model(tie_word_embeddings=False)
    head_class, old_weight = type(model.lm_head), model.lm_head.weight.detach().clone()
    assert head_class is not torch.nn.Linear
    model.resize_token_embeddings(52)
    assert type(model.lm_head) is head_class
    assert model.lm_head.weight is not model.get_input_embeddings().weight
    assert model.lm_head.weight.shape == (52, old_weight.shape[1])
    torch.testing.assert_close(model.lm_head.weight[: old_weight.shape[0]].detach(), old_weight, rtol=0, atol=0)
    inputs = model_inputs(case)
    inputs["input_ids"][0, 0] = 51
    assert model(**inputs).logits.shape[-1] == 52


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_gradient_checkpointing_gives_the_same_loss_and_gradients(case):
    inputs = model_inputs(case)
    labels = random_tokens(2, 6, seed=5)
    results = []
    for checkpointing in (False, True):
        model = case.model().train()
        if checkpointing:  # transformers 5.23 renamed gradient_checkpointing_enable; 5.17 has only that name
            getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)()
            assert all(layer.gradient_checkpointing for layer in model.model.decoder.layers)
        with warnings.catch_warnings():
            warnings.simplefilter("error", FutureWarning)  # no deprecated transformers API inside forward
            loss = model(**inputs, labels=labels).loss
        loss.backward()
        results.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    (loss, grads), (loss_ckpt, grads_ckpt) = results
    torch.testing.assert_close(loss, loss_ckpt)
    assert grads.keys() == grads_ckpt.keys() and len(grads) > 10
    for name in grads:
        torch.testing.assert_close(grads[name], grads_ckpt[name], msg=name)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_loss_honours_num_items_in_batch(case):
    model = case.model()
    inputs = model_inputs(case)
    labels = random_tokens(2, 6, seed=5)
    labels[0, :2] = -100
    mean_loss = model(**inputs, labels=labels).loss
    summed = model(**inputs, labels=labels, num_items_in_batch=torch.tensor(5)).loss
    scored = labels if case.is_seq2seq else labels[:, 1:]  # an LM shifts its labels inside the loss
    torch.testing.assert_close(summed, mean_loss * (scored != -100).sum() / 5)


@pytest.mark.parametrize(
    "case", [c for c in CASES if not c.is_seq2seq], ids=[c.name for c in CASES if not c.is_seq2seq]
)
def test_causal_lm_loss_takes_shift_labels_when_given(case):
    """Pre-shifted targets (transformers passes them under sequence/context parallelism) replace the
    shift of `labels`, with or without `labels` beside them."""
    model = case.model()
    inputs = model_inputs(case)
    labels = random_tokens(2, 6, seed=5)
    shifted = torch.nn.functional.pad(labels[:, 1:], (0, 1), value=-100)
    loss = model(**inputs, labels=labels).loss
    torch.testing.assert_close(model(**inputs, shift_labels=shifted).loss, loss, rtol=0, atol=0)
    other = random_tokens(2, 6, seed=9)
    torch.testing.assert_close(model(**inputs, labels=other, shift_labels=shifted).loss, loss, rtol=0, atol=0)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_an_explicit_false_switch_wins_over_the_config(case):
    model = case.model(output_hidden_states=True, output_attentions=True)
    inputs = model_inputs(case)
    hidden = "decoder_hidden_states" if case.is_seq2seq else "hidden_states"
    assert getattr(model(**inputs), hidden) is not None  # the config's True when nothing is passed
    outputs = model(**inputs, output_hidden_states=False, output_attentions=False)
    assert getattr(outputs, hidden) is None
    if case.is_seq2seq:
        assert model(**inputs).cross_attentions is not None and outputs.cross_attentions is None
        assert outputs.encoder_hidden_states is None
    assert isinstance(model(**inputs, return_dict=False), tuple)


def test_seq2seq_labels_are_shifted_once():
    case = CASES[0]
    model = case.model()
    source, labels = random_tokens(2, 7), random_tokens(2, 6, seed=5)
    decoder_input_ids = model.prepare_decoder_input_ids_from_labels(labels)
    assert (decoder_input_ids[:, 0] == model.config.decoder_start_token_id).all()
    assert torch.equal(decoder_input_ids[:, 1:], labels[:, :-1])
    logits = model(input_ids=source, decoder_input_ids=decoder_input_ids).logits
    expected = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
    torch.testing.assert_close(model(input_ids=source, labels=labels).loss, expected)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_hidden_states_and_cross_attentions_are_returned_when_asked(case):
    model = case.model()
    outputs = model(**model_inputs(case), output_hidden_states=True, output_attentions=True)
    layers = model.config.decoder_layers
    if case.is_seq2seq:
        assert len(outputs.decoder_hidden_states) == layers + 1
        assert len(outputs.encoder_hidden_states) == model.config.encoder_layers + 1
        weights = outputs.cross_attentions
        # SliceNet's attention has one head, and its IO mixer attends before the decoder layers.
        blocks, heads = (layers + 1, 1) if case.config_class.model_type == "slicenet" else (layers, 2)
        assert len(weights) == blocks and weights[0].shape == (2, heads, 6, 7)
        torch.testing.assert_close(weights[0].sum(-1), torch.ones(2, heads, 6))
    else:
        assert len(outputs.hidden_states) == layers + 1
    torch.testing.assert_close(
        model(**model_inputs(case)).logits, model(**model_inputs(case), output_attentions=True).logits
    )


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_padding_is_ignored(case):
    """Right padding of a shorter row (source for seq2seq) leaves its real outputs unchanged."""
    model = case.model()
    inputs = model_inputs(case, batch=1)
    padded = {key: torch.cat([value, torch.full((1, 3), PAD)], dim=1) for key, value in inputs.items()}
    masks = {"attention_mask": torch.cat([torch.ones(1, 7 if case.is_seq2seq else 6), torch.zeros(1, 3)], 1).long()}
    if case.is_seq2seq:
        padded["decoder_input_ids"] = inputs["decoder_input_ids"]
    logits = model(**inputs).logits
    padded_logits = model(**padded, **masks).logits[:, : logits.shape[1]]
    torch.testing.assert_close(padded_logits, logits, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_a_forward_reads_the_backend_variable_once(case, monkeypatch):
    """$TALK_HF_BACKEND is read when the model's forward starts, once for all the ops it runs."""
    monkeypatch.setenv("TALK_HF_BACKEND", "auto")
    model = case.model().eval()
    reads = []
    read = _backend._environment_backend
    monkeypatch.setattr(_backend, "_environment_backend", lambda: reads.append(read()) or reads[-1])
    with torch.no_grad():
        model(**model_inputs(case))
    assert reads == ["auto"]
    monkeypatch.setenv("TALK_HF_BACKEND", "gpu")
    with pytest.raises(ValueError, match=r"\$TALK_HF_BACKEND must be one of .*'gpu'"):
        model(**model_inputs(case))


@pytest.mark.parametrize("case", CASES[:2], ids=CASE_IDS[:2])
def test_out_of_range_token_ids_raise_a_clear_error(case):
    model = case.model()
    inputs = model_inputs(case)
    inputs["input_ids"][0, 1] = 40
    with pytest.raises(ValueError, match=r"input_ids must hold token ids in \[0, 40\)"):
        model(**inputs)


def test_a_foreign_cache_is_rejected():
    from transformers import DynamicCache

    case = CASES[1]
    for name in ("cache", "past_key_values"):
        with pytest.raises(
            TypeError, match=r"the generation cache \(`cache`, or `past_key_values` .*\) must be the ConvCache"
        ):
            case.model()(**model_inputs(case), **{name: DynamicCache()}, use_cache=True)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_the_cache_is_accepted_under_its_old_and_new_names(case):
    """transformers 5.24 renamed the cache argument ``past_key_values`` to ``cache``: a forward takes
    either (the same logits), and refuses both at once."""
    model = case.model()
    inputs = model_inputs(case)
    key = "decoder_input_ids" if case.is_seq2seq else "input_ids"
    prefix, step = {**inputs, key: inputs[key][:, :-1]}, {**inputs, key: inputs[key][:, -1:]}
    logits = {}
    for name in ("cache", "past_key_values"):
        cache = returned_cache(model(**prefix, use_cache=True))
        logits[name] = model(**step, **{name: cache}, use_cache=True).logits
    torch.testing.assert_close(logits["cache"], logits["past_key_values"], rtol=0, atol=0)
    torch.testing.assert_close(logits["cache"], model(**inputs).logits[:, -1:], rtol=1e-5, atol=1e-5)
    cache = returned_cache(model(**prefix, use_cache=True))
    with pytest.raises(ValueError, match="as `cache` or as `past_key_values`.*not both"):
        model(**step, cache=cache, past_key_values=cache)


def test_light_conv_seq2seq_forward_and_padding():
    case = CASES[2]
    model = case.model(conv_type="light_conv")
    assert isinstance(model.model.encoder.layers[0].mixer.core, talk_hf.layers.LightConvCore)
    source, target = random_tokens(1, 5), random_tokens(1, 4, seed=2)
    logits = model(input_ids=source, decoder_input_ids=target).logits
    padded = torch.cat([torch.full((1, 2), PAD), source], dim=1)
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1]])
    torch.testing.assert_close(
        model(input_ids=padded, attention_mask=mask, decoder_input_ids=target).logits, logits, rtol=1e-5, atol=1e-5
    )


def test_a_decoder_mask_of_the_wrong_length_is_rejected():
    case = CASES[1]
    model = case.model()
    tokens = random_tokens(1, 4)
    cache = returned_cache(model(input_ids=tokens, use_cache=True))
    with pytest.raises(ValueError, match=r"must cover the 1 new tokens, or the 4 cached and 1 new ones, got length 3"):
        model(input_ids=tokens[:, :1], attention_mask=torch.ones(1, 3, dtype=torch.long), cache=cache)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_malformed_inputs_raise_naming_the_argument(case):
    """Float ids, an empty sequence, a mask of another batch size or length, embeddings of the wrong
    width: each a ValueError that names the argument, never a raw torch error from inside a layer."""
    model = case.model()
    inputs = model_inputs(case)
    ids = "decoder_input_ids" if case.is_seq2seq else "input_ids"
    mask = "decoder_attention_mask" if case.is_seq2seq else "attention_mask"
    bad = {
        "input_ids must hold integer token ids": dict(inputs, input_ids=inputs["input_ids"].float()),
        f"{ids} must hold at least one token": dict(inputs, **{ids: inputs[ids][:, :0]}),
        r"attention_mask must have shape \(batch, length\) with the batch of input_ids \(2\), got \(3, ": dict(
            inputs, attention_mask=torch.ones(3, inputs["input_ids"].shape[1], dtype=torch.long)
        ),
        r"attention_mask must cover the 7 tokens, got length 5"
        if case.is_seq2seq
        else r"attention_mask must cover the 6 tokens, got length 5": dict(
            inputs, attention_mask=torch.ones(2, 5, dtype=torch.long)
        ),
        f"{mask} must have shape": dict(inputs, **{mask: torch.ones(1, inputs[ids].shape[1], dtype=torch.long)}),
        r"inputs_embeds must have shape \(batch, length, 16\), got \(2, 7, 8\)"
        if case.is_seq2seq
        else r"inputs_embeds must have shape \(batch, length, 16\), got \(2, 6, 8\)": dict(
            {k: v for k, v in inputs.items() if k != "input_ids"},
            inputs_embeds=torch.randn(2, inputs["input_ids"].shape[1], 8),
        ),
        "pass exactly one of input_ids and inputs_embeds": dict(
            inputs, inputs_embeds=torch.randn(2, inputs["input_ids"].shape[1], 16)
        ),
        r"input_ids must have shape \(batch, length\)": dict(inputs, input_ids=inputs["input_ids"][0]),
    }
    for message, arguments in bad.items():
        with pytest.raises(ValueError, match=message):
            model(**arguments)


SEQ2SEQ = [case for case in CASES if case.is_seq2seq]


@pytest.mark.parametrize("case", SEQ2SEQ, ids=[case.name for case in SEQ2SEQ])
def test_a_source_serving_consecutive_rows_equals_the_source_repeated_for_each(case):
    """Beams of one sentence read its source once (an exported beam step's layout): 2 sources serving
    3 target rows each give every output of the sources repeated row by row, attention weights too."""
    model = case.model()
    source, target = random_tokens(2, 7), random_tokens(6, 5, 2)
    source_mask = torch.ones_like(source)
    source_mask[1, 4:] = 0
    with torch.no_grad():
        encoded = model.get_encoder()(source, attention_mask=source_mask)
        repeated = type(encoded)(last_hidden_state=encoded.last_hidden_state.repeat_interleave(3, dim=0))
        kwargs = dict(decoder_input_ids=target, output_attentions=True, use_cache=False)
        grouped = model(encoder_outputs=encoded, attention_mask=source_mask, **kwargs)
        expected = model(encoder_outputs=repeated, attention_mask=source_mask.repeat_interleave(3, dim=0), **kwargs)
    torch.testing.assert_close(grouped.logits, expected.logits)
    for weights, expected_weights in zip(grouped.cross_attentions, expected.cross_attentions, strict=True):
        torch.testing.assert_close(weights, expected_weights)


@pytest.mark.parametrize("case", SEQ2SEQ, ids=[case.name for case in SEQ2SEQ])
def test_target_rows_that_are_no_multiple_of_the_sources_are_rejected(case):
    model = case.model()
    encoder_outputs = model.get_encoder()(random_tokens(2, 7))
    with pytest.raises(ValueError, match="the encoder's output has batch size 2 but decoder_input_ids has 3"):
        model(decoder_input_ids=random_tokens(3, 4, 2), encoder_outputs=encoder_outputs)
