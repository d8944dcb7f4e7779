"""Read a fairseq ``model.pt`` without fairseq and without running pickled code.

A fairseq checkpoint is a pickled dict: ``{"args": argparse.Namespace, "model": state_dict, ...}``
(fairseq <= 0.10, every released LightConv/DynamicConv/TaLK checkpoint) or ``{"args": None, "cfg":
{"model": argparse.Namespace or dict, "task": {...}, ...}, "model": state_dict, ...}`` (fairseq >=
0.10's Trainer).  It is read with ``torch.load(weights_only=True)``: torch's restricted unpickler,
which builds tensors and plain containers only, plus the explicit allow-list of
:data:`SAFE_GLOBALS` (the ``Namespace`` and numpy's scalar/array rebuilders, which training code
leaves in ``extra_state``).  Any other pickled global is refused with an error that names it, and
anything else that is not a fairseq checkpoint (a missing path, a folder, a text file, a truncated or
damaged file, a torch file of something else) with a ValueError that names the file and says why.
"""

from __future__ import annotations

import argparse
import importlib
import pickle
import re
from dataclasses import dataclass
from pathlib import Path

import numpy
import torch


def _numpy_globals() -> list:
    """numpy's scalar and array rebuilders, which fairseq's training state pickles (``val_loss``,
    ``best`` ...), as (object, the name the pickle stores it under): numpy 1.x pickles name
    ``numpy.core``, numpy 2.x ``numpy._core``, and the allow-list matches names.  Plain data only:
    the object dtype (whose items are arbitrary objects) is left out."""
    core = numpy._core.multiarray if hasattr(numpy, "_core") else numpy.core.multiarray
    rebuilders = [
        (getattr(core, name), f"{package}.multiarray.{name}")
        for name in ("scalar", "_reconstruct")
        for package in ("numpy.core", "numpy._core")
    ]
    # numpy 2 rebuilds a dtype as an instance of its class, e.g. numpy.dtypes.Float64DType.
    dtypes = getattr(numpy, "dtypes", None)
    dtype_classes = (
        [
            getattr(dtypes, name)
            for name in dir(dtypes)
            if name.endswith("DType") and name not in ("ObjectDType", "VoidDType", "StringDType")
        ]
        if dtypes
        else []
    )
    return [numpy.ndarray, numpy.dtype, *rebuilders, *dtype_classes]


SAFE_GLOBALS: list = [argparse.Namespace, *_numpy_globals()]

# torch names the refused global as "Unsupported global: GLOBAL x.y" or "unsupported GLOBAL x.y".
_REFUSED_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")
# ... and states its other refusals on the first line after "WeightsUnpickler error:".
_UNPICKLER_REASON = re.compile(r"WeightsUnpickler error:\s*(.+)")
EXPECTED = "Expected a fairseq checkpoint: the model.pt that fairseq writes with torch.save."


@dataclass
class FairseqCheckpoint:
    """What the converter needs from a checkpoint.

    Attributes:
        path: the ``model.pt`` file.
        args: the model arguments (``arch``, dimensions, flags; see the fixtures' README).
        state_dict: fairseq parameter name -> tensor.
        source_lang / target_lang: the task's language pair, None for a language model or when
            the checkpoint does not say.
    """

    path: Path
    args: argparse.Namespace
    state_dict: dict[str, torch.Tensor]
    source_lang: str | None
    target_lang: str | None

    @property
    def arch(self) -> str:
        """The architecture name (``lightconv_iwslt_de_en``, ``talkconv_lm``, ...)."""
        arch = getattr(self.args, "arch", None) or getattr(self.args, "_name", None)
        if not arch:
            raise ValueError(f"{self.path}: the saved model arguments have no 'arch' (or '_name')")
        if not isinstance(arch, str):
            raise ValueError(f"{self.path}: the saved 'arch' must be an architecture name (a string), got {arch!r}")
        return arch


def resolve_global(name: str):
    """``"module.Name"`` -> the object, for ``--allow-global``.

    Raises:
        ValueError: ``name`` is not ``MODULE.NAME`` or names nothing importable.
    """
    module_name, _, attribute = name.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError, ValueError) as error:
        raise ValueError(f"--allow-global expects an importable MODULE.NAME, got {name!r} ({error})") from error


