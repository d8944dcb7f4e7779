"""Train a tokenizer on the training text and wrap it as a `PreTrainedTokenizerFast`.

Two kinds:

* `bpe`  -- byte-pair encoding over SentencePiece-style pieces (`▁` marks a word start), so that
  `decode` gives back the original spacing: right for raw text and BLEU (joint source+target
  vocabulary for translation);
* `word` -- one id per whitespace-separated word (the `vocab_size` most frequent), with `<unk>`
  for the rest and for words seen fewer than `min_frequency` times: the classic setup for
  pre-tokenised WikiText.

Special tokens and their ids are the same for both kinds: `<pad>` 0, `<s>` 1, `</s>` 2, `<unk>` 3.
With `add_eos=True` (translation) the tokenizer appends `</s>` to every encoded text, so a
sentence encodes the same at training and at inference; the LM pipeline appends it itself.
"""

from collections import Counter

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

SPECIAL_TOKENS = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
KINDS = ("bpe", "word")


def train_tokenizer(texts, kind, vocab_size, min_frequency=1, add_eos=False):
    """A `PreTrainedTokenizerFast` trained on `texts` (a list of str)."""
    specials = list(SPECIAL_TOKENS.values())
    if kind == "bpe":
        tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
        tokenizer.decoder = decoders.Metaspace()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=specials, show_progress=False
        )
        tokenizer.train_from_iterator(texts, trainer=trainer)
    elif kind == "word":
        # Counted here rather than by WordLevelTrainer, which drops the id of `<unk>` when the
        # text itself contains `<unk>` (WikiText does) and so leaves a hole in the ids.
        counts = Counter(word for text in texts for word in text.split())
        words = sorted(
            (w for w, c in counts.items() if c >= min_frequency and w not in specials), key=lambda w: (-counts[w], w)
        )
        vocab = {token: i for i, token in enumerate(specials + words[: max(0, vocab_size - len(specials))])}
        tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
        tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    else:
        raise ValueError(f"tokenizer kind must be one of {KINDS}, not {kind!r}")
    if add_eos:
        eos_id = tokenizer.token_to_id("</s>")
        tokenizer.post_processor = processors.TemplateProcessing(
            single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", eos_id)]
        )
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, **SPECIAL_TOKENS)


def get_tokenizer(name_or_path, texts, kind, vocab_size, min_frequency=1, add_eos=False):
    """An existing tokenizer when `name_or_path` is given, otherwise one trained on `texts`.

    An existing tokenizer must have a pad token and an end-of-sequence token (GPT-2's lacks the
    pad token: its end-of-sequence token stands in).
    """
    if name_or_path is None:
        return train_tokenizer(texts, kind, vocab_size, min_frequency, add_eos)
    tokenizer = AutoTokenizer.from_pretrained(name_or_path)
    if tokenizer.eos_token_id is None:
        raise ValueError(f"tokenizer {name_or_path} has no end-of-sequence token")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer
