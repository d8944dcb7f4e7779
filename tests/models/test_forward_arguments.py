"""What a forward is given beyond its named arguments, and the values of its masks and positions: a
misspelt keyword, packed-sequence inputs, ``cache_position``, ``position_ids`` other than the model's
own and masks of values other than 0 and 1 are refused with an error that names them; what
transformers itself passes keeps working (``ModelTesterMixin`` in ``tests_transformers_common``).
"""

import pytest
import torch
from transformers import Trainer, TrainingArguments

from talk_hf.models.input_checks import check_position_ids

from .helpers import CASE_IDS, CASES, PAD, model_inputs, random_tokens
from .test_compile import compiled_kernels  # noqa: F401 (a fixture)

LM_CASES = [case for case in CASES if not case.is_seq2seq]
SEQ2SEQ_CASES = [case for case in CASES if case.is_seq2seq]
PACKING = r"packed sequences \(.*DataCollatorWithFlattening.*\) are computed by the causal LMs only, not by the encoder-decoders"


def _left_padded(case, model):
    """Inputs whose first row is left-padded by two tokens (source for seq2seq, the tokens for an LM), with
    a decoder mask of ones for seq2seq."""
    inputs = model_inputs(case)
    ids = inputs["input_ids"]
    mask = torch.ones_like(ids)
    mask[0, :2] = 0
    inputs.update(input_ids=ids.masked_fill(mask == 0, PAD), attention_mask=mask)
    if case.is_seq2seq:
        inputs["decoder_attention_mask"] = torch.ones_like(inputs["decoder_input_ids"])
    return inputs


