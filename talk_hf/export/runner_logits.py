"""transformers' logits processors and sampling warpers of one ``generate`` request, in numpy.

Copied beside ``runner.py`` into every exported folder (numpy only).  `LogitsProcessors` applies, in
the order of transformers' ``_get_logits_processor`` (5.x), the processors that the request's
settings turn on (`runner_settings.APPLIED`): repetition penalty, n-gram blocking, bad words, the
minimum length (the end tokens forbidden), forced first / last tokens, suppressed tokens, then, when
sampling, temperature, top-k and top-p.  Each takes the rows' tokens so far, ``sequences`` (N, L)
int64 (the decoder start token or the prompt, then the new tokens), and their scores (N, V) float32:
the step's logits for greedy search and sampling, their log-softmax for beam search, as generate
passes them.  ``L`` is the length ``generate`` counts (``input_ids.shape[-1]``).

Beside them, the row-wise helpers of decoding: `softmax`, `log_softmax` and `top_k`; `runner_sampling`
draws tokens from the processed scores.
"""

from __future__ import annotations

import numpy as np

NO_TOKENS = np.zeros(0, np.int64)


class _Forbid:
    """Set ``tokens`` to -inf at the lengths where ``applies(length)`` holds (minimum length, suppressed
    tokens, single-token bad words)."""

    def __init__(self, tokens, applies):
        self.tokens, self.applies = np.asarray(tokens, np.int64), applies

    def forbidden(self, length: int) -> np.ndarray:
        return self.tokens if self.applies(length) else NO_TOKENS

    def __call__(self, sequences: np.ndarray, scores: np.ndarray) -> np.ndarray:
        if self.applies(sequences.shape[1]):
            scores[:, self.tokens] = -np.inf
        return scores


class _Force:
    """At ``length`` (``forced_bos_token_id``: 1, ``forced_eos_token_id``: ``max_length - 1``) every
    token -inf but ``tokens``, which score 0."""

    def __init__(self, tokens, length: int):
        self.tokens, self.length = np.asarray(tokens, np.int64), length

    def forbidden(self, length: int) -> np.ndarray | None:
        return NO_TOKENS if length != self.length else None

    def __call__(self, sequences: np.ndarray, scores: np.ndarray) -> np.ndarray:
        if sequences.shape[1] == self.length:
            scores[:] = -np.inf
            scores[:, self.tokens] = 0
        return scores


class _Rewrite:
    """A processor that changes scores other than by forbidding a fixed set of tokens."""

    def forbidden(self, length: int) -> None:
        return None


class _RepetitionPenalty(_Rewrite):
    """Every token in a row's sequence (but its ``ignored`` (N,) leading columns: a causal LM's left
    padding) scores ``score * penalty`` if negative, else ``score / penalty``."""

    def __init__(self, penalty: float, ignored: np.ndarray):
        self.penalty, self.ignored = penalty, ignored

    def __call__(self, sequences: np.ndarray, scores: np.ndarray) -> np.ndarray:
        vocab = scores.shape[1]
        seen = np.where(np.arange(sequences.shape[1]) < self.ignored[:, None], vocab, sequences)
        widened = np.concatenate([scores, np.zeros((len(scores), 1), scores.dtype)], axis=1)  # column V: ignored
        score = np.take_along_axis(widened, seen, axis=1)
        np.put_along_axis(widened, seen, np.where(score < 0, score * self.penalty, score / self.penalty), axis=1)
        return widened[:, :vocab]


class _NoRepeatNGram(_Rewrite):
    """A token that would repeat an n-gram already in the row's sequence scores -inf."""

    def __init__(self, size: int):
        self.size = size

    def __call__(self, sequences: np.ndarray, scores: np.ndarray) -> np.ndarray:
        length = sequences.shape[1]
        if length < self.size:
            return scores
        windows = np.lib.stride_tricks.sliding_window_view(sequences, self.size, axis=1)  # (N, L - n + 1, n)
        prefix = sequences[:, length + 1 - self.size :]  # (N, n - 1): the n-gram the next token would end
        rows, starts = np.nonzero((windows[..., :-1] == prefix[:, None, :]).all(axis=-1))
        scores[rows, windows[rows, starts, -1]] = -np.inf
        return scores


class _BadWordSequences(_Rewrite):
    """The last token of a bad word of several tokens scores -inf where the row ends with the others."""

    def __init__(self, words: list[list[int]]):
        self.words = words

    def __call__(self, sequences: np.ndarray, scores: np.ndarray) -> np.ndarray:
        for *prefix, last in self.words:
            if len(prefix) <= sequences.shape[1]:
                scores[(sequences[:, -len(prefix) :] == prefix).all(axis=1), last] = -np.inf
        return scores


class _Temperature(_Rewrite):
    def __init__(self, temperature: float):
        self.temperature = temperature

    def __call__(self, sequences: np.ndarray, scores: np.ndarray) -> np.ndarray:
        return scores / np.float32(self.temperature)


class _TopK(_Rewrite):
    """Scores below a row's k-th largest become -inf (ties with it stay)."""

    def __init__(self, k: int):
        self.k = k

    def __call__(self, sequences: np.ndarray, scores: np.ndarray) -> np.ndarray:
        k = min(self.k, scores.shape[1])
        kth = -np.partition(-scores, k - 1, axis=1)[:, k - 1 : k]
        return np.where(scores < kth, np.float32(-np.inf), scores)


