"""Checks of the keywords a model's forward is given through ``**kwargs``, each raising an error that
names the keyword.

transformers' callers pass a few keywords to any model through ``**kwargs``: ``Trainer`` the loss's
``num_items_in_batch`` (and ``shift_labels`` under context parallelism), padding-free collators
(``DataCollatorWithFlattening``) ``position_ids``, ``cu_seq_lens_q/k``, ``max_length_q/k`` and
``seq_idx``.  A forward names those it takes in `refuse_unknown_arguments`, which refuses every other
keyword, so that a typo (``attenton_mask``) fails instead of being swallowed:

* packed-sequence inputs, to a model that does not compute packed rows (the encoder-decoders; the
  causal LMs take them, `packing`), get a ValueError saying so;
* ``cache_position`` (which transformers 5 does not pass) gets a TypeError saying where positions come from;
* anything else gets a TypeError that lists the keywords the forward takes.

The tensors a forward is given are checked in `input_checks`.
"""

import functools
import inspect
from collections.abc import Callable, Collection

# The packed-sequence keywords of transformers' DataCollatorWithFlattening (`packing` reads them).
PACKING_ARGUMENTS = ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k", "seq_idx")

PACKING_UNSUPPORTED = (
    "packed sequences (several documents in one row, as transformers' DataCollatorWithFlattening and "
    "padding-free training make them) are computed by the causal LMs only, not by the encoder-decoders: pad "
    "the batch instead (DataCollatorForSeq2Seq)"
)


@functools.cache
def _named_parameters(forward: Callable) -> tuple[str, ...]:
    """The parameters ``forward`` names (``self`` and ``**kwargs`` left out), in order."""
    return tuple(
        name
        for name, parameter in inspect.signature(forward).parameters.items()
        if name != "self" and parameter.kind is not inspect.Parameter.VAR_KEYWORD
    )


def refuse_unknown_arguments(model: object, kwargs: dict, taken: Collection[str] = ()) -> None:
    """Raise for a keyword of ``kwargs`` that ``model``'s forward does not take through ``**kwargs`` (``taken``).

    Args:
        model: the module whose forward was called (the message names its class and lists its forward's
            named parameters).
        kwargs: the keywords the forward received through ``**kwargs``.
        taken: the keywords it takes through ``**kwargs`` (``position_ids``, ``num_items_in_batch`` ...).

    Raises:
        ValueError: a packed-sequence input (``cu_seq_lens_q``, ``seq_idx`` ...).
        TypeError: any other keyword it does not take.
    """
    unknown = [name for name in kwargs if name not in taken]
    if not unknown:
        return
    where = f"{type(model).__name__}.forward()"
    packing = [name for name in unknown if name in PACKING_ARGUMENTS]
    if packing:
        raise ValueError(f"{where} got {', '.join(packing)}: {PACKING_UNSUPPORTED}")
    if "cache_position" in unknown:
        raise TypeError(
            f"{where} takes no cache_position (transformers 5 dropped it): the model counts positions from its "
            "cache and the attention mask"
        )
    accepted = ", ".join([*_named_parameters(type(model).forward), *taken])
    raise TypeError(f"{where} got unexpected keyword argument(s) {', '.join(unknown)}; it takes: {accepted}")
