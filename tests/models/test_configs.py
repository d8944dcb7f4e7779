"""Configuration checks, presets and JSON round trips."""

import pytest
from transformers import AutoConfig

import talk_hf
from talk_hf.models.families import family_of

from . import toy_family
from .helpers import CASE_IDS, CASES

CONFIG_CLASSES = [talk_hf.TaLKConfig, talk_hf.TaLKLMConfig, talk_hf.DynamicConvConfig, talk_hf.DynamicConvLMConfig]


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_auto_config_round_trip(case, tmp_path):
    config = case.config()
    config.save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert type(loaded) is case.config_class
    assert loaded.to_diff_dict() == config.to_diff_dict() and loaded.to_dict().keys() == config.to_dict().keys()


@pytest.mark.parametrize(
    "config_class, kwargs, message",
    [
        (talk_hf.TaLKConfig, dict(d_model=30, encoder_conv_heads=4), "conv_dim=30 must be divisible by"),
        (talk_hf.TaLKConfig, dict(d_model=32, decoder_attention_heads=5), "decoder_attention_heads=5"),
        (
            talk_hf.TaLKConfig,
            dict(encoder_layers=2, encoder_max_offsets=[1, 3, 7]),
            "encoder_max_offsets must have one entry per layer",
        ),
        (talk_hf.TaLKLMConfig, dict(decoder_max_offsets=[1, -3, 7]), r"decoder_max_offsets\[1\] must be >= 0"),
        (talk_hf.TaLKLMConfig, dict(decoder_layers=0), "decoder_layers must be >= 1"),
        (talk_hf.TaLKLMConfig, dict(offset_dropout=1.5), "offset_dropout must be a probability"),
        (talk_hf.DynamicConvConfig, dict(decoder_kernel_sizes=[3, 0, 7]), r"decoder_kernel_sizes\[1\] must be >= 1"),
        (talk_hf.DynamicConvConfig, dict(conv_type="dilated"), "conv_type must be one of"),
        (talk_hf.DynamicConvLMConfig, dict(activation_function="mish2"), "activation_function must be one of"),
        (talk_hf.DynamicConvLMConfig, dict(vocab_size=2, eos_token_id=2), "eos_token_id=2 must be < vocab_size=2"),
    ],
)
def test_invalid_fields_raise_naming_the_field(config_class, kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        config_class(**kwargs)


def test_per_layer_sizes_must_be_ints():
    with pytest.raises(TypeError, match=r"decoder_kernel_sizes\[0\] must be an int"):
        talk_hf.DynamicConvLMConfig(decoder_kernel_sizes=[3.0, 7, 15])


@pytest.mark.parametrize("config_class", CONFIG_CLASSES, ids=lambda c: c.__name__)
def test_every_preset_builds_and_sizes_match_the_layer_counts(config_class):
    assert "small" in config_class.presets
    for name in config_class.presets:
        config = config_class.from_preset(name)
        sizes = getattr(config, "decoder_max_offsets", None) or config.decoder_kernel_sizes
        assert len(sizes) == config.decoder_layers


def test_paper_presets_hold_the_papers_numbers():
    iwslt = talk_hf.TaLKConfig.from_preset("iwslt14-de-en")
    assert (iwslt.d_model, iwslt.encoder_ffn_dim, iwslt.encoder_layers, iwslt.decoder_layers) == (512, 1024, 7, 6)
    assert iwslt.encoder_max_offsets == [1, 3, 7, 15, 15, 15, 15] and not iwslt.use_glu
    deep = talk_hf.DynamicConvConfig.from_preset("cnn-dm-deep")
    assert deep.decoder_kernel_sizes == [3, 7] + [31] * 8 and deep.encoder_layers == 10
    lm = talk_hf.TaLKLMConfig.from_preset("wikitext-103", vocab_size=1000)
    assert lm.decoder_max_offsets == [3, 5, 7, 15, 31] + [63] * 12 and lm.vocab_size == 1000
    assert lm.decoder_normalize_before
    assert (iwslt.dropout, lm.dropout) == (0.3, 0.3)  # the papers' regularisation stays with their presets


@pytest.mark.parametrize("config_class", CONFIG_CLASSES, ids=lambda c: c.__name__)
def test_small_presets_keep_the_models_own_dropout(config_class):
    """A preset is a model, not a run: the scripts' recipe sets dropout 0 for their runs of minutes."""
    assert config_class.from_preset("small").dropout == config_class().dropout == 0.1
    assert config_class.from_preset("small", dropout=0.2).dropout == 0.2


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(ValueError, match="iwslt14-de-en"):
        talk_hf.TaLKConfig.from_preset("iwslt15")


def test_defaults_follow_the_layer_count():
    config = talk_hf.DynamicConvConfig(encoder_layers=5, decoder_layers=2)
    assert config.encoder_kernel_sizes == [3, 7, 15, 31, 31] and config.decoder_kernel_sizes == [3, 7]
    assert talk_hf.TaLKLMConfig(decoder_layers=6).decoder_max_offsets == [1, 3, 7, 15, 15, 15]


def test_a_family_defined_outside_the_package_gets_the_generic_fields_and_checks():
    """toy_family.py names its MixerFamily once; the base configurations fill, check and register from it."""
    config = toy_family.ToyConfig(encoder_layers=4, decoder_layers=2)
    assert config.encoder_kernel_widths == [3, 7, 7, 7] and config.decoder_kernel_widths == [3, 7]
    with pytest.raises(ValueError, match=r"decoder_kernel_widths\[0\] must be >= 1"):
        toy_family.ToyLMConfig(decoder_kernel_widths=[0, 3, 3])
    with pytest.raises(ValueError, match="kernel_dropout must be a probability"):
        toy_family.ToyLMConfig(kernel_dropout=1.0)
    assert family_of("toy_conv").head_class is toy_family.ToyForConditionalGeneration
    assert family_of("toy_conv_lm").head_auto_class == "AutoModelForCausalLM"
    assert toy_family.ToyConfig.presets == {"small": {}}  # the configuration's defaults, for the scripts


@pytest.mark.parametrize("config_class", [talk_hf.DynamicConvConfig, talk_hf.DynamicConvLMConfig])
@pytest.mark.parametrize(("saved", "current"), [("dynamic", "dynamic_conv"), ("lightweight", "light_conv")])
def test_saved_legacy_conv_type_reads_as_its_op_name(tmp_path, config_class, saved, current):
    """Configurations saved before conv_type took its ops' names load with the current name."""
    config_class(conv_type=current).save_pretrained(tmp_path)
    saved_json = tmp_path / "config.json"
    saved_json.write_text(saved_json.read_text().replace(f'"conv_type": "{current}"', f'"conv_type": "{saved}"'))
    assert config_class.from_pretrained(tmp_path).conv_type == current
