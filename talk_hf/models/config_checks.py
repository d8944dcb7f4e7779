"""Checks of configuration fields: their types, their bounds, and the sizes of the weights they make.

Every configuration of the package derives from `CheckedConfig`, which runs these checks whenever a
configuration is built, loaded from ``config.json``, updated or saved, and every model runs them
again when it is built from one (`check_config_of_model`: a field set by ``setattr`` skips the
others), so that a wrong value fails there, with an error that names the field, instead of being
taken for something else or failing later in a model, a kernel or an allocator.

Types.  Each field declared by a configuration class must hold the type of its annotation
(`check_field_types`):

* ``bool``: ``True`` or ``False`` only (``true``/``false`` in JSON); ``"false"``, ``"no"``, 0 and 1
  are errors (a non-empty string would otherwise read as True);
* ``int``: a Python int, never a bool, and never a float, even an integral one like ``3.0``: the
  ``config.json`` that ``save_pretrained`` writes holds ints, so a float there was typed or computed
  by mistake (transformers' ``@strict`` configurations reject it too);
* ``float``: an int or a float, finite (JSON writes ``0`` for a zero dropout);
* ``str``; ``list[T]``: a list (or tuple) whose items are each a ``T``; ``X | None``: None or an ``X``.

transformers' own configurations get the type checks from huggingface_hub's ``@strict``
dataclasses; the package does not use that decorator because its errors derive from neither
ValueError nor TypeError, its ``float`` refuses the ints that JSON writes for round numbers, and it
skips the string annotations of modules with ``from __future__ import annotations``.

Bounds.  Sizes have upper bounds, generous for any real model and far below what an allocator
refuses, so that ``vocab_size=1e12`` fails as a field, not as an out-of-memory error:
`MAX_VOCAB_SIZE`, `MAX_WIDTH`, `MAX_LAYERS`, `MAX_WINDOW`, `MAX_POSITION_OFFSET`, and
`MAX_WEIGHT_ELEMENTS` for the product of the fields that shape one weight matrix (`check_weight_size`).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import types
from typing import Any, Union, get_args, get_origin

from transformers import PretrainedConfig

from ..ops._validation import check_int

# Tokens of a vocabulary (vocab_size, decoder_vocab_size): 16,777,216, 64x the largest vocabularies
# of released models (~256k).
MAX_VOCAB_SIZE = 2**24
# Widths (d_model, conv_dim, FFN widths): 262,144, 3.5x the widest released FFN (PaLM's 73,728).
MAX_WIDTH = 2**18
# Layers of one stack: 4,096.
MAX_LAYERS = 2**12
# Tokens a mixer's window spans (TaLK's max offsets, DynamicConv's kernel sizes, SliceNet's
# (k - 1) * dilation): 65,536, 1,000x the papers' largest (63).  A decoder keeps that many past
# inputs per layer in its generation cache.
MAX_WINDOW = 2**16
# Added to every position: 1,048,576.  Sinusoidal positions are computed in float32, exact for
# integer positions below 2**24; this leaves room for sequences of 15 million tokens after the offset.
MAX_POSITION_OFFSET = 2**20
# Elements of one weight matrix: 2**33 = 8.6 billion (16 GiB in bfloat16), 1.8x the largest matrix
# of released models (PaLM's 256k x 18,432 embedding).
MAX_WEIGHT_ELEMENTS = 2**33

_TYPE_NAMES = {bool: "True or False", int: "an int", float: "a finite number", str: "a string"}
_ITEM_NAMES = {bool: "bools", int: "ints", float: "numbers", str: "strings"}


class CheckedConfig(PretrainedConfig):
    """A configuration whose fields are checked whenever they are set through transformers' API:
    when it is built, loaded (``from_dict``, hence ``from_pretrained``, including the field values
    passed to it as keywords, which transformers sets after building), updated (``update``,
    ``update_from_string``) or saved (``save_pretrained`` calls ``validate``).

    On construction, in order: the aliases of ``attribute_map`` passed as keywords (``hidden_size=``)
    are applied to the fields they name; every declared field's type is checked
    (`check_field_types`); ``fill_defaults`` fills the fields whose defaults depend on others; then
    ``check_fields`` checks the values.  Subclasses implement the last two.
    """

    def __post_init__(self, **kwargs):
        for alias in [key for key in kwargs if key in self.attribute_map]:
            setattr(self, alias, kwargs.pop(alias))  # before the checks, which would miss it otherwise
        check_field_types(self)
        self.fill_defaults()
        self.check_fields()
        super().__post_init__(**kwargs)

    def fill_defaults(self) -> None:
        """Fill the fields left None whose defaults depend on other fields (types already checked)."""

    def check_fields(self) -> None:
        """Check the fields' values (types already checked), raising errors that name the field; the
        configurations override it with their bounds (a configuration without any checks only types)."""

    def check(self) -> None:
        """Check every field's type, then its value."""
        check_field_types(self)
        self.check_fields()

    def validate(self) -> None:
        """transformers' validation hook (``save_pretrained`` calls it), with the package's checks:
        a field set to a wrong value after construction fails here instead of being saved."""
        super().validate()
        self.check()

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs):
        loaded = super().from_dict(config_dict, **kwargs)
        (loaded[0] if isinstance(loaded, tuple) else loaded).check()  # (config, unused kwargs) on request
        return loaded

    def update(self, config_dict: dict[str, Any]) -> None:
        super().update(config_dict)
        self.check()

    def update_from_string(self, update_str: str) -> None:
        super().update_from_string(update_str)
        self.check()


