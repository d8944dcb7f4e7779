"""A model `talk_hf.quantize_int8` converted: its record, and the operations it refuses.

An int8 model is for inference: its int8 layers have no gradient, no floating dtype to cast to, no
weight to share with the embedding, and no format ``from_pretrained`` would load back.  Each of
these would otherwise fail with a raw library error, or, for training, run without changing a
weight.  `mark_int8` records the conversion on the model and gives the model's class these
overrides (a subclass of it, same name), each raising a ``RuntimeError`` that names the operation
and says what to do instead (do it to the floating-point model, then quantize):

* ``train()`` / ``train(True)``: ``eval()`` and ``train(False)`` still work, so evaluation code that
  restores a model's mode runs; a training loop or ``Trainer.train`` stops at its first step;
* a cast to another dtype (``half()``, ``bfloat16()``, ``double()``, ``to(dtype)``), and for
  ``method="dynamic"`` (fbgemm, CPU only) a move off the CPU;
* ``tie_weights()``, ``resize_token_embeddings()``;
* ``save_pretrained`` however it is called (bound, or ``PreTrainedModel.save_pretrained(model, d)``),
  before anything is written, and ``push_to_hub`` before anything is uploaded: bound, before it reaches
  the Hub; called unbound (``PushToHubMixin.push_to_hub(model, repo)``), transformers creates the
  repository before it saves, and the refusal comes at the save;
* ``generate(..., compile_config=...)`` with ``method="dynamic"`` (a ``ValueError``, before the first
  decoding step): torch.compile cannot trace fbgemm's packed weights.  ``method="weight_only"``
  compiles.

Other modules refuse an int8 model with `refuse_if_int8` (``talk_hf.export.export_onnx``).
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass

import torch
from torch import nn
from transformers import PreTrainedModel

from .models.conv_modeling import ConvPreTrainedModel
from .transformers_internals import is_push_to_hub, is_save_pretrained

# Where `quantize_int8` records what it did on the model.
RECORD_ATTRIBUTE = "int8_quantization"


@dataclass(frozen=True)
class Int8Quantization:
    """What `quantize_int8` did to a model: the method and the converted layers' names."""

    method: str
    layers: tuple[str, ...]


def int8_record(model: nn.Module) -> Int8Quantization | None:
    """How `quantize_int8` converted ``model``, or None if it did not."""
    record = getattr(model, RECORD_ATTRIBUTE, None)
    return record if isinstance(record, Int8Quantization) else None


def refuse_if_int8(model: nn.Module, operation: str, instead: str) -> None:
    """Raise RuntimeError naming ``operation`` and saying what to do ``instead`` if `quantize_int8`
    converted ``model``."""
    record = int8_record(model)
    if record is not None:
        raise RuntimeError(_refusal(model, record, operation, instead))


def _refusal(model: nn.Module, record: Int8Quantization, operation: str, instead: str) -> str:
    return (
        f"{operation}: this {type(model).__name__} was converted to int8 by "
        f"talk_hf.quantize_int8(method={record.method!r}); {instead}"
    )


def mark_int8(model: nn.Module, record: Int8Quantization) -> None:
    """Record ``record`` on ``model`` and make its class refuse what an int8 model cannot do (module
    docstring)."""
    setattr(model, RECORD_ATTRIBUTE, record)
    model.__class__ = _int8_class(type(model))


@functools.cache
def _int8_class(model_class: type[nn.Module]) -> type[nn.Module]:
    """``model_class`` with the int8 refusals: same name, so messages and registries read as for ``model_class``."""
    refusals = Int8PreTrainedModel if issubclass(model_class, PreTrainedModel) else Int8Module
    names = {"__module__": model_class.__module__, "__qualname__": model_class.__qualname__}
    return type(model_class.__name__, (refusals, model_class), {**names, "_model_class": model_class})


def _new_int8_instance(model_class: type[nn.Module]) -> nn.Module:
    """An empty instance of ``model_class`` with the int8 refusals, for unpickling (its state follows)."""
    int8_class = _int8_class(model_class)
    return model_class.__new__(int8_class)


