"""fairseq checkpoints -> talk_hf (issue #13): the converted models reproduce fairseq's own outputs.

The fixtures (``tests/fixtures/fairseq``, see its README) are tiny random checkpoints written by
fairseq 0.12.2 (TaLK: by a CPU re-implementation of the authors' plugin) with fairseq's encoder
outputs, teacher-forced logits, greedy translations and incremental step logits.  No fairseq and no
network here.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

import talk_hf  # noqa: F401  (registers the model types with the Auto classes)
from talk_hf.convert import convert_fairseq_checkpoint, fairseq_tokenizer
from talk_hf.convert.__main__ import main
from talk_hf.convert.fairseq_checkpoint import load_fairseq_checkpoint
from talk_hf.convert.fairseq_tokenizer import fsmt_merges, fsmt_vocabulary
from talk_hf.transformers_internals import CACHE_NAME

FIXTURES = Path(__file__).parents[1] / "fixtures" / "fairseq"
TRANSLATION = [
    "lightconv_iwslt_de_en_args",
    "dynamicconv_glu_wmt_en_de_cfg",
    "talkconv_iwslt_de_en_args",
    "talkconv_glu_wmt_en_de_args",
]
LANGUAGE_MODELS = ["lightconv_lm_dynamic_cfg"]
UNSUPPORTED = ["unsupported_adaptive_softmax", "unsupported_learned_positions"]
TOLERANCE = dict(rtol=0, atol=1e-5)  # float32, as the issue asks
PAD = 1
needs_sacremoses = pytest.mark.skipif(
    importlib.util.find_spec("sacremoses") is None,
    reason="the Moses tokenizer needs sacremoses (pip install sacremoses)",
)

# What each fixture is (its README's table) and the configuration it must become.
EXPECTED_CONFIGS = {
    "lightconv_iwslt_de_en_args": dict(
        model_type="dynamic_conv",
        conv_type="light_conv",
        use_glu=False,
        encoder_normalize_before=False,
        decoder_normalize_before=False,
        share_encoder_decoder_embeddings=False,
        tie_word_embeddings=True,
        vocab_size=24,
        decoder_vocab_size=32,
        encoder_conv_heads=2,
        decoder_conv_heads=4,
        encoder_kernel_sizes=[3, 5],
        decoder_kernel_sizes=[3, 5],
        activation_function="relu",
    ),
    "dynamicconv_glu_wmt_en_de_cfg": dict(
        model_type="dynamic_conv",
        conv_type="dynamic_conv",
        use_glu=True,
        encoder_normalize_before=True,
        decoder_normalize_before=False,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        vocab_size=40,
        decoder_vocab_size=40,
    ),
    "talkconv_iwslt_de_en_args": dict(
        model_type="talk",
        use_glu=False,
        share_encoder_decoder_embeddings=False,
        tie_word_embeddings=False,
        vocab_size=24,
        decoder_vocab_size=32,
        encoder_conv_heads=4,
        decoder_conv_heads=2,
        encoder_max_offsets=[1, 3],
        decoder_max_offsets=[1, 3],
        activation_function="swish",
    ),
    "talkconv_glu_wmt_en_de_args": dict(
        model_type="talk",
        use_glu=True,
        encoder_normalize_before=False,
        decoder_normalize_before=True,
        decoder_final_layer_norm=True,
        share_encoder_decoder_embeddings=True,
        encoder_max_offsets=[3, 7],
    ),
    "lightconv_lm_dynamic_cfg": dict(
        model_type="dynamic_conv_lm",
        conv_type="dynamic_conv",
        use_glu=True,
        decoder_normalize_before=True,
        decoder_final_layer_norm=False,
        tie_word_embeddings=True,
        vocab_size=40,
    ),
}


def expected_outputs(name: str) -> dict:
    return torch.load(FIXTURES / name / "expected.pt", weights_only=True)


def load_converted_model(folder: Path):
    seq2seq = AutoConfig.from_pretrained(folder).is_encoder_decoder
    auto_class = AutoModelForSeq2SeqLM if seq2seq else AutoModelForCausalLM
    return auto_class.from_pretrained(folder).eval()


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """name -> the fixture converted (without tokenizer) and loaded through the Auto classes; once per module."""
    models = {}

    def convert(name: str):
        if name not in models:
            folder = tmp_path_factory.mktemp(name)
            convert_fairseq_checkpoint(FIXTURES / name / "model.pt", folder, tokenizer=False)
            models[name] = load_converted_model(folder)
        return models[name]

    return convert


def write_variant(tmp_path: Path, name: str, args_update: dict | None = None, state_dict_update=None) -> Path:
    """A copy of fixture ``name`` (dictionaries included) with changed arguments or state dict, in
    fairseq's ``args`` layout; returns its ``model.pt``."""
    checkpoint = load_fairseq_checkpoint(FIXTURES / name / "model.pt")
    args = argparse.Namespace(**{**vars(checkpoint.args), **(args_update or {})})
    state_dict = state_dict_update(dict(checkpoint.state_dict)) if state_dict_update else checkpoint.state_dict
    for dictionary in (FIXTURES / name).glob("dict*.txt"):
        shutil.copy(dictionary, tmp_path / dictionary.name)
    torch.save({"args": args, "model": state_dict}, tmp_path / "model.pt")
    return tmp_path / "model.pt"


