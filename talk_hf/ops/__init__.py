"""The mixing operators: pure functions on batch-first tensors, no module state.

* :func:`talk_conv` — TaLK convolution (adaptive window sums), bidirectional or causal.
* :func:`dynamic_conv` — per-token predicted depthwise kernels.
* :func:`light_conv` — per-head depthwise kernels shared over time.
* :func:`talk_conv_step`, :func:`dynamic_conv_step` — the causal forms' one-token decoding step: the
  output of the last token of a context only, in O(K C) (LightConv's step is ``dynamic_conv_step``
  with its kernel for every row).
* :func:`depthwise_conv` — one static kernel per channel, causal or centred, with dilation.
* :func:`prepare_backend` — build and load the compiled kernels for a device now, not inside the
  first timed step.
* :class:`DocumentEdges` — the document edges of packed rows (padding-free training), derived from
  their ``position_ids`` once per batch and taken by every op above as ``document_edges=``
  (:mod:`.documents`: a window or tap never crosses a document's edge);
  :func:`position_ids_from_cu_seqlens`, :func:`position_ids_from_seq_idx` turn flash-attention's
  cumulative lengths and mamba's document index into those ``position_ids``.

Each op with compiled kernels is one folder (``talk_conv/``, ``dynamic_conv/`` for DynamicConv and
LightConv, ``depthwise_conv/``): its public function with its checks (the folder's ``__init__``),
its PyTorch path (``*_torch``), the registration of its kernels by the shared `CompiledOp`
(``*_compiled``, from :mod:`._compiled_op`) and its loop-form definition, the reference of the tests
(``*_naive``); its C++ and CUDA sources sit in ``csrc/<op>/``.  The two linear maps the layers run
are one module each.  ``linear`` (the few-row product of a decoding step) holds its public function,
the choice between its CPU kernel (``csrc/linear/``) and ``F.linear``, and its own custom op
``talk_hf::linear`` (registered without `CompiledOp`; it is opaque to ``torch.compile`` in a CPU
inference step only).  ``grouped_linear`` (SliceNet's grouped 1x1 convolution) is PyTorch only, with
no registration.  Backend choice: :mod:`._backend`.  Module file names are unique across talk_hf:
:func:`talk_hf.export_for_remote_code` copies the modules into one flat folder.
"""

from ._backend import prepare_backend
from .depthwise_conv import depthwise_conv
from .documents import DocumentEdges, position_ids_from_cu_seqlens, position_ids_from_seq_idx
from .dynamic_conv import dynamic_conv, dynamic_conv_step, light_conv
from .talk_conv import talk_conv, talk_conv_step

__all__ = [
    "talk_conv",
    "talk_conv_step",
    "dynamic_conv",
    "dynamic_conv_step",
    "light_conv",
    "depthwise_conv",
    "prepare_backend",
    "DocumentEdges",
    "position_ids_from_cu_seqlens",
    "position_ids_from_seq_idx",
]
