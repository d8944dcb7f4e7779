"""Token batching, the collators, LM blocks and documents, and packed rows."""

import math

import pytest
import torch
from common.batching import (
    PackedLMCollator,
    TokenBatchSampler,
    TranslationCollator,
    collate_lm,
    lm_blocks,
    lm_documents,
    pack_documents,
)
from common.models import build_model
from common.tokenizer import train_tokenizer

LENGTHS = torch.randint(1, 40, (300,), generator=torch.Generator().manual_seed(1)).tolist()


def test_token_batches_respect_the_budget_and_cover_the_data():
    sampler = TokenBatchSampler(LENGTHS, max_tokens=100, seed=3)
    batches = list(sampler)
    assert len(batches) == len(sampler)
    assert all(len(b) * max(LENGTHS[i] for i in b) <= 100 for b in batches)
    assert sorted(i for b in batches for i in b) == list(range(len(LENGTHS)))
    # Greedy filling: adding the next example of the sorted order would overflow.
    assert sum(len(b) for b in batches) / len(batches) > 3


def test_token_batches_are_a_function_of_seed_and_epoch():
    sampler = TokenBatchSampler(LENGTHS, max_tokens=100, seed=3)
    first = list(sampler)
    assert list(sampler) == first
    sampler.set_epoch(1)
    second = list(sampler)
    assert second != first and len(second) == len(first)
    sampler.set_epoch(0)
    assert list(sampler) == first


def test_token_batches_drop_the_tail_to_whole_steps():
    full = len(TokenBatchSampler(LENGTHS, max_tokens=100))
    sampler = TokenBatchSampler(LENGTHS, max_tokens=100, multiple_of=7)
    assert len(sampler) == full - full % 7 and len(list(sampler)) == len(sampler)


def test_token_batches_reject_what_cannot_fit():
    with pytest.raises(ValueError, match="raise max_tokens"):
        TokenBatchSampler([5, 50], max_tokens=40)
    with pytest.raises(ValueError, match="fewer than"):
        TokenBatchSampler([5, 5], max_tokens=40, multiple_of=2)


def test_translation_collator_shifts_targets_behind_the_start_token():
    batch = TranslationCollator(pad_token_id=0, decoder_start_token_id=2)(
        [{"source": [5, 6, 2], "target": [7, 2], "index": 4}, {"source": [8, 2], "target": [9, 10, 2], "index": 1}]
    )
    assert batch["input_ids"].tolist() == [[5, 6, 2], [8, 2, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch["decoder_input_ids"].tolist() == [[2, 7, 0], [2, 9, 10]]
    assert batch["labels"].tolist() == [[7, 2, -100], [9, 10, 2]]
    assert batch["index"].tolist() == [4, 1]


def test_lm_blocks_predict_every_token_once():
    lines = [[3, 4, 5], [], [6, 7, 8, 9]]
    stream = [3, 4, 5, 1, 1, 6, 7, 8, 9, 1]  # eos = 1 after every line
    blocks = lm_blocks(lines, eos_token_id=1, block_size=3)
    assert blocks.shape == (3, 4)
    batch = collate_lm(list(blocks))
    assert batch["labels"].flatten().tolist() == stream[1:10]
    assert batch["input_ids"].flatten().tolist() == stream[:9]
    with pytest.raises(ValueError, match="do not fill one block"):
        lm_blocks([[3]], eos_token_id=1, block_size=8)


def test_lm_documents_keep_lines_whole_unless_longer_than_a_row():
    lines = [[3, 4, 5], [], [6, 7, 8, 9, 10, 11]]
    assert lm_documents(lines, eos_token_id=1, max_length=4) == [[3, 4, 5, 1], [6, 7, 8, 9], [9, 10, 11, 1]]


def test_packed_rows_hold_every_document_whole_within_the_row_length():
    rows = pack_documents(LENGTHS, 64)
    assert sorted(i for row in rows for i in row) == list(range(len(LENGTHS)))
    assert all(sum(LENGTHS[i] for i in row) <= 64 for row in rows)
    # Best fit decreasing leaves little space: fewer rows than one more than the tokens need, on these lengths.
    assert len(rows) <= math.ceil(sum(LENGTHS) / 64) + 1
    assert pack_documents([3, 5, 2, 4], 7) == [[1, 2], [3, 0]]  # best fit: the 3 fills the 4's row, the 2 the 5's
    with pytest.raises(ValueError, match=r"document 1 has 9 tokens: each must hold 1 to 8"):
        pack_documents([3, 9], 8)
    with pytest.raises(ValueError, match=r"document 0 has 0 tokens"):
        pack_documents([0], 8)


def test_packed_collator_restarts_positions_and_predicts_within_documents():
    batch = PackedLMCollator(pad_token_id=0, row_length=6)([[[5, 6, 7], [8, 9]], [[4]]])
    assert batch["input_ids"].tolist() == [[5, 6, 7, 8, 9, 0], [4, 0, 0, 0, 0, 0]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1, 0], [0, 0, 1, 2, 3, 4]]
    assert batch["labels"].tolist() == [[6, 7, -100, 9, -100, -100], [-100] * 6]


@pytest.mark.parametrize("model_type", ["talk", "transformer"])
def test_a_packed_batch_gives_each_document_the_logits_it_has_alone(model_type):
    """Our models and the GPT-2 baseline read the collator's documents from position_ids alone."""
    tokenizer = train_tokenizer(["a b c d e f g h"] * 4, "word", vocab_size=40, min_frequency=1)
    model = build_model(model_type, tokenizer, False, d_model=16, ffn_dim=32, heads=2, decoder_layers=1).eval()
    documents = [[5, 6, 7], [8, 9], [6, 5, 9, 7]]
    batch = PackedLMCollator(tokenizer.pad_token_id, row_length=10)([documents])
    with torch.no_grad():
        logits = model(batch["input_ids"], position_ids=batch["position_ids"], use_cache=False).logits[0]
        start = 0
        for document in documents:
            alone = model(torch.tensor([document]), use_cache=False).logits[0]
            torch.testing.assert_close(logits[start : start + len(document)], alone, rtol=1e-5, atol=1e-5)
            start += len(document)