class _TopP(_Rewrite):
    """The fewest most probable tokens whose probability reaches ``top_p`` stay (at least ``keep``)."""

    def __init__(self, top_p: float, keep: int):
        self.top_p, self.keep = top_p, keep

    def __call__(self, sequences: np.ndarray, scores: np.ndarray) -> np.ndarray:
        order = np.argsort(scores, axis=1, kind="stable")  # ascending
        cumulative = np.cumsum(softmax(np.take_along_axis(scores, order, axis=1)), axis=1)
        drop = cumulative <= np.float32(1 - self.top_p)
        drop[:, -self.keep :] = False
        removed = np.zeros_like(drop)
        np.put_along_axis(removed, order, drop, axis=1)
        return np.where(removed, np.float32(-np.inf), scores)


class LogitsProcessors:
    """The processors (and, when sampling, warpers) of one request, in transformers' order.

    Args:
        settings: `runner_settings.resolved_settings`' values.
        end_tokens: the end token ids (K,) int64, possibly none.
        prompt_length: the columns before the new tokens (the decoder start token, or the prompt).
        leading_padding: (N,) each row's padding columns before its first real token (left padding of a
            causal LM's prompt, one entry per decoded row), which the repetition penalty ignores.
    """

    def __init__(self, settings: dict, end_tokens: np.ndarray, prompt_length: int, leading_padding: np.ndarray):
        self.processors = []
        add = self.processors.append
        if settings["repetition_penalty"] != 1.0:
            add(_RepetitionPenalty(settings["repetition_penalty"], leading_padding))
        if settings["no_repeat_ngram_size"] > 0:
            add(_NoRepeatNGram(settings["no_repeat_ngram_size"]))
        words = [word for word in settings["bad_words_ids"] or [] if len(word) > 1 or word[0] not in end_tokens]
        if any(len(word) == 1 for word in words):
            add(_Forbid([word[0] for word in words if len(word) == 1], lambda length: True))
        if any(len(word) > 1 for word in words):
            add(_BadWordSequences([word for word in words if len(word) > 1]))
        min_new = settings["min_new_tokens"]
        if len(end_tokens) and min_new > 0:
            add(_Forbid(end_tokens, lambda length: length - prompt_length < min_new))
        if settings["forced_bos_token_id"] is not None:
            add(_Force([settings["forced_bos_token_id"]], 1))
        if settings["forced_eos_token_id"] is not None:
            add(_Force(settings["forced_eos_token_id"], settings["max_length"] - 1))
        if settings["suppress_tokens"] is not None:
            add(_Forbid(settings["suppress_tokens"], lambda length: True))
        if settings["begin_suppress_tokens"] is not None:
            begin = prompt_length + (prompt_length == 1 and settings["forced_bos_token_id"] is not None)
            add(_Forbid(settings["begin_suppress_tokens"], lambda length: length == begin))
        if settings["do_sample"]:
            # beam sampling keeps a token that does not end per beam (generate's min_tokens_to_keep)
            keep = 1 if settings["num_beams"] == 1 else len(end_tokens) + 1 if len(end_tokens) else 2
            if settings["temperature"] != 1.0:
                add(_Temperature(settings["temperature"]))
            if settings["top_k"] != 0:
                add(_TopK(max(settings["top_k"], keep)))
            if settings["top_p"] < 1.0:
                add(_TopP(settings["top_p"], keep))

    def __call__(self, sequences: np.ndarray, scores: np.ndarray) -> np.ndarray:
        """(N, L) tokens so far and (N, V) scores -> the processed (N, V) scores (a new array)."""
        if self.processors:
            scores = scores.copy()
        for processor in self.processors:
            scores = processor(sequences, scores)
        return scores

    def forbidden(self, length: int) -> np.ndarray | None:
        """The token ids that the processors set to -inf in every row at sequence length ``length`` when
        that is all they do there (beam search can then rank the step's raw log-probabilities and drop
        those tokens); None when one of them changes scores otherwise."""
        found = [processor.forbidden(length) for processor in self.processors]
        return None if any(ids is None for ids in found) else np.unique(np.concatenate([NO_TOKENS, *found]))


def softmax(scores: np.ndarray) -> np.ndarray:
    """(N, M) -> the softmax of each row, float32 (-inf scores get 0)."""
    exp = np.exp(scores - scores.max(axis=1, keepdims=True))
    return exp / exp.sum(axis=1, keepdims=True)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """(N, V) -> the log-softmax of each row, float32."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def top_k(values: np.ndarray, k: int) -> np.ndarray:
    """(N, M) -> (N, k) indices of the k largest values per row, largest first, equal values lowest index
    first (a stable sort's order; only the k largest are sorted unless a tie straddles the k-th)."""
    if 4 * k >= values.shape[1]:
        return np.argsort(-values, axis=1, kind="stable")[:, :k]
    part = np.argpartition(-values, k - 1, axis=1)[:, :k]  # the k largest, in no order
    picked = np.take_along_axis(values, part, axis=1)
    kth = picked.min(axis=1, keepdims=True)
    if ((values == kth).sum(axis=1) != (picked == kth).sum(axis=1)).any():  # equal values left out: which is arbitrary
        return np.argsort(-values, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(part, np.lexsort((part, -picked), axis=1), axis=1)
