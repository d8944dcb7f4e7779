"""Packed and block training where a batch could hold no token to predict (issue #57, item 3): a
`--block_size` too small to predict anything is refused at the start, naming the option and the
minimum, and lines cut into pieces never leave a piece (so a row, a micro-batch or a step) with
nothing to predict, which divided the step's loss by zero mid-run.
"""

import pytest
import torch
from common.batching import PackedLMCollator, lm_blocks, lm_documents, pack_documents

from .conftest import load_script
from .test_run_faults import train
from .test_start_faults import LM_SCRIPT, lm_data, trainer_script_error


def packed_batches(token_lists, block_size):
    """The batches of one row each that `train.py --packing --max_tokens <block_size>` trains on."""
    documents = lm_documents(token_lists, eos_token_id=1, max_length=block_size)
    collate = PackedLMCollator(pad_token_id=0, row_length=block_size)
    rows = pack_documents([len(d) for d in documents], block_size)
    return [collate([[documents[i] for i in row]]) for row in rows]


@pytest.mark.parametrize("extra", [0, 1, 2, 9])
def test_every_packed_row_predicts_a_token_when_lines_are_cut(extra):
    """Lines of `block_size + extra` tokens (their end token makes one more): a line one token longer
    than a row once left its end token as a piece of its own, rows of such pieces predicted nothing."""
    block_size = 8
    lines = [list(range(10 + i, 10 + i + block_size + extra)) for i in range(24)]
    batches = packed_batches(lines, block_size)
    assert all(batch["labels"].ne(-100).any() for batch in batches)
    # Every token of a line but its first is predicted exactly once, the end token included.
    predicted = torch.cat([batch["labels"][batch["labels"] != -100] for batch in batches])
    expected = torch.tensor([token for line in lines for token in (*line[1:], 1)])
    assert sorted(predicted.tolist()) == sorted(expected.tolist())


def test_pieces_share_their_edge_token_and_hold_at_most_max_length():
    documents = lm_documents([[3, 4, 5, 6, 7, 8, 9]], eos_token_id=1, max_length=3)
    assert documents == [[3, 4, 5], [5, 6, 7], [7, 8, 9], [9, 1]]
    assert lm_documents([[3, 4]], eos_token_id=1, max_length=3) == [[3, 4, 1]]  # whole when it fits


def test_sizes_that_predict_nothing_are_refused_by_the_batching_helpers():
    with pytest.raises(ValueError, match="a document of at most 1 token predicts nothing"):
        lm_documents([[3, 4]], eos_token_id=1, max_length=1)
    with pytest.raises(ValueError, match="a block of 0 \\+ 1 tokens predicts no token"):
        lm_blocks([[3, 4, 5]], eos_token_id=1, block_size=0)


def test_train_py_refuses_packing_with_a_block_of_one_token():
    with pytest.raises(SystemExit, match=r"^error: --packing needs --block_size >= 2 .*, not 1$"):
        load_script(LM_SCRIPT).parse_args(["--output_dir", "x", "--packing", "--block_size", "1"])
    load_script(LM_SCRIPT).parse_args(["--output_dir", "x", "--block_size", "1"])  # blocks of 1 + 1 tokens predict one


@pytest.mark.parametrize("packing", [[], ["--packing"]])
def test_run_clm_refuses_a_block_of_one_token_before_loading_anything(tmp_path, monkeypatch, packing):
    flags = ["--model_name_or_path", tmp_path / "absent", "--output_dir", tmp_path / "run", "--do_train"]
    message = trainer_script_error(monkeypatch, "language-modeling/run_clm.py", *flags, "--block_size", "1", *packing)
    assert message == "error: --block_size must be >= 2 (a sequence of one token predicts nothing), not 1"


def test_packed_training_on_lines_one_token_longer_than_a_row_runs_to_the_end(tmp_path):
    """The mid-run trigger: every line is `--block_size` words, one token more with its end token,
    and `--max_tokens` is one row. A whole epoch trains every row once, each a step of its own."""
    words = "the cat sat on a mat by dog".split()
    lines = [" ".join(words[i:] + words[:i]) for i in range(8)] * 2  # 16 lines of 8 words
    data = lm_data(tmp_path / "data", train=lines)
    args = ["--data_dir", data, *"--d_model 16 --ffn_dim 32 --heads 2 --decoder_layers 1".split()]
    args += [*"--packing --block_size 8 --max_tokens 8 --epochs 1 --log_every 1 --threads 1 --test_split".split(), ""]
    train(tmp_path / "run", args=args)
    steps = [line for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines() if '"loss"' in line]
    assert len(steps) == 20  # 16 rows of 8-token pieces, 4 rows of the 16 two-token pieces
    assert "NaN" not in "".join(steps) and (tmp_path / "run" / "best").is_dir()
