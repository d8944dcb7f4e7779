"""What fairseq itself refuses in a checkpoint's dictionaries and saved arguments is refused by the converter too,
naming the file (and line) and what is wrong; the converted folder's model card is talk_hf's."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from huggingface_hub import ModelCard
from transformers import AutoTokenizer

from talk_hf.convert import convert_fairseq_checkpoint
from talk_hf.convert.__main__ import main
from talk_hf.convert.fairseq_dictionary import SPECIAL_SYMBOLS, read_dictionary
from talk_hf.convert.fairseq_tokenizer import fsmt_vocabulary
from talk_hf.model_card import pipeline_tag

from .test_fairseq import FIXTURES, IWSLT_CODES, needs_sacremoses, write_variant

IWSLT = "lightconv_iwslt_de_en_args"


def _edit_line(path, number: int, text: str) -> None:
    """Replace line ``number`` (1-based) of the dictionary ``path`` by ``text``, keeping its size."""
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[number - 1] = text
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.mark.parametrize(
    "line, where",
    [
        ("ich 5", "'ich' is listed already (on line 1)"),
        ("<unk> 5", "'<unk>' is listed already (one of fairseq's special symbols, ids 0-3)"),
        ("</s> 5", "'</s>' is listed already (one of fairseq's special symbols, ids 0-3)"),
    ],
)
def test_a_symbol_listed_twice_is_refused_as_fairseq_refuses_it(line, where, tmp_path, capsys):
    checkpoint = write_variant(tmp_path, IWSLT)
    _edit_line(tmp_path / "dict.de.txt", 6, line)
    assert main(["fairseq", str(checkpoint), str(tmp_path / "out"), "--no-tokenizer"]) == 1
    error = capsys.readouterr().err
    assert f"error: {tmp_path / 'dict.de.txt'}:6: {where}; fairseq refuses such a dictionary" in error
    assert "unless the line ends with #fairseq:overwrite" in error
    assert not (tmp_path / "out").exists()


def test_fairseqs_overwrite_flag_adds_a_symbol_again_and_special_ids_stay(tmp_path):
    """As ``Dictionary.add_from_file``: a flagged line takes a new id (the model's row count counts it) and a
    word's text maps to its last id, while ``<s>``, ``<pad>``, ``</s>``, ``<unk>`` keep ids 0-3."""
    path = tmp_path / "dict.txt"
    path.write_text("ich 5\nhaus 4\nich 3 #fairseq:overwrite\n<unk> 0 #fairseq:overwrite\n", encoding="utf-8")
    symbols = read_dictionary(path)
    assert symbols == [*SPECIAL_SYMBOLS, "ich", "haus", "ich", "<unk>"]
    vocabulary = fsmt_vocabulary(symbols)
    assert vocabulary == {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "ich</w>": 6, "haus</w>": 5}


@needs_sacremoses
def test_a_re_listed_unk_leaves_the_tokenizers_unknown_id_at_fairseqs(tmp_path):
    checkpoint = write_variant(tmp_path, IWSLT)
    (tmp_path / "bpecodes").write_text(IWSLT_CODES, encoding="utf-8")
    _edit_line(tmp_path / "dict.de.txt", 20, "<unk> 0 #fairseq:overwrite")  # replaces madeupword0001: 24 rows
    convert_fairseq_checkpoint(checkpoint, tmp_path / "out", lowercase=True)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "out")
    assert tokenizer.unk_token_id == 3
    assert tokenizer("ich qqq").input_ids[0] == 4 and set(tokenizer("qqq").input_ids[:-1]) == {3}


def test_a_dictionary_that_is_not_utf8_is_named_with_its_line(tmp_path, capsys):
    checkpoint = write_variant(tmp_path, IWSLT)
    path = tmp_path / "dict.de.txt"
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[2] = "gr\xfc\xdfe 5"
    path.write_bytes(("\n".join(lines) + "\n").encode("latin-1"))
    assert main(["fairseq", str(checkpoint), str(tmp_path / "out"), "--no-tokenizer"]) == 1
    error = capsys.readouterr().err
    assert f"error: {path}:3: not UTF-8 (invalid start byte at byte " in error
    assert "fairseq writes and reads its dictionaries as UTF-8" in error