def check_config_of_model(model_class: type, config: Any) -> None:
    """Check ``config`` again when ``model_class`` is built from it: transformers' configurations take
    ``setattr``, which skips the checks above, and a model built from a field set wrong would fail in
    a tensor operation or silently build something else.

    Raises:
        TypeError: ``config`` is no configuration of the package, or a field holds a wrong type;
        ValueError: a field holds a wrong value; both name the model class and the field.
    """
    if not callable(getattr(config, "check", None)):
        expected = getattr(model_class.config_class, "__name__", "configuration of the package")
        raise TypeError(f"{model_class.__name__} is built from a {expected}, got {type(config).__name__}")
    try:
        config.check()
    except (TypeError, ValueError) as error:
        raise type(error)(f"the configuration of {model_class.__name__}: {error}") from None


@functools.cache
def declared_field_types(config_class: type) -> dict[str, Any]:
    """``{field: annotation}`` of the dataclass fields that ``config_class`` and its bases other than
    transformers' declare (a redeclaration in a subclass wins; ClassVars are not fields)."""
    field_names = {field.name for field in dataclasses.fields(config_class)}
    declared = {}
    for klass in reversed(config_class.__mro__):
        if klass not in PretrainedConfig.__mro__:
            annotations = inspect.get_annotations(klass, eval_str=True)
            declared.update({name: hint for name, hint in annotations.items() if name in field_names})
    return declared


def check_field_types(config: CheckedConfig) -> None:
    """Require each field declared by ``config``'s classes to hold its annotated type (module docstring).

    Raises:
        TypeError: naming the field (``field[i]`` for a list item), the expected type and the value.
    """
    for name, annotation in declared_field_types(type(config)).items():
        check_type(name, getattr(config, name), annotation)


def check_type(name: str, value: Any, annotation: Any) -> None:
    """Require ``value`` to be of type ``annotation`` (``bool``, ``int``, ``float``, ``str``,
    ``list[T]`` or ``X | None``), with the rules of the module docstring."""
    if get_origin(annotation) in (Union, types.UnionType):
        members = [member for member in get_args(annotation) if member is not type(None)]
        if len(members) != 1:
            raise TypeError(f"field {name}: the checks support `X | None` unions only, got {annotation}")
        if value is not None:
            check_type(name, value, members[0])
        return
    if get_origin(annotation) is list:
        (item_type,) = get_args(annotation)
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"{name} must be a list of {_ITEM_NAMES[item_type]}, got {_described(value)}")
        for index, item in enumerate(value):
            check_type(f"{name}[{index}]", item, item_type)
        return
    if annotation not in _TYPE_NAMES:
        raise TypeError(f"field {name}: no type check for its annotation {annotation}")
    if not _has_type(value, annotation):
        json_hint = "; config.json writes true or false, unquoted" if annotation is bool else ""
        raise TypeError(f"{name} must be {_TYPE_NAMES[annotation]}, got {_described(value)}{json_hint}")


def _has_type(value: Any, expected: type) -> bool:
    if expected is bool:
        return isinstance(value, bool)
    if isinstance(value, bool):  # a bool is an int to Python, never to a configuration
        return False
    if expected is float:
        return isinstance(value, (int, float)) and math.isfinite(value)
    return isinstance(value, expected)


def _described(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})"


def check_weight_size(weight: str, *dims: tuple[str, int]) -> None:
    """Require the weight matrix ``weight``, of shape ``dims`` (``(what sets it, size)`` each), to hold
    at most `MAX_WEIGHT_ELEMENTS` elements."""
    elements = math.prod(size for _, size in dims)
    if elements > MAX_WEIGHT_ELEMENTS:
        shape = " x ".join(f"{what} ({size:,})" for what, size in dims)
        raise ValueError(
            f"the {weight} would be {shape} = {elements:,} elements, more than the {MAX_WEIGHT_ELEMENTS:,} "
            "(2**33) allowed for one weight matrix; reduce those fields"
        )


def check_token_id(name: str, value: Any, vocab_size: int, vocab_name: str = "vocab_size") -> None:
    """Require an int in [0, vocab_size); ``vocab_name`` is the field that holds the size."""
    check_int(name, value, 0)
    if value >= vocab_size:
        raise ValueError(f"{name}={value} must be < {vocab_name}={vocab_size}")


def check_probability(name: str, value: Any) -> None:
    """Require a float in [0, 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1), got {value!r}")


def check_positive(name: str, value: Any) -> None:
    """Require a number > 0 (of a ``float`` field: `check_field_types` has required it finite)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name} must be a number > 0, got {value!r}")


def check_per_layer(name: str, values: Any, layers_name: str, layers: int, minimum: int, maximum: int) -> None:
    """Require a list of ``layers`` ints, each in ``[minimum, maximum]``."""
    if not isinstance(values, (list, tuple)):
        raise TypeError(f"{name} must be a list of {layers} ints (one per layer), got {type(values).__name__}")
    if len(values) != layers:
        raise ValueError(f"{name} must have one entry per layer: {layers_name}={layers}, got {len(values)} entries")
    for index, value in enumerate(values):
        check_int(f"{name}[{index}]", value, minimum, maximum)


def check_divisible(name: str, value: int, heads_name: str, heads: int) -> None:
    """Require ``heads`` in ``[1, value]`` dividing ``value``."""
    check_int(heads_name, heads, 1, value)
    if value % heads != 0:
        raise ValueError(f"{name}={value} must be divisible by {heads_name}={heads}")