def teacher_forced_logits(model, expected: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """(our logits, fairseq's) at the real (non-pad) decoder inputs of the fixture's batch."""
    with torch.no_grad():
        if expected["kind"] == "lm":
            inputs = expected["input_tokens"]
            logits = model(input_ids=inputs).logits
        else:
            sources, inputs = expected["src_tokens"], expected["prev_output_tokens"]
            logits = model(input_ids=sources, attention_mask=sources != PAD, decoder_input_ids=inputs).logits
    real = inputs != PAD
    return logits[real], expected["logits"][real]


@pytest.mark.parametrize("name", list(EXPECTED_CONFIGS))
def test_configuration_follows_the_saved_arguments(name, converted):
    config = converted(name).config
    for field, value in EXPECTED_CONFIGS[name].items():
        assert getattr(config, field) == value, field
    assert config.position_offset == 2  # fairseq's positions start at padding_idx + 1
    generation = converted(name).generation_config
    start = generation.decoder_start_token_id if config.is_encoder_decoder else generation.bos_token_id
    assert start == 2  # fairseq's decoders read </s> first


@pytest.mark.parametrize("name", TRANSLATION)
def test_encoder_output_matches_fairseq(name, converted):
    expected = expected_outputs(name)
    sources = expected["src_tokens"]
    with torch.no_grad():
        ours = converted(name).get_encoder()(input_ids=sources, attention_mask=sources != PAD).last_hidden_state
    real = ~expected["encoder_padding_mask"]
    torch.testing.assert_close(ours[real], expected["encoder_out"][real], **TOLERANCE)


@pytest.mark.parametrize("name", TRANSLATION + LANGUAGE_MODELS)
def test_teacher_forced_logits_match_fairseq(name, converted):
    torch.testing.assert_close(*teacher_forced_logits(converted(name), expected_outputs(name)), **TOLERANCE)


def _generate_greedy(model, expected: dict) -> list[list[int]]:
    """Greedy search with the converted generation settings and the fixture's length limit
    (fairseq's max_len_b tokens, then a forced </s>); each output up to its first </s>."""
    limits = dict(num_beams=1, max_length=expected["generation"]["max_len_b"] + 2)
    if expected["kind"] == "lm":  # fairseq's LM reads </s> first; the prompt is forced
        prompts = torch.cat([torch.full((len(expected["prompt_tokens"]), 1), 2), expected["prompt_tokens"]], 1)
        outputs = model.generate(input_ids=prompts, **limits)
    else:
        sources = expected["src_tokens"]
        outputs = model.generate(input_ids=sources, attention_mask=(sources != PAD).long(), **limits)
    eos = model.generation_config.eos_token_id
    return [row[: row.index(eos) + 1] if eos in row else row for row in outputs[:, 1:].tolist()]


@pytest.mark.parametrize("name", TRANSLATION + LANGUAGE_MODELS)
def test_greedy_generation_matches_fairseq(name, converted):
    expected = expected_outputs(name)
    assert _generate_greedy(converted(name), expected) == expected["greedy_tokens"]


@pytest.mark.parametrize("name", TRANSLATION + LANGUAGE_MODELS)
def test_incremental_decoding_matches_fairseq_step_logits(name, converted):
    """One token at a time through the generation cache, fed </s> + fairseq's greedy tokens."""
    model, expected = converted(name), expected_outputs(name)
    for index, (tokens, step_logits) in enumerate(
        zip(expected["greedy_tokens"], expected["greedy_step_logits"], strict=True)
    ):
        if expected["kind"] == "lm":
            source, key = {}, "input_ids"
        else:
            source, key = {"input_ids": torch.tensor([expected["src_ids"][index]])}, "decoder_input_ids"
        cache, rows = None, []
        with torch.no_grad():
            for token in [2] + tokens[:-1]:
                output = model(**source, **{key: torch.tensor([[token]])}, cache=cache, use_cache=True)
                cache = getattr(output, CACHE_NAME)
                rows.append(output.logits[0, -1])
        torch.testing.assert_close(torch.stack(rows), step_logits, **TOLERANCE)


def _squeeze_lightconv_kernels(state_dict):
    """The layout of fairseq's CUDA LightconvLayer: kernels (H, K) instead of (H, 1, K)."""
    return {name: tensor.squeeze(1) if name.endswith("conv.weight") else tensor for name, tensor in state_dict.items()}


def _fuse_attention_projections(state_dict):
    """fairseq <= 0.6's layout: q, k, v projections stacked into in_proj_weight / in_proj_bias."""
    fused = {}
    for name, tensor in state_dict.items():
        if ".encoder_attn.q_proj." in name:
            parts = [state_dict[name.replace("q_proj", projection)] for projection in ("q_proj", "k_proj", "v_proj")]
            fused[name.replace("q_proj.", "in_proj_")] = torch.cat(parts)
        elif not any(f".encoder_attn.{projection}." in name for projection in ("k_proj", "v_proj")):
            fused[name] = tensor
    return fused


@pytest.mark.parametrize(
    "layout",
    [_squeeze_lightconv_kernels, _fuse_attention_projections],
    ids=["gpu-lightconv-kernels", "fused-qkv-fairseq-0.6"],
)
def test_older_and_gpu_layouts_convert_to_the_same_model(layout, tmp_path):
    name = "lightconv_iwslt_de_en_args"
    original = load_fairseq_checkpoint(FIXTURES / name / "model.pt").state_dict
    changed = layout(dict(original))
    assert {key: tensor.shape for key, tensor in changed.items()} != {
        key: tensor.shape for key, tensor in original.items()
    }
    checkpoint = write_variant(tmp_path, name, state_dict_update=layout)
    convert_fairseq_checkpoint(checkpoint, tmp_path / "out", tokenizer=False)
    model = load_converted_model(tmp_path / "out")
    torch.testing.assert_close(*teacher_forced_logits(model, expected_outputs(name)), **TOLERANCE)


def _widen_lightconv_iwslt_convolutions(state_dict):
    """Random linear1 / linear2 for conv_dim 24 instead of d = 16 (LightConv kernels do not depend on it)."""
    generator = torch.Generator().manual_seed(0)
    shapes = {"linear1.weight": (24, 16), "linear1.bias": (24,), "linear2.weight": (16, 24)}
    widened = {}
    for name, tensor in state_dict.items():
        shape = shapes.get(name.split(".", 3)[-1])  # "encoder.layers.0.linear1.weight" -> "linear1.weight"
        widened[name] = tensor if shape is None else torch.randn(shape, generator=generator)
    return widened


def test_conv_width_other_than_the_model_width(tmp_path):
    """No fixture has encoder_conv_dim = decoder_conv_dim != d: the mapping and the shape checks only."""
    widened = write_variant(
        tmp_path,
        "lightconv_iwslt_de_en_args",
        {"encoder_conv_dim": 24, "decoder_conv_dim": 24},
        _widen_lightconv_iwslt_convolutions,
    )
    assert convert_fairseq_checkpoint(widened, tmp_path / "out", tokenizer=False).conv_dim == 24
    model = load_converted_model(tmp_path / "out")
    state_dict = load_fairseq_checkpoint(widened).state_dict
    torch.testing.assert_close(
        model.model.decoder.layers[1].mixer.out_proj.weight,
        state_dict["decoder.layers.1.linear2.weight"],
        rtol=0,
        atol=0,
    )
    # The same weights under arguments that say conv_dim 16: refused, each shape named.
    write_variant(tmp_path, "lightconv_iwslt_de_en_args", state_dict_update=_widen_lightconv_iwslt_convolutions)
    with pytest.raises(
        ValueError,
        match=r"model.encoder.layers.0.mixer.in_proj.weight: checkpoint \(24, 16\), "
        r"expected \(16, 16\)",
    ):
        convert_fairseq_checkpoint(tmp_path / "model.pt", tmp_path / "refused", tokenizer=False)


@pytest.mark.parametrize("name", UNSUPPORTED)
def test_unsupported_architectures_are_refused_by_name(name, tmp_path):
    features = json.loads((FIXTURES / name / "unsupported.json").read_text())["unsupported"]
    with pytest.raises(ValueError, match="cannot reproduce") as error:
        convert_fairseq_checkpoint(FIXTURES / name / "model.pt", tmp_path)
    for feature in features:
        assert feature in str(error.value)
    assert not (tmp_path / "config.json").exists()


@pytest.mark.parametrize(
    "args_update, named",
    [
        ({"encoder_glu": True}, "different encoder and decoder glu (encoder_glu=True, decoder_glu=False)"),
        ({"encoder_kernel_size_list": [4, 5]}, "even encoder kernel sizes ([4]"),
        ({"weight_softmax": False}, "weight_softmax=False"),
        ({"decoder_output_dim": 8}, "decoder_output_dim=8 differs from decoder_embed_dim=16"),
        ({"encoder_conv_type": "dynamic"}, "encoder_conv_type='dynamic', decoder_conv_type='lightweight'"),
        ({"no_token_positional_embeddings": True}, "no positional embeddings"),
        ({"adaptive_input": True}, "adaptive input embeddings (adaptive_input=True)"),
        ({"character_embeddings": True}, "character embeddings (character_embeddings=True)"),
        ({"layernorm_embedding": True}, "a LayerNorm on the embeddings (layernorm_embedding=True)"),
    ],
)
def test_options_without_a_talk_hf_counterpart_are_named(args_update, named, tmp_path):
    checkpoint = write_variant(tmp_path, "lightconv_iwslt_de_en_args", args_update)
    with pytest.raises(ValueError) as error:
        convert_fairseq_checkpoint(checkpoint, tmp_path / "out", tokenizer=False)
    assert named in str(error.value)


def test_family_comes_from_the_arch_or_the_option(tmp_path):
    name = "talkconv_iwslt_de_en_args"
    checkpoint = write_variant(tmp_path, name, {"arch": "my_renamed_arch"})
    with pytest.raises(ValueError, match="'my_renamed_arch' is neither .* pass --family"):
        convert_fairseq_checkpoint(checkpoint, tmp_path / "out", tokenizer=False)
    config = convert_fairseq_checkpoint(checkpoint, tmp_path / "out", family="talk", tokenizer=False)
    assert config.model_type == "talk"
    torch.testing.assert_close(
        *teacher_forced_logits(load_converted_model(tmp_path / "out"), expected_outputs(name)), **TOLERANCE
    )
    # The wrong family: refused by the parameters' family, before anything is written.
    with pytest.raises(
        ValueError,
        match=r"converted as family 'lightconv', but its convolution parameters are those of family 'talk' "
        r"\(encoder.layers.0.conv.offsets.weight, the TaLK authors' plugin\): pass --family talk",
    ):
        convert_fairseq_checkpoint(checkpoint, tmp_path / "wrong", family="lightconv", tokenizer=False)
    assert not (tmp_path / "wrong").exists()


def test_dictionaries_must_fit_the_embeddings(tmp_path):
    # The IWSLT fixture's dictionaries swapped: 32 English symbols for a 24-row German embedding.
    with pytest.raises(
        ValueError,
        match=r"dict.en.txt has 32 symbols but the checkpoint's "
        r"encoder.embed_tokens.weight has 24 rows",
    ):
        convert_fairseq_checkpoint(
            FIXTURES / "lightconv_iwslt_de_en_args" / "model.pt", tmp_path, source_lang="en", target_lang="de"
        )
    (tmp_path / "alone").mkdir()
    shutil.copy(FIXTURES / "lightconv_iwslt_de_en_args" / "model.pt", tmp_path / "alone" / "model.pt")
    with pytest.raises(ValueError, match=r"dict.de.txt is missing"):
        convert_fairseq_checkpoint(tmp_path / "alone" / "model.pt", tmp_path / "out")


@pytest.mark.parametrize(
    "contents, message",
    [
        ([1, 2], "is not a fairseq checkpoint: expected a dict with a 'model' state dict"),
        ({"model": {}}, "holds no model arguments: neither 'args' nor 'cfg"),
        ({"model": {}, "cfg": {"model": {"encoder_layers": 2}}}, "the saved model arguments have no 'arch'"),
    ],
)
def test_files_that_are_not_usable_checkpoints_are_refused_with_the_reason(contents, message, tmp_path):
    torch.save(contents, tmp_path / "model.pt")
    with pytest.raises(ValueError, match=message):
        convert_fairseq_checkpoint(tmp_path / "model.pt", tmp_path / "out", tokenizer=False)
    assert not (tmp_path / "out" / "config.json").exists()


def _with_extra_parameters(*names_and_shapes):
    def update(state_dict):
        return {**state_dict, **{name: torch.zeros(shape) for name, shape in names_and_shapes}}

    return update


@pytest.mark.parametrize(
    "args_update, state_dict_update, message",
    [
        (
            None,
            _with_extra_parameters(("encoder.layers.0.mystery.weight", (2,))),
            r"fairseq parameters with no talk_hf counterpart: encoder.layers.0.mystery.weight \(2,\)",
        ),
        (
            None,
            _with_extra_parameters(("decoder.embed_out", (32, 16))),
            "share the decoder's input and output embeddings, but the checkpoint holds a separate decoder.embed_out",
        ),
        ({"decoder_embed_dim": None}, None, "the checkpoint's arguments lack 'decoder_embed_dim'"),
        (
            {"source_lang": None, "target_lang": None},
            None,
            r"does not name its language pair; pass --source-lang and --target-lang .*\['dict.de.txt', 'dict.en.txt'\]",
        ),
    ],
)
def test_inconsistent_checkpoints_are_refused_with_the_reason(args_update, state_dict_update, message, tmp_path):
    checkpoint = write_variant(tmp_path, "lightconv_iwslt_de_en_args", args_update, state_dict_update)
    with pytest.raises(ValueError, match=message):
        convert_fairseq_checkpoint(checkpoint, tmp_path / "out", tokenizer=False)


def test_bad_dictionaries_families_and_globals_are_named(tmp_path, capsys):
    checkpoint = write_variant(tmp_path, "lightconv_iwslt_de_en_args")
    with pytest.raises(ValueError, match=r"family must be one of \('lightconv', 'talk'\), got 'transformer'"):
        convert_fairseq_checkpoint(checkpoint, tmp_path / "out", family="transformer", tokenizer=False)
    assert main(["fairseq", str(checkpoint), str(tmp_path / "out"), "--allow-global", "no_such_module.Thing"]) == 1
    assert "--allow-global expects an importable MODULE.NAME, got 'no_such_module.Thing'" in capsys.readouterr().err
    dictionary = tmp_path / "dict.de.txt"
    dictionary.write_text(dictionary.read_text().replace(" ", "\t", 1))
    with pytest.raises(ValueError, match=r"dict.de.txt:1: expected 'symbol count'"):
        convert_fairseq_checkpoint(checkpoint, tmp_path / "out", tokenizer=False)


class _RunsCodeWhenUnpickled:
    """A pickled object whose unpickling would call ``os.system``: the converter must refuse it."""

    def __reduce__(self):
        return os.system, ("touch unpickled-code-ran",)


def test_loading_refuses_objects_outside_the_allow_list(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    torch.save({"args": _RunsCodeWhenUnpickled(), "model": {}}, tmp_path / "model.pt")
    with pytest.raises(
        ValueError,
        match=r"pickles the global posix.system, which is not on the converter's "
        r"allow-list",
    ):
        load_fairseq_checkpoint(tmp_path / "model.pt")
    assert not (tmp_path / "unpickled-code-ran").exists()
    # Plain data that training leaves in a checkpoint (numpy scalars and arrays) loads.
    numpy = pytest.importorskip("numpy")
    args = load_fairseq_checkpoint(FIXTURES / "lightconv_iwslt_de_en_args" / "model.pt").args
    torch.save(
        {"args": args, "model": {}, "extra_state": {"val_loss": numpy.float64(2.5), "seen": numpy.arange(3)}},
        tmp_path / "numpy.pt",
    )
    assert load_fairseq_checkpoint(tmp_path / "numpy.pt").arch == "lightconv_iwslt_de_en"


def test_command_line_writes_a_loadable_folder(tmp_path):
    name = "talkconv_glu_wmt_en_de_args"  # no bpecodes: no tokenizer, and no sacremoses needed
    command = [
        sys.executable,
        "-m",
        "talk_hf.convert",
        "fairseq",
        str(FIXTURES / name / "model.pt"),
        str(tmp_path / "out"),
        "--beam",
        "4",
        "--lenpen",
        "0.35",
        "--dtype",
        "float16",
    ]
    result = subprocess.run(
        command, capture_output=True, text=True, check=False, env={**os.environ, "HF_HUB_OFFLINE": "1"}
    )
    assert result.returncode == 0, result.stderr
    assert "wrote" in result.stdout and "talk (TaLKConfig)" in result.stdout
    out = tmp_path / "out"
    generation = json.loads((out / "generation_config.json").read_text())
    assert generation["num_beams"] == 4 and generation["length_penalty"] == 0.35
    assert (generation["decoder_start_token_id"], generation["forced_eos_token_id"]) == (2, 2)
    card = (out / "README.md").read_text()
    assert "license: mit" in card and "https://github.com/lioutasb/TaLKConvolutions" in card
    assert "No tokenizer" in card and not (out / "tokenizer_config.json").exists()
    with safe_open(out / "model.safetensors", "pt") as weights:
        assert {weights.get_tensor(key).dtype for key in weights.keys()} == {torch.float16}
    model = AutoModelForSeq2SeqLM.from_pretrained(out, dtype=torch.float32).eval()
    ours, theirs = teacher_forced_logits(model, expected_outputs(name))
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0.05)  # fp16 weights


def test_command_line_reports_errors(tmp_path, capsys):
    assert main(["fairseq", str(FIXTURES / "unsupported_adaptive_softmax" / "model.pt"), str(tmp_path)]) == 1
    assert "error:" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["fairseq", "--family", "transformer", "model.pt", str(tmp_path)])


def test_dictionaries_and_codes_become_fsmt_files(tmp_path):
    # subword-nmt marks continued pieces (ge@@), FSMT marks word ends (sehen</w>); fairseq's ids stay.
    vocabulary = fsmt_vocabulary(["<s>", "<pad>", "</s>", "<unk>", "ge@@", "sehen", "."])
    assert vocabulary == {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "ge": 4, "sehen</w>": 5, ".</w>": 6}
    # The header and frequency counts go; a merge listed twice keeps its first rank, as in subword-nmt.
    codes = tmp_path / "bpecodes"
    codes.write_text("#version: 0.2\ng e 120\ns e\ng e\n", encoding="utf-8")
    assert fsmt_merges(codes) == "g e\ns e\n"


# BPE codes under which the IWSLT fixture's German words become its dictionary's pieces:
# ich, habe, das, haus whole, gesehen -> ge@@ sehen.
IWSLT_CODES = (
    "#version: 0.2\ng e\ns e\ne n</w>\nh en</w>\nse hen</w>\ni c\nic h</w>\nh a\nha b\nhab e</w>\n"
    "d a\nda s</w>\nha u\nhau s</w>\n"
)


def _fixture_with_codes(tmp_path: Path, codes: str) -> Path:
    """The IWSLT LightConv fixture with ``codes`` as its bpecodes; returns its model.pt."""
    checkpoint = write_variant(tmp_path, "lightconv_iwslt_de_en_args")
    (tmp_path / "bpecodes").write_text(codes, encoding="utf-8")
    return checkpoint