class Int8Module(nn.Module):
    """The refusals of any int8 module: training, and casts (``nn.Module._apply``)."""

    def train(self, mode: bool = True):
        if mode is True:
            self._refuse(
                f"{type(self).__name__}.train()",
                "its int8 layers get no gradient, so training would change nothing: train the floating-point "
                "model and quantize it afterwards (eval() and train(False) work)",
            )
        return super().train(mode)

    def _apply(self, fn, recurse=True):
        """Every cast and move (``to``, ``half``, ``cuda`` ...) applies ``fn`` to each tensor; applied
        first to an empty tensor of the model's floating dtype and device, it shows what it does."""
        # A model of dynamic int8 layers only has no parameter: those run in float32 on the CPU.
        reference = next((p for p in self.parameters() if p.dtype.is_floating_point), torch.empty(0))
        converted = fn(torch.empty(0, dtype=reference.dtype, device=reference.device))
        if converted.dtype != reference.dtype:
            self._refuse(
                f"casting {type(self).__name__} to {converted.dtype} (half(), bfloat16(), double(), to(dtype))",
                "its int8 layers cannot be cast: cast the floating-point model, then quantize it "
                "(method='weight_only' takes any floating dtype, 'dynamic' float32)",
            )
        if converted.device.type != "cpu" and int8_record(self).method == "dynamic":
            self._refuse(
                f"moving {type(self).__name__} to {converted.device}",
                "its fbgemm int8 layers run on the CPU only: move the floating-point model, then quantize it "
                "with method='weight_only'",
            )
        return super()._apply(fn, recurse)

    def _refuse(self, operation: str, instead: str) -> None:
        raise RuntimeError(_refusal(self, int8_record(self), operation, instead))

    def __reduce_ex__(self, protocol: int):
        """``torch.save(model)``, ``copy.deepcopy``: the int8 class has no importable name, so the copy
        is built from the model's own class (`_new_int8_instance`), then given the model's state."""
        _, _, *state = super().__reduce_ex__(max(protocol, 2))  # (copyreg.__newobj__, (cls,), state, ...)
        return (_new_int8_instance, (self._model_class,), *state)


class Int8PreTrainedModel(Int8Module):
    """The refusals of an int8 transformers model: also weight tying, resizing, saving, uploading
    and compiled decoding with fbgemm layers."""

    def half(self, *args):
        """transformers refuses ``half()``/``float()`` of a model it quantized itself; here `_apply` decides."""
        return nn.Module.half(self, *args)

    def float(self, *args):
        return nn.Module.float(self, *args)

    def tie_weights(self, *args, **kwargs):
        self._refuse(
            f"{type(self).__name__}.tie_weights()",
            "its int8 output projection cannot share the floating-point embedding's weight: tie the "
            "floating-point model's weights, then quantize it",
        )

    def resize_token_embeddings(self, *args, **kwargs):
        self._refuse(
            f"{type(self).__name__}.resize_token_embeddings()",
            "its int8 output projection cannot be resized: resize the floating-point model's embeddings, then quantize it",
        )

    @property
    def hf_quantizer(self):
        """None, as for any model transformers did not quantize itself, except to transformers'
        ``save_pretrained``, which reads it before writing anything: the save is refused there, and so is
        an unbound ``push_to_hub`` that saves through it."""
        caller = sys._getframe(1)
        outer = caller.f_back
        if outer is not None and outer.f_code is ConvPreTrainedModel.save_pretrained.__code__:
            outer = outer.f_back  # talk_hf's save_pretrained, which calls transformers' (then exports remote code)
        if is_save_pretrained(caller) and is_push_to_hub(outer):
            self._refuse_to_save(
                "push_to_hub",
                "nothing was uploaded (called unbound, transformers' push_to_hub creates the Hub repository, when "
                "missing, before it saves: such a repository stays empty)",
            )
        if is_save_pretrained(caller):
            self._refuse_to_save("save_pretrained")
        return None

    def push_to_hub(self, *args, **kwargs):
        self._refuse_to_save("push_to_hub")

    def _refuse_to_save(self, operation: str, done: str = "nothing was written or uploaded") -> None:
        self._refuse(
            operation,
            f"its packed int8 weights would not load back with from_pretrained, so {done}: save the "
            "floating-point model and call quantize_int8 after loading it",
        )

    def _valid_auto_compile_criteria(self, model_kwargs: dict, generation_config) -> bool:
        """``generate`` asks this before its first step whether to compile the decoding step."""
        compiles = super()._valid_auto_compile_criteria(model_kwargs, generation_config)
        if compiles and int8_record(self).method == "dynamic":
            raise ValueError(
                _refusal(
                    self,
                    int8_record(self),
                    "generate(compile_config=...)",
                    "torch.compile cannot trace its fbgemm int8 layers: decode without compile_config, or "
                    "quantize the floating-point model with method='weight_only', which compiles",
                )
            )
        return compiles
