"""The mixing operators: pure functions on batch-first tensors, no module state.

* :func:`talk_conv` — TaLK convolution (adaptive window sums), bidirectional or causal.
* :func:`dynamic_conv` — per-token predicted depthwise kernels.
* :func:`light_conv` — per-head depthwise kernels shared over time.
* :func:`depthwise_conv` — one static kernel per channel, causal or centred, with dilation.
* :func:`prepare_backend` — build and load the compiled kernels for a device now, not inside the
  first timed step.
"""

from ._backend import prepare_backend
from .depthwise_conv import depthwise_conv
from .dynamic_conv import dynamic_conv, light_conv
from .talk import talk_conv

__all__ = ["talk_conv", "dynamic_conv", "light_conv", "depthwise_conv", "prepare_backend"]