def _hf_positions(mask: torch.Tensor) -> torch.Tensor:
    """Positions as transformers' generate() makes them from a mask: 0, 1, ... from each row's first
    real token, 0 at padding."""
    return (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_a_misspelt_keyword_is_refused_naming_it_and_the_keywords_taken(case):
    model = case.model()
    inputs = model_inputs(case)
    mask = torch.ones_like(inputs["input_ids"])
    taken = r"; it takes: input_ids, attention_mask, "
    with pytest.raises(TypeError, match=rf"{case.head.__name__}.forward\(\) .* attenton_mask{taken}"):
        model(**inputs, attenton_mask=mask)
    with pytest.raises(TypeError, match=rf"{case.base.__name__}.forward\(\) .* attenton_mask{taken}"):
        model.model(**inputs, attenton_mask=mask)
    if case.is_seq2seq:
        with pytest.raises(TypeError, match=r"Encoder.forward\(\) got an unexpected keyword argument 'attenton_mask'"):
            model.get_encoder()(inputs["input_ids"], attenton_mask=mask)


@pytest.mark.parametrize("name", ["cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k", "seq_idx"])
@pytest.mark.parametrize("case", SEQ2SEQ_CASES, ids=[case.name for case in SEQ2SEQ_CASES])
def test_packing_inputs_are_refused_by_the_encoder_decoders(case, name):
    """The causal LMs compute packed rows (test_packing.py); an encoder-decoder says it does not."""
    model = case.model()
    inputs = model_inputs(case)
    value = torch.tensor([0, 3, 6], dtype=torch.int32)
    for forward in (model, model.model):
        with pytest.raises(ValueError, match=rf"got {name}: {PACKING}"):
            forward(**inputs, **{name: value})


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_position_ids_equal_to_the_model_s_own_are_accepted(case):
    model = case.model()
    inputs = _left_padded(case, model)
    expected = model(**inputs).logits
    positions = {"position_ids": _hf_positions(inputs["attention_mask"])}
    if case.is_seq2seq:
        positions["decoder_position_ids"] = torch.arange(inputs["decoder_input_ids"].shape[1])
    # An encoder-decoder checks them and counts its own: the same computation.  A causal LM takes them
    # (its mixers' windows then stop at the documents' edges, here the first real tokens): the same
    # logits to float32 rounding.
    exact = {"rtol": 0, "atol": 0} if case.is_seq2seq else {"rtol": 1e-5, "atol": 1e-5}
    torch.testing.assert_close(model(**inputs, **positions).logits, expected, **exact)
    torch.testing.assert_close(model.model(**inputs, **positions).last_hidden_state, model.model(**inputs)[0])


@pytest.mark.parametrize("case", SEQ2SEQ_CASES, ids=[case.name for case in SEQ2SEQ_CASES])
def test_other_position_ids_are_refused_by_the_encoder_decoders(case):
    """An encoder-decoder counts its positions itself (as BART and Marian, which take none); a causal LM
    takes them as given (test_packing.py)."""
    model = case.model()
    inputs = _left_padded(case, model)
    shifted = _hf_positions(inputs["attention_mask"]) + 1
    with pytest.raises(ValueError, match=r"position_ids must equal .*: row 0, token 2 has 1, expected 0"):
        model(**inputs, position_ids=shifted)
    shape = rf"\(2, {shifted.shape[1]}\)"
    with pytest.raises(ValueError, match=rf"position_ids must have one position per new token, shape {shape}"):
        model(**inputs, position_ids=shifted[:, 1:])
    with pytest.raises(ValueError, match=r"position_ids must be integer positions .* got dtype torch.float32"):
        model(**inputs, position_ids=shifted.float())
    target_length = inputs["decoder_input_ids"].shape[1]
    with pytest.raises(ValueError, match=r"decoder_position_ids restart inside row 0 .*" + PACKING):
        model(**inputs, decoder_position_ids=torch.tensor([0, 1, 2, 0, 1, 2])[:target_length])


@pytest.mark.parametrize("case", LM_CASES, ids=[case.name for case in LM_CASES])
def test_malformed_position_ids_are_refused_by_the_causal_lms(case):
    model = case.model()
    inputs = _left_padded(case, model)
    positions = _hf_positions(inputs["attention_mask"])
    shape = rf"\(2, {positions.shape[1]}\)"
    with pytest.raises(ValueError, match=rf"position_ids must have one position per token, shape {shape}"):
        model(**inputs, position_ids=positions[:, 1:])
    with pytest.raises(ValueError, match=r"position_ids must be integer positions .* got dtype torch.float32"):
        model(**inputs, position_ids=positions.float())


def test_positions_restarting_after_left_padding_are_not_taken_for_packing():
    """Only real tokens are compared: padding's positions (0 or 1 in transformers' releases) are free."""
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    for padding_position in (0, 1):
        positions = _hf_positions(mask).masked_fill(mask == 0, padding_position)
        check_position_ids("position_ids", positions, _hf_positions(mask), mask, batch=2, length=5)
    packed = torch.tensor([[0, 0, 0, 1, 2], [0, 1, 2, 0, 1]])
    with pytest.raises(ValueError, match=r"position_ids restart inside row 1 \(token 3 has position 0 after 2\)"):
        check_position_ids("position_ids", packed, _hf_positions(mask), mask, batch=2, length=5)


@pytest.mark.parametrize("case", SEQ2SEQ_CASES[:2], ids=[case.name for case in SEQ2SEQ_CASES[:2]])
def test_a_compiled_graph_checks_position_ids_without_a_graph_break(case, compiled_kernels):  # noqa: F811
    torch._dynamo.reset()
    model = case.model()
    inputs = _left_padded(case, model)
    positions = _hf_positions(inputs["attention_mask"])
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(**inputs, position_ids=positions).logits, model(**inputs).logits)
        with pytest.raises(RuntimeError, match="position_ids differ from the positions the model counts"):
            compiled(**inputs, position_ids=positions + 1)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_cache_position_is_refused_saying_where_positions_come_from(case):
    model = case.model()
    inputs = model_inputs(case)
    with pytest.raises(TypeError, match=r"takes no cache_position .* counts positions from its cache"):
        model(**inputs, cache_position=torch.arange(inputs["input_ids"].shape[1]))


