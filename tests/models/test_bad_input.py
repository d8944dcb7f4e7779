"""Empty batches and empty sequences: a ValueError that names the argument, from forward() and from
generate() alike, never a raw torch error from inside a layer or from transformers' decoding loop.

transformers' own BART and GPT-2 fail on an empty batch with a raw RuntimeError (a reshape of 0
elements), so there is no sensible behaviour to match: an empty batch is refused.
"""

import pytest
import torch

from .helpers import CASE_IDS, CASES, model_inputs, random_tokens

EMPTY_BATCH = r"must hold a batch of at least one row \(one sequence\), got shape \(0, "


@pytest.mark.parametrize("num_beams", [1, 2], ids=["greedy", "beam"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_generate_refuses_an_empty_batch(case, num_beams):
    model = case.model()
    with pytest.raises(ValueError, match="input_ids " + EMPTY_BATCH):
        model.generate(random_tokens(0, 5), num_beams=num_beams, max_new_tokens=3)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_forward_refuses_an_empty_batch(case):
    model = case.model()
    inputs = model_inputs(case)
    empty_ids = {name: ids[:0] for name, ids in inputs.items()}
    with pytest.raises(ValueError, match="input_ids " + EMPTY_BATCH):
        model(**empty_ids)
    with pytest.raises(ValueError, match="inputs_embeds " + EMPTY_BATCH):
        model(**dict(empty_ids, input_ids=None, inputs_embeds=torch.randn(0, 5, model.config.d_model)))
    if case.is_seq2seq:
        with pytest.raises(ValueError, match="decoder_input_ids " + EMPTY_BATCH):
            model(**dict(inputs, decoder_input_ids=inputs["decoder_input_ids"][:0]))


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_generate_refuses_an_empty_prompt(case):
    model = case.model()
    with pytest.raises(ValueError, match=r"input_ids must hold at least one token, got shape \(1, 0\)"):
        model.generate(random_tokens(1, 0), max_new_tokens=3)
