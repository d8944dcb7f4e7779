"""SliceNet models and configuration (Kaiser, Gomez & Chollet 2017)."""

from .configuration_slicenet import SliceNetConfig
from .modeling_slicenet import SliceNetForConditionalGeneration, SliceNetModel, SliceNetPreTrainedModel