def _mask_names(case):
    return ["attention_mask", "decoder_attention_mask"] if case.is_seq2seq else ["attention_mask"]


@pytest.mark.parametrize("value", [2, 0.5, -1, float("nan")], ids=["2", "0.5", "-1", "nan"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_a_mask_of_values_other_than_0_and_1_is_refused(case, value):
    model = case.model()
    inputs = model_inputs(case)
    for name in _mask_names(case):
        ids = inputs["decoder_input_ids" if name.startswith("decoder") else "input_ids"]
        mask = torch.ones(ids.shape, dtype=torch.float32 if isinstance(value, float) else torch.long)
        mask[1, -1] = value
        expected = "nan" if value != value else str(value)
        with pytest.raises(ValueError, match=rf"{name} must hold only 0 \(padding\) and 1 \(real token\).*{expected}"):
            model(**inputs, **{name: mask})


@pytest.mark.parametrize("case", SEQ2SEQ_CASES, ids=[case.name for case in SEQ2SEQ_CASES])
def test_a_source_mask_given_with_encoder_outputs_is_checked_too(case):
    """generate() passes the encoder's output and the source mask at every step: the mask still counts."""
    model = case.model()
    inputs = model_inputs(case)
    encoder_outputs = model.get_encoder()(inputs["input_ids"])
    mask = torch.ones_like(inputs["input_ids"])
    mask[0, 0] = 2
    with pytest.raises(ValueError, match=r"attention_mask must hold only 0 \(padding\) and 1"):
        model(decoder_input_ids=inputs["decoder_input_ids"], encoder_outputs=encoder_outputs, attention_mask=mask)


@pytest.mark.parametrize("dtype", [torch.bool, torch.long, torch.int32, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_masks_of_0_and_1_are_accepted_in_any_dtype(case, dtype):
    model = case.model()
    inputs = _left_padded(case, model)
    expected = model(**inputs).logits
    typed = {name: inputs[name].to(dtype) for name in _mask_names(case)}
    torch.testing.assert_close(model(**{**inputs, **typed}).logits, expected, rtol=0, atol=0)


@pytest.mark.parametrize("case", SEQ2SEQ_CASES, ids=[case.name for case in SEQ2SEQ_CASES])
def test_the_encoder_returns_a_tuple_when_asked(case):
    model = case.model()
    source = model_inputs(case)["input_ids"]
    outputs = model.get_encoder()(source, output_hidden_states=True, return_dict=False)
    assert isinstance(outputs, tuple)
    torch.testing.assert_close(outputs[0], model.get_encoder()(source).last_hidden_state)
    assert len(outputs[1]) == model.config.encoder_layers + 1


@pytest.mark.parametrize("case", [CASES[0], LM_CASES[0]], ids=[CASES[0].name, LM_CASES[0].name])
def test_trainer_gives_num_items_in_batch_to_a_base_model_s_loss_function_not_to_its_forward(case, tmp_path):
    """A base model has no loss (``accepts_loss_kwargs = False``): with ``compute_loss_func`` and gradient
    accumulation, Trainer passes the count to that function, and the forward, which refuses it, gets none."""
    model = case.base(case.config()).train()
    tokens = random_tokens(8, 6, seed=11)
    names = ["input_ids", "labels", "decoder_input_ids"] if case.is_seq2seq else ["input_ids", "labels"]
    rows = [dict.fromkeys(names, row) for row in tokens]
    counts = []

    def loss_of(outputs, labels, num_items_in_batch=None):
        counts.append(num_items_in_batch)
        return outputs.last_hidden_state.pow(2).mean()

    arguments = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        max_steps=2,
        label_names=["labels"],
        report_to=[],
        use_cpu=True,
        save_strategy="no",
    )
    Trainer(model=model, args=arguments, train_dataset=rows, compute_loss_func=loss_of).train()
    assert counts and all(count is not None for count in counts)