def test_a_saved_argument_of_the_wrong_type_is_one_error_line(tmp_path):
    """``python -m talk_hf.convert`` itself: no traceback, the checkpoint and its saved argument named."""
    checkpoint = write_variant(tmp_path, IWSLT, {"decoder_layers": "2"})
    command = [sys.executable, "-m", "talk_hf.convert", "fairseq", str(checkpoint), str(tmp_path / "out")]
    result = subprocess.run(
        command, capture_output=True, text=True, check=False, env={**os.environ, "HF_HUB_OFFLINE": "1"}
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr == (
        f"error: {checkpoint}: its saved arguments do not make a valid DynamicConvConfig: "
        f"decoder_layers must be an int, got '2' (str)\n"
    )


@pytest.mark.parametrize(
    "args_update, message",
    [
        ({"decoder_embed_dim": None}, "the checkpoint's arguments lack 'decoder_embed_dim', which the conversion"),
        ({"encoder_layers": None}, "the checkpoint's arguments lack 'encoder_layers', which the conversion needs"),
        (
            {"encoder_kernel_size_list": ["3", "7"]},
            "its saved arguments' encoder_kernel_size_list must be a list of ints, got ['3', '7']",
        ),
        ({"decoder_kernel_size_list": 3}, "its saved arguments' decoder_kernel_size_list must be a list of ints"),
        (
            {"encoder_kernel_size_list": [3], "encoder_layers": 2.0},
            "its saved arguments do not make a valid DynamicConvConfig: encoder_layers must be an int, got 2.0",
        ),
    ],
)
def test_unusable_saved_arguments_are_named_with_the_checkpoint(args_update, message, tmp_path):
    checkpoint = write_variant(tmp_path, IWSLT, args_update)
    with pytest.raises(ValueError) as error:
        convert_fairseq_checkpoint(checkpoint, tmp_path / "out", tokenizer=False)
    assert str(error.value).startswith(f"{checkpoint}: ")
    assert message in str(error.value)


@pytest.mark.parametrize(
    "name, family, other, parameter",
    [
        (IWSLT, "talk", "lightconv", "encoder.layers.0.conv.weight, fairseq's LightConv/DynamicConv"),
        ("lightconv_lm_dynamic_cfg", "talk", "lightconv", "decoder.layers.0.conv.weight_linear.weight"),
        ("talkconv_iwslt_de_en_args", "lightconv", "talk", "encoder.layers.0.conv.offsets.weight, the TaLK"),
    ],
)
def test_a_family_that_the_parameters_contradict_names_theirs(name, family, other, parameter, tmp_path, capsys):
    checkpoint = FIXTURES / name / "model.pt"
    assert main(["fairseq", str(checkpoint), str(tmp_path / "out"), "--family", family]) == 1
    error = capsys.readouterr().err
    assert f"is converted as family {family!r}, but its convolution parameters are those of family {other!r}" in error
    assert f"({parameter}" in error and error.endswith(f": pass --family {other}\n")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name, seq2seq", [(IWSLT, True), ("lightconv_lm_dynamic_cfg", False)])
def test_the_model_card_names_talk_hf_and_the_heads_task(name, seq2seq, tmp_path):
    convert_fairseq_checkpoint(FIXTURES / name / "model.pt", tmp_path, tokenizer=False)
    metadata = ModelCard((tmp_path / "README.md").read_text(encoding="utf-8")).data.to_dict()
    # The task talk_hf's own checkpoint cards give such a head (push_to_hub's card for the same model).
    task = pipeline_tag(seq2seq, None)
    assert task == ("text2text-generation" if seq2seq else "text-generation")
    assert metadata["library_name"] == "talk_hf" and metadata["pipeline_tag"] == task
    assert metadata["license"] == "mit" and metadata["tags"][0] == "talk_hf" and "fairseq" in metadata["tags"]
