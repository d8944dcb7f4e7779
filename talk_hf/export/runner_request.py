"""One ``generate`` request's settings: the manifest's defaults under the request's, checked and counted
as ``generate`` counts them.

Copied beside ``runner.py`` into every exported folder (numpy and `runner_settings` only).
`checked_defaults` checks a folder's manifest ``generation`` defaults once, when the folder is loaded;
`resolved_settings` merges a request's settings over them as ``model.generate`` merges its keyword
arguments over the model's generation configuration: it checks each passed one
(`runner_settings.check_setting`), refuses, by name, a setting of `runner_settings.NOT_APPLIED` that the
request would apply and one that its strategy would not use, and counts the lengths in new tokens (with
`runner_settings.DEFAULT_LENGTH` when none is set).
"""

from __future__ import annotations

from numbers import Real

import numpy as np

from . import runner_settings as settings


def _inert(name: str, value) -> bool:
    """Whether ``generate`` leaves the `runner_settings.NOT_APPLIED` setting ``name`` unapplied at ``value``."""
    if value is None:
        return True
    scalar = isinstance(value, (bool, np.bool_, Real))
    return scalar and any(value == inert for inert in settings.NOT_APPLIED[name] if inert is not None)


def _refuse_unapplied(values: dict, passed: dict) -> None:
    """ValueError naming the first `runner_settings.NOT_APPLIED` setting that ``generate`` would apply with
    these ``values``."""
    for name, inert in settings.NOT_APPLIED.items():
        if _inert(name, values.get(name)) or (name in settings.SAMPLING_ONLY and not values["do_sample"]):
            continue
        where = "passed to generate" if name in passed else "the manifest's generation default"
        without = f"pass {name}={inert[-1]!r}" if inert[-1] is not None else "export with it unset"
        raise ValueError(
            f"{name}={values[name]!r} ({where}): the runner does not apply {name}; "
            f"it applies {', '.join(settings.APPLIED)}. "
            f"To decode without it, {without}; to apply it, generate with the model in transformers"
        )


def _refuse_unused(values: dict, passed: dict) -> None:
    """ValueError for a passed setting that this request's strategy would not use (generate only warns)."""
    for names, used, strategy, switch in (
        (settings.SAMPLING_ONLY, values["do_sample"], "when sampling", "do_sample=True"),
        (settings.BEAM_ONLY, values["num_beams"] > 1, "to beam search", "num_beams > 1"),
    ):
        unused = [name for name in passed if name in names and not used]
        if unused:
            verb = "applies" if len(unused) == 1 else "apply"
            raise ValueError(f"{', '.join(unused)} {verb} only {strategy}: pass {switch} too, or leave it out")


def _default_max_length(default_length: dict, prompt_length: int) -> int:
    """``generate``'s ``max_length`` when no length is set: the `runner_settings.DEFAULT_LENGTH`'s new tokens
    after the ``prompt_length`` columns, at most the model's ``max_position_embeddings``."""
    max_length = prompt_length + default_length["new_tokens"]
    bound = default_length["max_position_embeddings"]
    return max_length if bound is None else min(max_length, bound)


def checked_defaults(manifest: dict) -> dict:
    """The ``manifest``'s ``generation`` defaults as the runner uses them (`runner_settings.check_setting`'s
    values), checked once per folder: `resolved_settings` takes them as they are.  A ``manifest`` that
    `runner_checks.read_manifest` read has passed these checks, each named by its field."""
    return {
        name: settings.check_setting(name, value, manifest["vocab_size"])
        for name, value in manifest["generation"].items()
    }


def resolved_settings(passed: dict, defaults: dict, default_length: dict, vocab_size: int, prompt_length: int) -> dict:
    """One request's settings: ``passed`` (None: not passed), checked, over the ``defaults`` (`checked_defaults`).

    Every setting of `runner_settings.APPLIED`, with the lengths counted as ``generate`` counts them:
    ``max_length`` and ``min_length`` include the ``prompt_length`` columns (the decoder start token, or the
    prompt), ``max_new_tokens`` wins over ``max_length`` and ``min_new_tokens`` over ``min_length``, and
    with neither length set the manifest's `runner_settings.DEFAULT_LENGTH` (``default_length``) gives it.
    ``max_new_tokens`` and ``min_new_tokens`` hold the result in new tokens, ``max_length`` the total.
    Token ids of the settings lie in [0, ``vocab_size``).
    """
    unknown = [name for name in passed if name not in settings.GENERATION_FIELDS]
    if unknown:
        raise ValueError(
            f"generate got {unknown}: the runner's generate takes input_ids, attention_mask, seed and the settings "
            f"{list(settings.APPLIED)}"
        )
    passed = {
        name: settings.check_setting(name, value, vocab_size) for name, value in passed.items() if value is not None
    }
    values = {**defaults, **passed}
    _refuse_unapplied(values, passed)
    _refuse_unused(values, passed)
    if values["do_sample"] and values["temperature"] == 0:
        raise ValueError("temperature must be > 0 when sampling; for greedy decoding pass do_sample=False")
    if values["max_new_tokens"] is None:
        max_length = values["max_length"] or _default_max_length(default_length, prompt_length)
        if max_length <= prompt_length:
            raise ValueError(
                f"max_length {max_length} leaves no new token after the {prompt_length}-token prompt: pass max_new_tokens"
            )
        values["max_new_tokens"] = max_length - prompt_length
    values["max_length"] = prompt_length + values["max_new_tokens"]
    try:  # beam search divides each finished beam's score by its new tokens ** length_penalty
        float(values["max_new_tokens"]) ** (values["length_penalty"] if values["num_beams"] > 1 else 0)
    except OverflowError:
        raise ValueError(
            f"length_penalty {values['length_penalty']} overflows: {values['max_new_tokens']} new tokens ** length_penalty "
            "is beyond a float's range; pass a length_penalty of smaller size"
        ) from None
    if values["min_new_tokens"] is None:
        values["min_new_tokens"] = max(values["min_length"] - prompt_length, 0)
    return values
