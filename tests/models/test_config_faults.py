"""Fault injection into configurations and their config.json: a field of the wrong type or of an
absurd size fails when the configuration is built, loaded or saved, with an error naming the field."""

import json

import pytest
import transformers
from transformers import AutoConfig

import talk_hf
from talk_hf.models.config_checks import MAX_WEIGHT_ELEMENTS

from . import toy_family
from .helpers import ALL_CASES

CONFIG_CLASSES = [
    talk_hf.TaLKConfig,
    talk_hf.TaLKLMConfig,
    talk_hf.DynamicConvConfig,
    talk_hf.DynamicConvLMConfig,
    talk_hf.SliceNetConfig,
]
BOOL_FIELDS = ["scale_embedding", "tie_word_embeddings", "use_cache"]


def _save_with(tmp_path, config, **json_fields):
    """Save ``config`` and overwrite fields of its config.json (as a user editing it would)."""
    config.save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **json_fields}))
    return tmp_path


@pytest.mark.parametrize("config_class", CONFIG_CLASSES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("text", ["false", "no", "0", ""])
@pytest.mark.parametrize("field", BOOL_FIELDS)
def test_a_string_in_a_bool_field_of_config_json_fails_naming_the_field(tmp_path, config_class, text, field):
    """A non-empty string is truthy: "false" would turn the field on, so a string is refused."""
    folder = _save_with(tmp_path, config_class(), **{field: text})
    with pytest.raises(TypeError, match=f"{field} must be True or False, got '{text}' \\(str\\)"):
        AutoConfig.from_pretrained(folder)


@pytest.mark.parametrize(
    "config_class, json_fields, message",
    [
        (talk_hf.TaLKConfig, dict(use_glu="no"), "use_glu must be True or False, got 'no'"),
        (talk_hf.TaLKLMConfig, dict(decoder_normalize_before=1), "decoder_normalize_before must be True or False"),
        (talk_hf.TaLKConfig, dict(position_offset=1e12), r"position_offset must be an int, got 1000000000000.0"),
        (talk_hf.TaLKLMConfig, dict(d_model=256.0), r"d_model must be an int, got 256.0 \(float\)"),
        (talk_hf.DynamicConvLMConfig, dict(decoder_layers=True), "decoder_layers must be an int, got True"),
        (talk_hf.DynamicConvConfig, dict(dropout="0.1"), "dropout must be a finite number, got '0.1'"),
        (talk_hf.TaLKConfig, dict(init_std=None), "init_std must be a finite number, got None"),
        (talk_hf.TaLKConfig, dict(activation_function=["relu"]), "activation_function must be a string"),
        (talk_hf.DynamicConvConfig, dict(conv_type=None), "conv_type must be a string, got None"),
        (talk_hf.TaLKConfig, dict(encoder_max_offsets="1,3,7"), "encoder_max_offsets must be a list of ints"),
        (talk_hf.TaLKConfig, dict(decoder_max_offsets=[1, "3", 7]), r"decoder_max_offsets\[1\] must be an int"),
        (talk_hf.DynamicConvLMConfig, dict(decoder_kernel_sizes=[3, 7.0, 15]), r"decoder_kernel_sizes\[1\]"),
        (talk_hf.TaLKConfig, dict(pad_token_id="1"), "pad_token_id must be an int, got '1'"),
        (talk_hf.SliceNetConfig, dict(final_layer_norm="yes"), "final_layer_norm must be True or False"),
        (talk_hf.SliceNetConfig, dict(dilations=[1, 2, 1.5, 1]), r"dilations\[2\] must be an int"),
        (talk_hf.SliceNetConfig, dict(timing_num_timescales=16.0), "timing_num_timescales must be an int"),
    ],
)
def test_a_wrong_type_in_config_json_fails_naming_the_field(tmp_path, config_class, json_fields, message):
    folder = _save_with(tmp_path, config_class(), **json_fields)
    with pytest.raises(TypeError, match=message):
        AutoConfig.from_pretrained(folder)


def test_numbers_json_writes_without_a_fraction_load_into_float_fields(tmp_path):
    folder = _save_with(tmp_path, talk_hf.TaLKConfig(), dropout=0, init_std=1)
    loaded = AutoConfig.from_pretrained(folder)
    assert (loaded.dropout, loaded.init_std) == (0, 1)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_float_field_must_be_finite(value):
    with pytest.raises(TypeError, match="init_std must be a finite number"):
        talk_hf.TaLKLMConfig(init_std=value)
    with pytest.raises(TypeError, match="timing_max_timescale must be a finite number"):
        talk_hf.SliceNetConfig(timing_max_timescale=value)


def test_a_family_defined_outside_the_package_gets_the_type_checks():
    with pytest.raises(TypeError, match="kernel_dropout must be a finite number, got '0.1'"):
        toy_family.ToyLMConfig(kernel_dropout="0.1")
    with pytest.raises(TypeError, match=r"encoder_kernel_widths\[0\] must be an int"):
        toy_family.ToyConfig(encoder_kernel_widths=["3", 5, 7])


@pytest.mark.parametrize(
    "config_class, fields, message",
    [
        (talk_hf.TaLKConfig, dict(position_offset=10**12), "position_offset must be <= 1048576, got 1000000000000"),
        (talk_hf.TaLKLMConfig, dict(vocab_size=10**12), "vocab_size must be <= 16777216"),
        (
            talk_hf.DynamicConvConfig,
            dict(decoder_vocab_size=10**12, share_encoder_decoder_embeddings=False),
            "16777216",
        ),
        (talk_hf.TaLKLMConfig, dict(d_model=10**12), "d_model must be <= 262144"),
        (talk_hf.TaLKLMConfig, dict(conv_dim=10**12), "conv_dim must be <= 262144"),
        (talk_hf.TaLKConfig, dict(encoder_ffn_dim=10**12), "encoder_ffn_dim must be <= 262144"),
        (talk_hf.TaLKLMConfig, dict(decoder_layers=10**12), "decoder_layers must be <= 4096"),
        (talk_hf.DynamicConvConfig, dict(encoder_layers=10**12), "encoder_layers must be <= 4096"),
        (talk_hf.TaLKLMConfig, dict(decoder_conv_heads=10**12), "decoder_conv_heads must be <= 256"),
        (talk_hf.TaLKConfig, dict(decoder_attention_heads=10**12), "decoder_attention_heads must be <= 256"),
        (talk_hf.TaLKLMConfig, dict(decoder_max_offsets=[1, 10**12, 7]), r"decoder_max_offsets\[1\] must be <= 65536"),
        (talk_hf.DynamicConvConfig, dict(encoder_kernel_sizes=[3, 7, 10**9]), r"encoder_kernel_sizes\[2\] must be <="),
        (talk_hf.SliceNetConfig, dict(vocab_size=10**12), "vocab_size must be <= 16777216"),
        (talk_hf.SliceNetConfig, dict(decoder_layers=10**12), "decoder_layers must be <= 4096"),
        (talk_hf.SliceNetConfig, dict(num_beams=10**12), "num_beams must be <= 1024"),
        (talk_hf.SliceNetConfig, dict(dilations=[1, 1, 1, 10**9]), r"dilations\[3\] must be <= 65536"),
        (talk_hf.SliceNetConfig, dict(separability=10**12), "separability must be <= 256"),
        (
            talk_hf.SliceNetConfig,
            dict(kernel_sizes=[3, 3, 10**9 + 1], dilations=[1, 1, 1], separability=1),
            r"kernel_sizes\[2\]=1000000001 with dilation 1 reaches \(k - 1\) \* dilation = 1,000,000,000 steps",
        ),
        (
            talk_hf.SliceNetConfig,
            dict(kernel_sizes=[3, 3, 63], dilations=[1, 1, 2000]),
            r"kernel_sizes\[2\]=63 with dilation 2000 reaches \(k - 1\) \* dilation = 124,000 steps",
        ),
        (
            talk_hf.SliceNetConfig,
            dict(kernel_sizes=[3, 3, 65]),
            r"kernel_sizes\[2\]=65: a depthwise step's \(separability <= 0\) kernel has at most 63 taps",
        ),
    ],
)
def test_an_absurd_size_fails_naming_the_field(config_class, fields, message):
    with pytest.raises(ValueError, match=message):
        config_class(**fields)


def test_an_absurd_size_in_config_json_fails_naming_the_field(tmp_path):
    folder = _save_with(tmp_path, talk_hf.TaLKConfig(), position_offset=10**12)
    with pytest.raises(ValueError, match="position_offset must be <= 1048576, got 1000000000000"):
        AutoConfig.from_pretrained(folder)


@pytest.mark.parametrize(
    "config_class, fields, message",
    [
        (
            talk_hf.TaLKLMConfig,
            dict(vocab_size=2**24, d_model=2**10),
            r"token embedding would be vocab_size \(16,777,216\) x d_model \(1,024\) = 17,179,869,184 elements",
        ),
        (
            talk_hf.TaLKConfig,
            dict(
                d_model=2**17,
                conv_dim=8,
                encoder_ffn_dim=8,
                decoder_ffn_dim=8,
                vocab_size=8,
                pad_token_id=None,
                bos_token_id=None,
                eos_token_id=None,
                decoder_start_token_id=0,
            ),
            r"cross-attention projection would be d_model \(131,072\) x d_model \(131,072\)",
        ),
        (
            talk_hf.DynamicConvLMConfig,
            dict(d_model=2**16, decoder_conv_heads=2**10, decoder_kernel_sizes=[3, 7, 2**16]),
            r"decoder kernel predictor would be conv_dim \(65,536\) x decoder_conv_heads \* max\(decoder_kernel_sizes\)",
        ),
        (
            talk_hf.SliceNetConfig,
            dict(vocab_size=2**24, d_model=2**10),
            r"token embedding would be vocab_size \(16,777,216\) x d_model \(1,024\)",
        ),
    ],
)
def test_a_weight_matrix_beyond_the_limit_fails_naming_the_fields(config_class, fields, message):
    with pytest.raises(ValueError, match=message):
        config_class(**fields)


def test_sizes_of_real_models_pass_up_to_the_limits():
    talk_hf.TaLKLMConfig.from_preset("wikitext-103")  # vocabulary 267,744 x 1,024
    at_the_limit = talk_hf.DynamicConvLMConfig(vocab_size=2**24, d_model=MAX_WEIGHT_ELEMENTS // 2**24)
    assert at_the_limit.vocab_size * at_the_limit.d_model == MAX_WEIGHT_ELEMENTS
    talk_hf.TaLKLMConfig(position_offset=2**20, decoder_max_offsets=[2**16, 3, 7])
    talk_hf.SliceNetConfig(kernel_sizes=[3, 3, 63], dilations=[1, 1, 1056])  # reach 62 x 1,056 = 65,472


@pytest.mark.parametrize(
    "config_class, alias, field, value, message",
    [
        (talk_hf.TaLKConfig, "hidden_size", "d_model", 30, "conv_dim=30 must be divisible by decoder_conv_heads=4"),
        (talk_hf.TaLKLMConfig, "num_hidden_layers", "decoder_layers", 10**12, "decoder_layers must be <= 4096"),
        (talk_hf.DynamicConvConfig, "num_attention_heads", "decoder_attention_heads", 3, "decoder_attention_heads=3"),
        (talk_hf.SliceNetConfig, "hidden_size", "d_model", 10**12, "d_model must be <= 262144"),
    ],
)
def test_fields_set_by_their_transformers_alias_are_checked(config_class, alias, field, value, message):
    """A field set by its transformers alias (``hidden_size=`` for d_model) is checked as the field itself is."""
    with pytest.raises(ValueError, match=message):
        config_class(**{alias: value})


def test_defaults_follow_a_field_set_by_its_alias():
    config = talk_hf.TaLKConfig(hidden_size=64, num_hidden_layers=5)
    assert (config.d_model, config.conv_dim) == (64, 64)
    assert config.encoder_max_offsets == [1, 3, 7, 15, 15]


@pytest.mark.parametrize(
    "config_class, field, value, error",
    [
        (talk_hf.TaLKConfig, "use_glu", "no", TypeError),
        (talk_hf.DynamicConvLMConfig, "vocab_size", 10**12, ValueError),
        (talk_hf.SliceNetConfig, "scale_embedding", "false", TypeError),
    ],
)
def test_a_field_set_wrong_after_construction_fails_on_save(tmp_path, config_class, field, value, error):
    config = config_class()
    setattr(config, field, value)
    with pytest.raises(error, match=field):
        config.save_pretrained(tmp_path)
    assert not (tmp_path / "config.json").exists()


@pytest.mark.parametrize(
    "overrides, error, message",
    [
        (dict(use_glu="no"), TypeError, "use_glu must be True or False, got 'no'"),
        (dict(position_offset=10**12), ValueError, "position_offset must be <= 1048576"),
    ],
)
def test_field_values_passed_to_from_pretrained_are_checked(tmp_path, overrides, error, message):
    """transformers sets them on the loaded configuration, after building it."""
    talk_hf.TaLKConfig().save_pretrained(tmp_path)
    with pytest.raises(error, match=message):
        AutoConfig.from_pretrained(tmp_path, **overrides)
    assert AutoConfig.from_pretrained(tmp_path, use_glu=False).use_glu is False


def test_updates_are_checked():
    config = talk_hf.DynamicConvLMConfig()
    with pytest.raises(ValueError, match="vocab_size must be <= 16777216"):
        config.update_from_string("vocab_size=1000000000000")
    with pytest.raises(ValueError, match="decoder_kernel_sizes must have one entry per layer"):
        talk_hf.DynamicConvLMConfig().update({"decoder_layers": 4})
    config = talk_hf.DynamicConvLMConfig()
    config.update({"decoder_layers": 4, "decoder_kernel_sizes": [3, 5, 7, 9]})
    assert config.decoder_kernel_sizes == [3, 5, 7, 9]


def _faults_set_after_construction(case):
    """The issue's repros, as this family has them: (field, value, error, message)."""
    is_slicenet = case.config_class is talk_hf.SliceNetConfig
    window_field = "kernel_sizes" if is_slicenet else case.config_class.family.sizes_field("decoder")
    faults = [
        (window_field, [-5, 3, 3] if is_slicenet else [-5, 3], ValueError, rf"{window_field}\[0\] must be >= "),
        ("d_model", "32", TypeError, r"d_model must be an int, got '32' \(str\)"),
        ("vocab_size", 0, ValueError, "vocab_size must be >= 1, got 0"),
    ]
    if is_slicenet:
        faults.append(("module_residual", "bogus", ValueError, "module_residual must be one of"))
    else:
        faults.append(("activation_function", "bogus", ValueError, "activation_function must be one of"))
    if "conv_type" in case.config_kwargs or case.config_class.model_type.startswith("dynamic_conv"):
        faults.append(("conv_type", "bogus", ValueError, r"conv_type must be one of \('dynamic_conv', 'light_conv'\)"))
    return [(case, *fault) for fault in faults]


@pytest.mark.parametrize(
    "case, field, value, error, message",
    [fault for case in ALL_CASES for fault in _faults_set_after_construction(case)],
    ids=lambda value: value.name if hasattr(value, "head") else None,
)
def test_a_field_set_wrong_after_construction_fails_when_a_model_is_built(case, field, value, error, message):
    """transformers' configurations take setattr, past the configuration's checks: the model checks them again
    (before: raw tensor errors, or conv_type='bogus' building a DynamicConv model)."""
    for model_class in (case.base, case.head):
        config = case.config()
        setattr(config, field, value)
        with pytest.raises(error, match=f"the configuration of {model_class.__name__}: {message}"):
            model_class(config)


def test_a_field_set_right_after_construction_builds_the_model():
    case = next(case for case in ALL_CASES if case.name == "light_conv-lm")
    config = case.config()
    config.conv_type, config.decoder_kernel_sizes = "dynamic_conv", [3, 7]
    model = case.head(config)
    assert model.config.conv_type == "dynamic_conv"
    assert type(model.get_submodule("model.decoder.layers.1.mixer.core")).__name__ == "DynamicConvCore"


def test_a_model_built_from_another_kind_of_configuration_fails_naming_both():
    with pytest.raises(TypeError, match="TaLKModel is built from a TaLKConfig, got BertConfig"):
        talk_hf.TaLKModel(transformers.BertConfig())


def test_vocab_size_set_after_construction_sets_the_one_shared_vocabulary():
    """transformers' common tests (and its resizing) set `vocab_size` alone: with shared embeddings the
    decoder's vocabulary follows it; separate vocabularies stay apart."""
    case = next(case for case in ALL_CASES if case.name == "talk-seq2seq")
    config = case.config()
    config.vocab_size, config.pad_token_id = 4, 3
    model = case.head(config)
    assert model.get_input_embeddings().num_embeddings == config.decoder_vocab_size == 4
    separate = case.config(share_encoder_decoder_embeddings=False, decoder_vocab_size=50)
    separate.vocab_size = 30
    assert (separate.vocab_size, separate.decoder_vocab_size) == (30, 50)