@needs_sacremoses
def test_tokenizer_reproduces_moses_and_bpe(tmp_path):
    checkpoint = _fixture_with_codes(tmp_path, IWSLT_CODES)
    convert_fairseq_checkpoint(checkpoint, tmp_path / "out", lowercase=True)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "out")
    assert type(tokenizer).__name__ == "FSMTTokenizer"
    # Moses splits off the full stop; lowercasing; BPE: "gesehen" -> "ge@@ sehen"; </s> at the end;
    # ids are fairseq's (dict.de.txt: ich 4, habe 5, das 6, haus 7, ge@@ 8, sehen 9, . 10).
    source = tokenizer(["Ich habe das Haus gesehen."]).input_ids
    assert source == [expected_outputs("lightconv_iwslt_de_en_args")["src_ids"][0]]
    assert tokenizer.tokenize("gesehen") == ["ge", "sehen</w>"]
    # Decoding reads the target dictionary (dict.en.txt), joins BPE pieces and detokenizes.
    target = expected_outputs("lightconv_iwslt_de_en_args")["tgt_ids"][0]
    assert tokenizer.decode(target, skip_special_tokens=True) == "i have seen the house."
    assert "Moses, lowercased, then BPE" in (tmp_path / "out" / "README.md").read_text()


@needs_sacremoses
def test_tokenizer_needs_subword_nmt_codes_version_0_2(tmp_path):
    checkpoint = _fixture_with_codes(tmp_path, IWSLT_CODES.replace("#version: 0.2\n", ""))
    with pytest.raises(ValueError, match="does not start with '#version: 0.2'.*--no-tokenizer"):
        convert_fairseq_checkpoint(checkpoint, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # refused before anything is written
    convert_fairseq_checkpoint(checkpoint, tmp_path / "out", tokenizer=False)
    assert not (tmp_path / "out" / "tokenizer_config.json").exists()


def test_tokenizer_without_sacremoses_says_how_to_install_it(tmp_path, monkeypatch):
    checkpoint = _fixture_with_codes(tmp_path, IWSLT_CODES)
    monkeypatch.setattr(fairseq_tokenizer.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(
        ImportError,
        match=r"needs sacremoses: pip install sacremoses \(or, in the talk_hf clone, pip install -e '\.\[convert\]'\), or convert with --no-tokenizer",
    ):
        convert_fairseq_checkpoint(checkpoint, tmp_path / "out")
    assert not (tmp_path / "out").exists()
