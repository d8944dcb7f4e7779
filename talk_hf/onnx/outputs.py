"""The forward's outputs, made without transformers' per-field checks: `model_output`.

A transformers ``ModelOutput`` (``Seq2SeqLMOutput`` ...) is a dataclass and an ordered dict: its
constructor sets each field through ``ModelOutput.__setattr__`` (which reads the dataclass's fields
anew for each) and checks them all again after (``__post_init__``): tens of microseconds, at every
decoding step.  `model_output` makes the same object (the class, every field's attribute, the dict of
the fields that are not None in field order) directly.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import fields
from functools import cache

from transformers.utils import ModelOutput


@cache
def _field_names(output_class: type[ModelOutput]) -> tuple[str, ...]:
    return tuple(field.name for field in fields(output_class))


def model_output(output_class: type[ModelOutput], **values) -> ModelOutput:
    """``output_class(**values)`` as transformers makes it: every field an attribute (None unless given),
    the given values that are not None its items, in the fields' order.

    Raises:
        TypeError: a value of a name that is no field of ``output_class``.
    """
    names = _field_names(output_class)
    unknown = set(values) - set(names)
    if unknown:
        raise TypeError(f"{output_class.__name__} has no fields {sorted(unknown)}; its fields: {list(names)}")
    output = output_class.__new__(output_class)
    attributes = output.__dict__
    for name in names:
        value = attributes[name] = values.get(name)
        if value is not None:
            OrderedDict.__setitem__(output, name, value)
    return output
