"""Drawing a sampling request's tokens from its processed scores, with a numpy ``Generator``.

Copied beside ``runner.py`` into every exported folder (numpy and the runner's files beside it only).
`sample` (greedy search's sampling) and `sample_candidates` (beam sampling) draw from the softmax of
the scores that `runner_logits.LogitsProcessors` processed: the distributions are generate's, the
random numbers are not torch's, so sampled tokens differ from ``model.generate``'s for the same seed;
`sampling_generator` makes that ``Generator`` of a request's seed.
"""

from __future__ import annotations

import numpy as np

from .runner_logits import top_k
from .runner_settings import check_integer


def sample(scores: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """(N, V) processed scores -> (N,) tokens drawn from ``softmax(scores)`` (tokens at -inf never)."""
    return np.argmax(scores + rng.gumbel(size=scores.shape), axis=1)


def sample_candidates(scores: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """(B, M) accumulated beam scores -> (B, count) indices drawn without replacement from
    ``softmax(scores)`` (Gumbel top-k), ordered by their scores, largest first."""
    drawn = top_k(scores + rng.gumbel(size=scores.shape), count)
    order = np.argsort(-np.take_along_axis(scores, drawn, axis=1), axis=1, kind="stable")
    return np.take_along_axis(drawn, order, axis=1)


def sampling_generator(seed, sampling: bool) -> np.random.Generator | None:
    """The numpy Generator of a sampling request's ``seed`` (None: fresh entropy); None without sampling."""
    if seed is not None and not sampling:
        raise ValueError("seed applies only when sampling: pass do_sample=True too, or leave seed out")
    if not sampling:
        return None
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is not None:
        seed = check_integer("seed", seed, 0)
    return np.random.default_rng(seed)
