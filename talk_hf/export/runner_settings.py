"""The runner's generation settings: which of ``generate``'s it applies, and the check of each one's value.

Copied beside ``runner.py`` into every exported folder (standard library and numpy only), which cannot
import transformers, so the runner holds none of generate's default values: the export resolves each
setting as ``generate`` does for the model (the model's generation configuration's value where set,
else transformers' default) and writes them into the manifest's ``generation`` field, with
generate's length when none is set in `DEFAULT_LENGTH`.  A request's
settings override the manifest's (`runner_request.resolved_settings`), as ``model.generate`` merges them;
the manifest's are checked once, when the folder is loaded (`runner_request.checked_defaults`), a
request's each time, each value by `check_setting`.

* `APPLIED`: the settings the runner applies as transformers' ``generate`` (5.x) does: lengths, greedy
  / sampling / beam search (and beam sampling), and the logits processors of ``generate``'s list that
  `runner_logits` restates in numpy.  The manifest holds each of them (`missing_fields`).
* `NOT_APPLIED`: generate's other settings that change tokens, with the values at which generate does
  not apply them either.  Such a setting is written into the manifest (a model whose configuration sets
  one still exports, and the exported folder still serves every other engine) and refused, by name, by
  any request that would apply it; passing its inert value (e.g. ``guidance_scale=1.0``) decodes without
  it.  A value JSON cannot hold (a ``WatermarkingConfig``, ``Constraint`` objects) is refused at export.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np

# The settings the runner applies; the manifest's generation field holds each.
APPLIED = (
    "max_length",
    "max_new_tokens",
    "min_length",
    "min_new_tokens",
    "num_beams",
    "do_sample",
    "length_penalty",
    "early_stopping",
    "repetition_penalty",
    "no_repeat_ngram_size",
    "bad_words_ids",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "suppress_tokens",
    "begin_suppress_tokens",
    "temperature",
    "top_k",
    "top_p",
)
# The settings of APPLIED that may be None (unset: no bound, no processor); the others hold a value.
UNSET_ALLOWED = (
    "max_length",
    "max_new_tokens",
    "min_new_tokens",
    "bad_words_ids",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "suppress_tokens",
    "begin_suppress_tokens",
)
# The manifest field of generate's length when no length is set: new_tokens after the prompt, at most
# max_position_embeddings in all (None: no such bound).
DEFAULT_LENGTH = "default_length"
DEFAULT_LENGTH_FORM = "an object of new_tokens (an int >= 1) and max_position_embeddings (null or an int >= 1)"
SAMPLING_ONLY = ("temperature", "top_k", "top_p", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff", "top_h")
BEAM_ONLY = ("length_penalty", "early_stopping")
# Settings the runner does not apply -> the values at which generate does not apply them either.
NOT_APPLIED = {
    "guidance_scale": (None, 1.0),
    "sequence_bias": (None,),
    "encoder_repetition_penalty": (None, 1.0),
    "encoder_no_repeat_ngram_size": (None, 0),
    "exponential_decay_length_penalty": (None,),
    "remove_invalid_values": (None, False),
    "renormalize_logits": (None, False),
    "min_p": (None,),
    "typical_p": (None, 1.0),
    "epsilon_cutoff": (None, 0.0),
    "eta_cutoff": (None, 0.0),
    "top_h": (None,),
    "watermarking_config": (None,),
    "num_return_sequences": (None, 1),
    "num_beam_groups": (None, 1),
    "diversity_penalty": (None, 0.0),
    "penalty_alpha": (None, 0.0),
    "dola_layers": (None,),
    "constraints": (None,),
    "force_words_ids": (None,),
    "prompt_lookup_num_tokens": (None,),
    "assistant_early_exit": (None,),
    "use_mtp": (None, False),
    "max_time": (None,),
    "stop_strings": (None,),
    "token_healing": (None, False),
    "low_memory": (None, False),
}
# The settings the export resolves into the manifest (those of NOT_APPLIED only where not None).
GENERATION_FIELDS = (*APPLIED, *NOT_APPLIED)


def is_int(value) -> bool:
    return isinstance(value, Integral) and not isinstance(value, (bool, np.bool_))


def check_integer(name: str, value, minimum: int, maximum: int | None = None, limit: str = "") -> int:
    """``value`` as an int in [minimum, maximum]; TypeError / ValueError naming ``name`` (``limit``: why the maximum)."""
    if not is_int(value):
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]{limit}"
        raise ValueError(f"{name} must be {bound}, got {value}")
    return int(value)


def _number(name: str, value, expected: str, accept) -> float:
    """A finite real ``value`` (not a bool) for which ``accept(value)`` holds, as a float."""
    is_real = isinstance(value, Real) and not isinstance(value, (bool, np.bool_))
    if not (is_real and math.isfinite(value) and accept(value)):
        raise ValueError(f"{name} must be {expected}, got {value!r}")
    return float(value)


def _token_ids(name: str, value, vocab_size: int, non_empty: bool = False) -> list[int]:
    """A list of token ids in [0, vocab_size)."""
    ids = value if isinstance(value, (list, tuple)) else None
    if ids is None or (non_empty and not ids) or not all(is_int(i) and 0 <= i < vocab_size for i in ids):
        size = "a non-empty" if non_empty else "a"
        raise ValueError(f"{name} must be {size} list of token ids in [0, {vocab_size}), got {value!r}")
    return [int(i) for i in ids]


def _checked_applied(name: str, value, vocab: int):
    """One setting of `APPLIED` (not None), checked as ``generate`` and its processors check it."""
    if name == "early_stopping":
        if isinstance(value, np.bool_):
            value = bool(value)
        if not isinstance(value, bool) and not (isinstance(value, str) and value == "never"):
            raise ValueError(f"early_stopping must be True, False or 'never', got {value!r}")
        return value
    if name == "do_sample":
        if not isinstance(value, (bool, np.bool_)):
            raise ValueError(f"do_sample must be True or False, got {value!r}")
        return bool(value)
    if name == "num_beams":
        return check_integer(name, value, 1, vocab, f" (no more beams than the vocabulary's {vocab} tokens)")
    minimums = {"max_length": 1, "max_new_tokens": 1, "min_length": 0, "min_new_tokens": 0, "top_k": 0}
    if name in minimums or name == "no_repeat_ngram_size":
        return check_integer(name, value, minimums.get(name, 0))
    if name == "length_penalty":
        return _number(name, value, "a finite number", lambda x: True)
    if name == "repetition_penalty":
        return _number(name, value, "a finite number > 0 (1.0: no penalty)", lambda x: x > 0)
    if name == "temperature":
        return _number(name, value, "a finite number >= 0 (> 0 when sampling)", lambda x: x >= 0)
    if name == "top_p":
        return _number(name, value, "a number in [0, 1]", lambda x: 0 <= x <= 1)
    if name == "forced_bos_token_id":
        if not (is_int(value) and 0 <= value < vocab):
            raise ValueError(f"forced_bos_token_id must be a token id in [0, {vocab}), got {value!r}")
        return int(value)
    if name == "forced_eos_token_id":
        return _token_ids(name, [value] if is_int(value) else value, vocab, non_empty=True)
    if name == "bad_words_ids":
        if not isinstance(value, (list, tuple)) or not value:
            raise ValueError(f"bad_words_ids must be a non-empty list of token id lists, got {value!r}")
        return [_token_ids(f"bad_words_ids[{i}]", word, vocab, non_empty=True) for i, word in enumerate(value)]
    return _token_ids(name, value, vocab)  # suppress_tokens, begin_suppress_tokens


def _json_value(value) -> bool:
    """Whether ``value`` is made of what JSON holds (None, bools, numbers, strings, lists, string-keyed objects)."""
    if value is None or isinstance(value, (bool, str)) or (isinstance(value, Real) and math.isfinite(value)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_json_value(item) for item in value)
    return isinstance(value, dict) and all(isinstance(k, str) and _json_value(v) for k, v in value.items())


def check_setting(name: str, value, vocab_size: int):
    """One of `GENERATION_FIELDS`, checked: the value as the runner uses it (ValueError / TypeError naming it)."""
    if name in NOT_APPLIED:
        if not _json_value(value):
            raise ValueError(f"{name} is a {type(value).__name__}, which the manifest cannot hold")
        return value
    if value is None and name in UNSET_ALLOWED:
        return None
    return _checked_applied(name, value, vocab_size)


def missing_fields(manifest: dict) -> list[str]:
    """The manifest fields (dotted) that an export writes for `runner_request.resolved_settings` and ``manifest`` lacks:
    ``generation.<name>`` for each setting of `APPLIED`, and `DEFAULT_LENGTH`."""
    generation = manifest.get("generation", {})
    missing = [f"generation.{name}" for name in APPLIED if name not in generation]
    return missing + ([DEFAULT_LENGTH] if DEFAULT_LENGTH not in manifest else [])


def is_default_length(value) -> bool:
    """Whether ``value`` is a `DEFAULT_LENGTH` field of the form `DEFAULT_LENGTH_FORM`."""
    if not isinstance(value, dict) or sorted(value) != ["max_position_embeddings", "new_tokens"]:
        return False
    bound = value["max_position_embeddings"]
    return is_int(value["new_tokens"]) and value["new_tokens"] >= 1 and (bound is None or is_int(bound) and bound >= 1)
