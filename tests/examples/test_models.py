"""`build_model` as the scripts use it: SliceNet's flags, configuration overrides."""

import pytest
from common.models import build_model, our_config

from .conftest import Vocabulary, load_script


def test_slicenet_is_a_translation_model_type_with_its_own_size_flags():
    translation, language_modeling = load_script("translation/train.py"), load_script("language-modeling/train.py")
    assert translation.parse_args(["--output_dir", "x", "--model_type", "slicenet"]).model_type == "slicenet"
    with pytest.raises(SystemExit):  # not a choice of the LM script: SliceNet has no decoder-only form
        language_modeling.parse_args(["--output_dir", "x", "--model_type", "slicenet"])
    tokenizer = Vocabulary(pad_token_id=1, bos_token_id=0, eos_token_id=2)
    with pytest.raises(ValueError, match="--ffn_dim and --heads do not apply to slicenet"):
        build_model("slicenet", tokenizer, True, ffn_dim=64, heads=2)
    config = our_config("slicenet", tokenizer, True, d_model=48, encoder_layers=1, dropout=0.2)
    assert (config.model_type, config.d_model, config.encoder_layers, config.dropout) == ("slicenet", 48, 1, 0.2)
    assert config.vocab_size == 50 and config.decoder_start_token_id == 2


def test_config_overrides_set_fields_after_the_preset_and_are_checked():
    args = load_script("translation/train.py").parse_args(
        ["--output_dir", "x", "--model_type", "slicenet", "--config_overrides", "final_layer_norm=true,dropout=0.25"]
    )
    tokenizer = Vocabulary(pad_token_id=1, bos_token_id=0, eos_token_id=2)
    sizes = dict(d_model=48, encoder_layers=1, decoder_layers=1)
    model = build_model("slicenet", tokenizer, True, config_overrides=args.config_overrides, **sizes)
    assert model.config.final_layer_norm is True and model.config.dropout == 0.25
    assert model.model.decoder.final_norm is not None
    with pytest.raises(ValueError, match="final_layer_nrm"):  # transformers: not a field of the configuration
        build_model("slicenet", tokenizer, True, config_overrides="final_layer_nrm=true", **sizes)
    with pytest.raises(ValueError, match="dropout must be a probability"):  # checked as a new configuration
        build_model("slicenet", tokenizer, True, config_overrides="dropout=1.5", **sizes)
