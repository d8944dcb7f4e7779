"""The benchmarks' same-size baselines and the example scripts' are built by one function
(`examples/common/models.transformer_config`): the same sizes give the same size fields."""

import _models
import pytest
from common.models import build_config, transformer_config
from common.tokenizer import train_tokenizer

SIZE_FIELDS = {
    "marian": (
        "vocab_size",
        "decoder_vocab_size",
        "d_model",
        "encoder_layers",
        "decoder_layers",
        "encoder_attention_heads",
        "decoder_attention_heads",
        "encoder_ffn_dim",
        "decoder_ffn_dim",
        "max_position_embeddings",
    ),
    "gpt2": ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "n_inner"),
}


@pytest.mark.parametrize("encoder_decoder", [True, False])
def test_a_benchmark_baseline_has_the_sizes_of_the_scripts_baseline(encoder_decoder):
    tokenizer = train_tokenizer(["a b c d e f g h", "i j k l m n"] * 4, kind="word", vocab_size=40)
    shape = _models.ModelShape(d_model=16, layers=2, heads=2, ffn=32, vocab=len(tokenizer))
    name = _models.SEQ2SEQ_BASELINE if encoder_decoder else _models.LM_BASELINE
    benchmark = _models.build_model(name, shape, max_positions=64).config
    layers = dict(encoder_layers=2, decoder_layers=2) if encoder_decoder else dict(decoder_layers=2)
    script = build_config(
        "transformer", tokenizer, encoder_decoder, max_positions=64, d_model=16, ffn_dim=32, heads=2, **layers
    )
    assert benchmark.model_type == script.model_type
    fields = SIZE_FIELDS[script.model_type]
    assert {f: getattr(benchmark, f) for f in fields} == {f: getattr(script, f) for f in fields}
    assert getattr(script, fields[2]) == 16  # the width asked for, not a default


def test_gpt2_refuses_encoder_sizes_naming_them():
    with pytest.raises(ValueError, match="encoder_layers=3.*GPT-2, which has no encoder"):
        transformer_config(
            False, vocab_size=10, d_model=8, heads=2, layers=1, ffn_dim=16, max_positions=8, encoder_layers=3
        )


def test_marian_encoder_sizes_default_to_the_decoders():
    config = transformer_config(True, vocab_size=10, d_model=8, heads=2, layers=3, ffn_dim=16, max_positions=8)
    assert (config.encoder_layers, config.encoder_ffn_dim) == (3, 16)
    config = transformer_config(
        True,
        vocab_size=10,
        d_model=8,
        heads=2,
        layers=3,
        ffn_dim=16,
        max_positions=8,
        encoder_layers=1,
        encoder_ffn_dim=4,
    )
    assert (config.encoder_layers, config.decoder_layers, config.encoder_ffn_dim, config.decoder_ffn_dim) == (
        1,
        3,
        4,
        16,
    )
