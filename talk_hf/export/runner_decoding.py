"""The runner's decoding loops after the prompt: greedy search and sampling, beam search and beam sampling.

Copied beside ``runner.py`` into every exported folder (numpy only).  Both follow transformers'
``generate`` (5.x): ``_sample`` (the processed logits' argmax, or a draw from their softmax; a row
that produced an end token continues with padding) and the vectorised ``_beam_search`` (the
log-softmax of the logits, processed, plus each beam's running score; ``2 * num_beams`` candidates per
step, or that many drawn without replacement when sampling; length penalty and ``early_stopping``
True / False / ``"never"``), float32 like it.

Both run the steps on buffers bound once per request (`runner_steps.BoundSteps`), beam search reordering
the windows in them.  Beam search ranks a step's candidates in ONNX Runtime (`OnnxGenerator.candidates`)
when the step's processors only forbid a fixed set of tokens (`LogitsProcessors.forbidden`: the end
tokens before ``min_new_tokens``, suppressed tokens): it ranks ``beams`` more candidates per forbidden
token and drops those.  Any other processor, or sampling, ranks the (batch, beams x vocabulary) scores in numpy.
"""

from __future__ import annotations

import numpy as np

from . import runner_logits as logits_processing
from . import runner_sampling


class Decoding:
    """One generate call after the prompt.

    Args:
        generator: the `OnnxGenerator` (its ``step``, ``candidates``, end tokens and padding id).
        logits: the prompt's last logits (B, V); states: each layer's (B, history, C) window after it;
        source: the step's source inputs (encoder-decoders; empty for an LM): both bound to the request's
            steps (``steps``, `OnnxGenerator.bind_steps`) when the decoding starts; seen: (B, 1) tokens seen
            per row (the next token's position).
        prompt: (B, P) int64 columns before the new tokens (the decoder start token, or the prompt).
        settings: `runner_request.resolved_settings`' values; processors: the request's `LogitsProcessors`;
        rng: the numpy Generator that sampling draws from (None without sampling).
    """

    def __init__(self, generator, logits, states, source, seen, prompt, settings, processors, rng):
        self.generator, self.logits, self.states, self.source, self.seen = generator, logits, states, source, seen
        self.prompt, self.settings, self.processors, self.rng = prompt, settings, processors, rng

    def advance(self, tokens: np.ndarray) -> None:
        """Feed the (B,) ``tokens``: the logits of the next step (its states stay in ``steps``)."""
        column = tokens.reshape(-1, 1).astype(np.int64)
        self.logits = self.steps.step(column, self.seen, np.ones_like(column))
        self.seen = self.seen + 1

    def greedy(self) -> np.ndarray:
        """(B, P + new) tokens: the prompt, then each step's argmax (or draw) of the processed logits."""
        is_end, pad, max_new = self.generator.is_end, self.generator.pad, self.settings["max_new_tokens"]
        sequences, running = self.prompt, np.ones(len(self.logits), dtype=bool)
        self.steps = self.generator.bind_steps(self.states, self.source)
        for new in range(max_new):
            scores = self.processors(sequences, self.logits)
            chosen = runner_sampling.sample(scores, self.rng) if self.rng is not None else scores.argmax(axis=-1)
            chosen = np.where(running, chosen, pad)
            sequences = np.concatenate([sequences, chosen[:, None]], axis=1)
            running &= ~is_end[chosen]
            if new + 1 == max_new or not running.any():
                break
            self.advance(chosen)
        return sequences

    def candidates(self, sequences: np.ndarray, beam_scores: np.ndarray, keep: int) -> tuple[np.ndarray, np.ndarray]:
        """The step's ``keep`` candidates per batch row: (B, keep) scores ``processed log_softmax(logits) +
        beam score``, largest first, and their indices ``beam * V + token`` (B, keep), from the running
        (B * beams, L) ``sequences`` (each batch row's beams together) and their (B, beams) scores."""
        (batch, beams), length, vocab = beam_scores.shape, sequences.shape[1], self.logits.shape[-1]
        forbidden = None if self.rng is not None else self.processors.forbidden(length)
        if forbidden is not None and keep + beams * len(forbidden) <= beams * vocab:
            scores, indices = self.generator.candidates(self.logits, beam_scores, keep + beams * len(forbidden))
            if len(forbidden):  # the order of the others is their order with the forbidden tokens at -inf
                is_forbidden = np.zeros(vocab, bool)  # (V,): indexing it is ~6x np.isin's speed
                is_forbidden[forbidden] = True
                allowed = np.argsort(is_forbidden[indices % vocab], axis=1, kind="stable")[:, :keep]
                scores, indices = np.take_along_axis(scores, allowed, 1), np.take_along_axis(indices, allowed, 1)
            return scores, indices
        log_probs = self.processors(sequences, logits_processing.log_softmax(self.logits))
        totals = (log_probs.reshape(batch, beams, vocab) + beam_scores[:, :, None]).reshape(batch, -1)
        if self.rng is not None:
            indices = runner_sampling.sample_candidates(totals, keep, self.rng)
        else:
            indices = logits_processing.top_k(totals, keep)
        return np.take_along_axis(totals, indices, axis=1), indices

    def beam_search(self) -> np.ndarray:
        """transformers' ``_beam_search`` (5.x) in numpy, float32 like it: the best finished beam per row.

        The running and the finished sequences are written into buffers padded after their tokens, so that
        a step copies only the running rows' tokens so far; the buffers double in width when full (up to
        the final length), so a huge ``max_new_tokens`` allocates only for the steps taken."""
        prompt, beams = self.prompt, self.settings["num_beams"]
        length_penalty, early_stopping = self.settings["length_penalty"], self.settings["early_stopping"]
        batch, vocab = prompt.shape[0], self.logits.shape[-1]
        self.logits = np.repeat(self.logits, beams, axis=0)
        self.seen = np.repeat(self.seen, beams, axis=0)
        # each source serves its sentence's beams, consecutive rows of the step (read once, not repeated)
        self.steps = self.generator.bind_steps([np.repeat(state, beams, axis=0) for state in self.states], self.source)
        eos, start = self.generator.eos, prompt.shape[1]
        max_length = start + self.settings["max_new_tokens"]
        keep = max(2, 1 + len(eos)) * beams
        fill = self.generator.pad if self.generator.pad else (eos[0] if len(eos) else -1)
        width = start + min(self.settings["max_new_tokens"], 64)  # the buffers' columns, doubled when full
        running = np.full((batch * beams, width), fill, np.int64)  # each batch row's beams together
        running[:, :start] = np.repeat(prompt, beams, axis=0)
        first_beam = np.arange(batch)[:, None] * beams  # (B, 1): each batch row's first row of ``running``
        finished = _FinishedBeams(running.reshape(batch, beams, width).copy(), start, length_penalty, early_stopping)
        running_scores = np.zeros((batch, beams), np.float32)
        running_scores[:, 1:] = -1e9
        improvable = np.ones((batch, 1), bool)
        top_beams = np.arange(keep) < beams
        for length in range(start, max_length):
            if length == width:  # the buffers are full: twice as wide, at most the final length
                width = min(2 * width, max_length)
                running, finished.sequences = _widened(running, width, fill), _widened(finished.sequences, width, fill)
            top_scores, order = self.candidates(running[:, :length], running_scores, keep)
            source_row, token = order // vocab + first_beam, order % vocab  # (B, keep); the row of running it extends
            hits = self.generator.is_end[token] | (length + 1 >= max_length)
            finished.merge(top_scores, hits & top_beams[None, :], improvable, running, source_row, token, length)
            # the running beams of the next step: the best candidates that did not end
            blocked = top_scores + hits.astype(np.float32) * np.float32(-1e9)
            chosen = logits_processing.top_k(blocked, beams)
            rows = np.take_along_axis(source_row, chosen, axis=1).reshape(-1)
            running[:, :length] = running[rows, :length]
            running[:, length] = np.take_along_axis(token, chosen, axis=1).reshape(-1)
            running_scores = np.take_along_axis(blocked, chosen, axis=1)
            hypothetical = (max_length if early_stopping == "never" and length_penalty > 0 else length + 1) - start
            best_running = running_scores[:, :1] / np.float32(hypothetical**length_penalty)
            worst_done = np.where(finished.done, finished.scores.min(axis=1, keepdims=True), np.float32(-1e9))
            improvable = improvable & (best_running > worst_done).any(axis=-1, keepdims=True)
            if not improvable.any() or (finished.done.all() and early_stopping is True) or hits.all():
                break
            self.steps.reorder(rows)
            self.advance(running[:, length])
        return finished.sequences[:, 0, : start + finished.lengths[:, 0].max()]


