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
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

SPECIAL_TOKENS = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
KINDS = ("bpe", "word")


def train_tokenizer(texts, kind, vocab_size, min_frequency=1, add_eos=False):
    """A `PreTrainedTokenizerFast` trained on `texts` (a list of str).

    Raises ValueError when the text yields no token besides the special ones (blank text, or no word
    as frequent as `min_frequency`): such a tokenizer would turn every text into `<unk>`s.
    """
    specials = list(SPECIAL_TOKENS.values())
    if not any(text.strip() for text in texts):
        raise ValueError(
            f"the training text is blank ({len(texts)} texts, all empty or spaces): a tokenizer needs text"
        )
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
    if tokenizer.get_vocab_size() <= len(specials):  # a word tokenizer whose words are all too rare
        raise ValueError(
            f"no word of the training text besides the special tokens occurs min_frequency={min_frequency} times: the {kind} tokenizer "
            "would know only its special tokens"
        )
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
    tokenizer = load_tokenizer(name_or_path)
    if tokenizer.eos_token_id is None:
        raise ValueError(f"tokenizer {name_or_path} has no end-of-sequence token")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_tokenizer(name_or_path):
    """`AutoTokenizer.from_pretrained(name_or_path)`, whose failures become a ValueError that names the
    folder (or Hub name) and, for a folder, the file a tokenizer needs: `tokenizer.json`, which
    `save_pretrained` of a fast tokenizer writes (without it transformers tries a conversion that
    ends in an error about sentencepiece)."""
    try:
        return AutoTokenizer.from_pretrained(name_or_path)
    except Exception as error:  # transformers and tokenizers raise many kinds
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        folder = Path(name_or_path)
        if not folder.is_dir():
            raise ValueError(
                f"tokenizer {name_or_path} is not a folder, and as a Hub name it does not load ({reason})"
            ) from error
        if not (folder / "tokenizer.json").is_file():
            files = ", ".join(sorted(p.name for p in folder.iterdir())) or "nothing"
            raise ValueError(
                f"tokenizer folder {folder} has no tokenizer.json, the file that save_pretrained of a fast "
                f"tokenizer writes (it holds {files}): give the folder of a saved tokenizer"
            ) from error
        raise ValueError(f"tokenizer folder {folder} does not load ({reason})") from error
