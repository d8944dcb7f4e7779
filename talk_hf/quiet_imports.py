"""Import transformers' model base without the log lines torchao prints when it is imported.

``transformers.modeling_utils`` (which ``PreTrainedModel`` lives in, so every model of the package
needs it) imports its torchao quantizer, which imports torchao whenever it is installed (the
``serving`` extra installs it, for ``quantize_int8(method="weight_only")``).  torchao's import then
logs, on a CPU-only torch or a GPU it has no kernels for:

* one ``Failed to load .../torchao/_C_<kernels>...so: ...`` warning per compiled kernel library that
  does not load (its CUDA kernels: optional, torchao runs without them);
* one ``torch.utils._pytree`` warning per torchao enum it registers with ``register_constant``,
  which torch 2.13 deprecates for enums.

Neither says anything a user of this package can act on, and ``import talk_hf`` would print all
four lines.  `import_transformers_quietly` imports ``transformers.modeling_utils`` with exactly those
records dropped, from those two loggers, for the duration of that import only: any other message,
or the same ones from a torchao imported elsewhere first, is printed as usual.
"""

from __future__ import annotations

import importlib
import logging
import re
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

# torchao's "Failed to load {file}: {error}" for one of its own compiled libraries (_C*.so).
_KERNEL_LIBRARY_NOT_LOADED = re.compile(r"Failed to load \S*torchao[/\\]_C\w*\.\S*\.so: ")
# torch.utils._pytree's deprecation of register_constant() on an Enum subclass (its format string).
_ENUM_CONSTANT_DEPRECATED = "%s is an Enum subclass and is now natively supported by torch.compile"


def _is_torchao_kernel_library_warning(record: logging.LogRecord) -> bool:
    return _KERNEL_LIBRARY_NOT_LOADED.match(record.getMessage()) is not None


def _is_torchao_enum_deprecation(record: logging.LogRecord) -> bool:
    if not (isinstance(record.msg, str) and record.msg.startswith(_ENUM_CONSTANT_DEPRECATED) and record.args):
        return False
    enum_class = record.args[0] if isinstance(record.args, tuple) else None
    return getattr(enum_class, "__module__", "").startswith("torchao")


# logger name -> what to drop from it while transformers imports torchao.
_DROPPED = {
    "torchao": _is_torchao_kernel_library_warning,
    "torch.utils._pytree": _is_torchao_enum_deprecation,
}


@contextmanager
def dropping_records(logger: logging.Logger, is_dropped: Callable[[logging.LogRecord], bool]) -> Iterator[None]:
    """Drop the records of ``logger`` for which ``is_dropped(record)`` holds, inside the block."""

    def keep(record: logging.LogRecord) -> bool:
        return not is_dropped(record)

    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)


def import_transformers_quietly() -> None:
    """Import ``transformers.modeling_utils`` (and through it torchao, when installed) without
    torchao's import-time log lines (module docstring).  Does nothing once it is imported."""
    with ExitStack() as stack:
        for logger_name, is_dropped in _DROPPED.items():
            stack.enter_context(dropping_records(logging.getLogger(logger_name), is_dropped))
        importlib.import_module("transformers.modeling_utils")


import_transformers_quietly()  # talk_hf/__init__.py imports this module before any other