def _widened(tokens: np.ndarray, width: int, fill: int) -> np.ndarray:
    """(..., L) ``tokens`` padded with ``fill`` to (..., width)."""
    wider = np.full((*tokens.shape[:-1], width), fill, tokens.dtype)
    wider[..., : tokens.shape[-1]] = tokens
    return wider


class _FinishedBeams:
    """Beam search's finished hypotheses, the best ``beams`` per batch row, as transformers keeps them.

    Args:
        sequences: (B, beams, L) int64, the prompt then padding: the finished sequences, each
            padded after its tokens; scores (B, beams) float32 hold their length-penalised scores,
            largest first (-1e9 where none yet), lengths (B, beams) their new tokens, done (B, beams)
            which are real.
        start: the prompt's length; length_penalty, early_stopping: the request's.
    """

    def __init__(self, sequences: np.ndarray, start: int, length_penalty: float, early_stopping):
        self.sequences, self.start = sequences, start
        self.length_penalty, self.early_stopping = length_penalty, early_stopping
        shape = sequences.shape[:2]
        self.scores = np.full(shape, -1e9, np.float32)
        self.lengths, self.done = np.zeros(shape, np.int64), np.zeros(shape, bool)

    def merge(self, top_scores, ended, improvable, running, source_row, token, column: int) -> None:
        """Merge the step's candidates that ended among the top ``beams``: (B, keep) ``top_scores`` and
        ``ended``, (B, 1) ``improvable`` (rows whose finished beams can still improve); each candidate is
        the (B * beams, L) ``running`` row ``source_row`` (B, keep) with ``token`` (B, keep) at
        ``column``.

        A step where none ended changes nothing, so it is skipped: every candidate's merged score is then
        <= -1e9 (scores are <= 0, and -1e9 is added), while the finished scores are >= -1e9 and sorted, so
        each row's ranking of the two keeps its own, in order (equal scores lowest index first)."""
        if not ended.any():
            return
        new_tokens = column + 1 - self.start
        final = top_scores / np.float32(new_tokens**self.length_penalty)
        settled = self.done.all(axis=1, keepdims=True) & (self.early_stopping is True)
        for excluded in (settled, ~improvable, ~ended):  # transformers' three additions, in its order
            final += excluded.astype(np.float32) * np.float32(-1e9)
        merged = np.concatenate([self.scores, final], axis=1)
        best = logits_processing.top_k(merged, self.scores.shape[1])
        self.scores = np.take_along_axis(merged, best, axis=1)
        candidates = running[source_row]  # (B, keep, L), padding after the new token's column
        candidates[:, :, column] = token
        self.sequences = np.take_along_axis(np.concatenate([self.sequences, candidates], 1), best[:, :, None], 1)
        lengths = np.concatenate([self.lengths, np.full_like(token, new_tokens)], axis=1)
        self.lengths = np.take_along_axis(lengths, best, axis=1)
        self.done = np.take_along_axis(np.concatenate([self.done, ended], axis=1), best, axis=1)
