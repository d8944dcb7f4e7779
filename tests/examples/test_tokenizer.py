"""Tokenizers: BPE round trips, word-level vocabularies, loading an existing one."""

from common.tokenizer import get_tokenizer, train_tokenizer
from transformers import AutoTokenizer


def test_bpe_tokenizer_round_trips_raw_text_and_reloads(tmp_path):
    texts = ["Zwei junge Männer sind im Freien.", "Two young, white males are outside near many bushes."] * 20
    tokenizer = train_tokenizer(texts, "bpe", vocab_size=120, add_eos=True)
    ids = tokenizer(texts[1])["input_ids"]
    assert ids[-1] == tokenizer.eos_token_id == 2 and tokenizer.pad_token_id == 0
    assert tokenizer.decode(ids, skip_special_tokens=True) == texts[1]
    tokenizer.save_pretrained(tmp_path)
    assert AutoTokenizer.from_pretrained(tmp_path)(texts[1])["input_ids"] == ids


def test_word_tokenizer_maps_rare_words_to_unk():
    tokenizer = train_tokenizer(["the cat sat", "the dog sat"], "word", vocab_size=100, min_frequency=2)
    assert tokenizer.convert_ids_to_tokens(tokenizer("the cat sat")["input_ids"]) == ["the", "<unk>", "sat"]


def test_word_tokenizer_ids_have_no_hole_when_the_text_contains_unk():
    tokenizer = train_tokenizer(["a <unk> b", "b c <unk>"], "word", vocab_size=100)
    ids = sorted(tokenizer.get_vocab().values())
    assert ids == list(range(len(tokenizer))) and tokenizer.convert_tokens_to_ids("<unk>") == 3
    assert len(train_tokenizer(["a b c d e f"], "word", vocab_size=6)) == 6


def test_an_existing_tokenizer_is_loaded_not_trained(tmp_path):
    trained = train_tokenizer(["ein hund", "a dog"] * 5, "bpe", vocab_size=40, add_eos=True)
    trained.pad_token = None  # like GPT-2's: the end-of-sequence token stands in
    trained.save_pretrained(tmp_path)
    loaded = get_tokenizer(str(tmp_path), texts=None, kind="bpe", vocab_size=40)
    assert loaded("a dog")["input_ids"] == trained("a dog")["input_ids"]
    assert loaded.pad_token_id == loaded.eos_token_id == 2