def load_fairseq_checkpoint(path: str | Path, allow_globals: tuple = ()) -> FairseqCheckpoint:
    """Load ``path`` with ``torch.load(weights_only=True)`` and :data:`SAFE_GLOBALS` + ``allow_globals``.

    Raises:
        ValueError: naming ``path`` when it is missing or a folder, when torch cannot read it (a text
            file, a truncated or damaged checkpoint), when it pickles a global outside the allow-list
            (named in the message), or when it is not a fairseq checkpoint (no ``model`` state dict of
            tensors, no model arguments).
    """
    path = Path(path)
    _check_is_file(path)
    checkpoint = _unpickle(path, list(allow_globals))
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("model"), dict):
        raise ValueError(f"{path} is not a fairseq checkpoint: expected a dict with a 'model' state dict")
    _check_state_dict(checkpoint["model"], path)
    args, task = _model_arguments(checkpoint, path)
    return FairseqCheckpoint(
        path=path,
        args=args,
        state_dict=checkpoint["model"],
        source_lang=task.get("source_lang", getattr(args, "source_lang", None)),
        target_lang=task.get("target_lang", getattr(args, "target_lang", None)),
    )


def _check_is_file(path: Path) -> None:
    """Refuse a missing ``path`` or a folder before torch tries to open it."""
    if path.is_dir():
        inside = path / "model.pt"
        hint = f" (did you mean {inside}?)" if inside.is_file() else ""
        raise ValueError(f"{path} is a folder{hint}. {EXPECTED}")
    if not path.exists():
        raise ValueError(f"{path} does not exist. {EXPECTED}")


def _unpickle(path: Path, allow_globals: list):
    """``torch.load`` under the allow-list; every failure becomes a ValueError that names ``path``."""
    try:
        with torch.serialization.safe_globals(SAFE_GLOBALS + allow_globals):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        refused = _REFUSED_GLOBAL.search(str(error))
        if refused:
            raise ValueError(
                f"{path} pickles the global {refused.group(1)}, which is not on the converter's allow-list "
                f"(argparse.Namespace and numpy scalars/arrays): it is never unpickled blindly. If you trust the "
                f"file and that object is plain data, allow it with --allow-global MODULE.NAME (allow_globals in "
                f"Python)"
            ) from error
        raise _unreadable(path, error) from error
    # Damaged bytes make torch's readers raise almost anything (KeyError, EOFError, RuntimeError, ...).
    except Exception as error:
        raise _unreadable(path, error) from error


def _unreadable(path: Path, error: Exception) -> ValueError:
    """The error for a file ``torch.load`` failed on: what the file looks like, from its first bytes
    (torch's own errors for damaged files, such as ``KeyError: 101``, say nothing useful)."""
    try:
        with path.open("rb") as file:
            head = file.read(4)
    except OSError as open_error:
        return ValueError(f"{path} cannot be opened ({open_error.strerror}). {EXPECTED}")
    if not head:
        return ValueError(f"{path} is empty. {EXPECTED}")
    if head == b"PK\x03\x04":
        kind = "a zip archive"
    elif head.startswith(pickle.PROTO):
        kind = "a pickle"
    else:
        return ValueError(
            f"{path} is neither a zip archive nor a pickle, the formats torch.save writes (is it a "
            f"text file?). {EXPECTED}"
        )
    refusal = _UNPICKLER_REASON.search(str(error)) if isinstance(error, pickle.UnpicklingError) else None
    why = (
        f"torch's weights-only unpickler refuses it ({refusal.group(1)})"
        if refusal
        else "torch.load cannot read it: it is truncated, damaged, or not written by torch.save"
    )
    return ValueError(f"{path} is {kind}, but {why}. {EXPECTED}")


def _check_state_dict(state_dict: dict, path: Path) -> None:
    """The ``model`` entry maps parameter names to tensors."""
    wrong = [
        f"{name!r} ({type(value).__name__})"
        for name, value in state_dict.items()
        if not isinstance(name, str) or not isinstance(value, torch.Tensor)
    ]
    if wrong:
        raise ValueError(
            f"{path} is not a fairseq checkpoint: its 'model' state dict must map parameter names to "
            f"tensors, but holds {', '.join(wrong[:3])}{' ...' if len(wrong) > 3 else ''}"
        )


def _model_arguments(checkpoint: dict, path: Path) -> tuple[argparse.Namespace, dict]:
    """The model arguments and the task settings (a dict; empty in the ``args`` layout)."""
    if checkpoint.get("args") is not None:
        return checkpoint["args"], {}
    cfg = checkpoint.get("cfg")
    model = cfg.get("model") if isinstance(cfg, dict) else None
    if isinstance(model, dict):
        model = argparse.Namespace(**model)
    if not isinstance(model, argparse.Namespace):
        raise ValueError(f"{path} holds no model arguments: neither 'args' nor 'cfg[\"model\"]' is set")
    task = cfg.get("task")
    return model, task if isinstance(task, dict) else {}
