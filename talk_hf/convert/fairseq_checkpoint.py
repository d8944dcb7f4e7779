"""Read a fairseq ``model.pt`` without fairseq and without running pickled code.

A fairseq checkpoint is a pickled dict: ``{"args": argparse.Namespace, "model": state_dict, ...}``
(fairseq <= 0.10, every released LightConv/DynamicConv/TaLK checkpoint) or ``{"args": None, "cfg":
{"model": argparse.Namespace or dict, "task": {...}, ...}, "model": state_dict, ...}`` (fairseq >=
0.10's Trainer).  It is read with ``torch.load(weights_only=True)``: torch's restricted unpickler,
which builds tensors and plain containers only, plus the explicit allow-list of
:data:`SAFE_GLOBALS` (the ``Namespace`` and numpy's scalar/array rebuilders, which training code
leaves in ``extra_state``).  Any other pickled global is refused with an error that names it.
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
    rebuilders = [(getattr(core, name), f"{package}.multiarray.{name}")
                  for name in ("scalar", "_reconstruct") for package in ("numpy.core", "numpy._core")]
    # numpy 2 rebuilds a dtype as an instance of its class, e.g. numpy.dtypes.Float64DType.
    dtypes = getattr(numpy, "dtypes", None)
    dtype_classes = [getattr(dtypes, name) for name in dir(dtypes) if name.endswith("DType")
                     and name not in ("ObjectDType", "VoidDType", "StringDType")] if dtypes else []
    return [numpy.ndarray, numpy.dtype, *rebuilders, *dtype_classes]


SAFE_GLOBALS: list = [argparse.Namespace, *_numpy_globals()]

# torch names the refused global as "Unsupported global: GLOBAL x.y" or "unsupported GLOBAL x.y".
_REFUSED_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")


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
        ValueError: the file pickles a global outside the allow-list (named in the message), or it
            is not a fairseq checkpoint (no ``model`` state dict, no model arguments).
    """
    path = Path(path)
    try:
        with torch.serialization.safe_globals(SAFE_GLOBALS + list(allow_globals)):
            checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        match = _REFUSED_GLOBAL.search(str(error))
        culprit = f"the global {match.group(1)}" if match else "an object that torch's weights-only unpickler refuses"
        raise ValueError(
            f"{path} pickles {culprit}, which is not on the converter's allow-list (argparse.Namespace and "
            f"numpy scalars/arrays): it is never unpickled blindly. If you trust the file and that object is "
            f"plain data, allow it with --allow-global MODULE.NAME (allow_globals in Python)"
        ) from error
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("model"), dict):
        raise ValueError(f"{path} is not a fairseq checkpoint: expected a dict with a 'model' state dict")
    args, task = _model_arguments(checkpoint, path)
    return FairseqCheckpoint(
        path=path,
        args=args,
        state_dict=checkpoint["model"],
        source_lang=task.get("source_lang", getattr(args, "source_lang", None)),
        target_lang=task.get("target_lang", getattr(args, "target_lang", None)),
    )


def _model_arguments(checkpoint: dict, path: Path) -> tuple[argparse.Namespace, dict]:
    """The model arguments and the task settings (a dict; empty in the ``args`` layout)."""
    if checkpoint.get("args") is not None:
        return checkpoint["args"], {}
    cfg = checkpoint.get("cfg") or {}
    model = cfg.get("model")
    if isinstance(model, dict):
        model = argparse.Namespace(**model)
    if not isinstance(model, argparse.Namespace):
        raise ValueError(f"{path} holds no model arguments: neither 'args' nor 'cfg[\"model\"]' is set")
    task = cfg.get("task")
    return model, task if isinstance(task, dict) else {}
