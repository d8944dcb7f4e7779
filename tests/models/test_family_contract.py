"""A `MixerFamily` names fields of its configurations by string; a configuration class that lacks one
fails when it is defined, not when a model is built from it."""

from __future__ import annotations

import pytest

from talk_hf.models.conv_configuration import ConvLMConfigBase, ConvSeq2SeqConfigBase
from talk_hf.models.families import MODEL_FAMILIES

from . import toy_family


def test_a_configuration_without_its_familys_dropout_field_fails_when_defined():
    with pytest.raises(
        TypeError, match=r"NoDropoutLMConfig names the MixerFamily 'toy', whose fields \['kernel_dropout'\]"
    ):

        class NoDropoutLMConfig(ConvLMConfigBase):
            model_type = "toy_conv_lm_without_dropout"
            family = toy_family.TOY

            decoder_kernel_widths: list[int] | None = None


def test_a_configuration_without_a_size_field_of_its_family_fails_when_defined():
    """An encoder-decoder needs the sizes of both stacks; the decoder's alone is not enough."""
    with pytest.raises(TypeError, match=r"NoEncoderSizesConfig .* 'toy', whose fields \['encoder_kernel_widths'\]"):

        class NoEncoderSizesConfig(ConvSeq2SeqConfigBase):
            model_type = "toy_conv_without_encoder_sizes"
            family = toy_family.TOY

            decoder_kernel_widths: list[int] | None = None
            kernel_dropout: float = 0.0


@pytest.mark.parametrize(
    "config_class",
    [model_type.config_class for model_type in MODEL_FAMILIES if getattr(model_type.config_class, "family", None)],
    ids=lambda config_class: config_class.__name__,
)
def test_the_registered_families_declare_their_fields(config_class):
    """TaLK, DynamicConv and the toy family (registered by importing it) were defined, hence checked."""
    config_class.family.check_fields_of(config_class)
