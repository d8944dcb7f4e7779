"""The conversion's output folder: files it would replace are refused without --overwrite, and a tokenizer
it does not write must fit the converted model (issue 57, item 1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from talk_hf.convert import convert_fairseq_checkpoint
from talk_hf.convert.__main__ import build_parser, main

FIXTURES = Path(__file__).parents[1] / "fixtures" / "fairseq"
NO_CODES = FIXTURES / "talkconv_glu_wmt_en_de_args" / "model.pt"  # no bpecodes: no tokenizer written
IWSLT = FIXTURES / "lightconv_iwslt_de_en_args" / "model.pt"  # 24 source and 32 target symbols, bpecodes
LANGUAGE_MODEL = FIXTURES / "lightconv_lm_dynamic_cfg" / "model.pt"  # 40 symbols


def _users_files(folder: Path, *names: str) -> dict[str, str]:
    """Write a user's file of each name into ``folder``; returns {name: contents}."""
    folder.mkdir(parents=True, exist_ok=True)
    contents = {name: f"the user's own {name}\n" for name in names}
    for name, text in contents.items():
        (folder / name).write_text(text)
    return contents


def _vocabulary(size: int) -> str:
    return json.dumps({f"token{index}": index for index in range(size)})


def _contents(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in folder.iterdir()}


def test_the_command_line_refuses_to_replace_a_users_files_and_names_them(tmp_path, capsys):
    out = tmp_path / "out"
    users = _users_files(out, "README.md", "config.json", "model.safetensors", "notes.txt")
    assert main(["fairseq", str(NO_CODES), str(out)]) == 1
    error = capsys.readouterr().err
    assert "already holds README.md, config.json, model.safetensors, which the conversion would replace" in error
    assert "--overwrite" in error and "notes.txt" not in error
    assert {path.name: path.read_text() for path in out.iterdir()} == users  # nothing written
    assert main(["fairseq", str(NO_CODES), str(out), "--overwrite"]) == 0
    assert json.loads((out / "config.json").read_text())["model_type"] == "talk"
    assert (out / "notes.txt").read_text() == users["notes.txt"]  # only the conversion's files are replaced
    # The model card says how to install talk_hf, which is not on the package index.
    assert "pip install -e <path to a clone of the talk_hf repository>" in (out / "README.md").read_text()


def test_the_overwrite_option_names_what_it_replaces():
    help_text = " ".join(build_parser()._subparsers._group_actions[0].choices["fairseq"].format_help().split())
    assert "--overwrite replace the files OUTPUT_DIR already holds" in help_text
    for name in ("README.md", "config.json", "generation_config.json", "model.safetensors", "tokenizer_config.json"):
        assert name in help_text


def test_a_second_conversion_into_the_same_folder_needs_overwrite(tmp_path):
    convert_fairseq_checkpoint(NO_CODES, tmp_path / "out")
    before = _contents(tmp_path / "out")
    with pytest.raises(ValueError, match="already holds README.md, config.json, generation_config.json, model"):
        convert_fairseq_checkpoint(NO_CODES, tmp_path / "out", num_beams=2)
    assert _contents(tmp_path / "out") == before
    convert_fairseq_checkpoint(NO_CODES, tmp_path / "out", num_beams=2, overwrite=True)
    assert json.loads((tmp_path / "out" / "generation_config.json").read_text())["num_beams"] == 2


def test_a_tokenizer_being_written_counts_among_the_replaced_files(tmp_path):
    users = _users_files(tmp_path / "out", "merges.txt")
    with pytest.raises(ValueError, match="already holds merges.txt, which the conversion would replace"):
        convert_fairseq_checkpoint(IWSLT, tmp_path / "out")
    assert (tmp_path / "out" / "merges.txt").read_text() == users["merges.txt"]


def test_no_tokenizer_beside_another_models_tokenizer_is_refused_naming_files_and_sizes(tmp_path):
    """--no-tokenizer kept a stale tokenizer of vocabulary 300 beside a model of 32."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "FSMTTokenizer"}))
    (out / "vocab-src.json").write_text(_vocabulary(24))
    (out / "vocab-tgt.json").write_text(_vocabulary(300))
    for overwrite in (False, True):  # --overwrite replaces the conversion's files, not a tokenizer it does not write
        with pytest.raises(ValueError) as refused:
            convert_fairseq_checkpoint(IWSLT, out, tokenizer=False, overwrite=overwrite)
        message = str(refused.value)
        assert "holds another model's tokenizer (vocab-src.json, vocab-tgt.json, tokenizer_config.json)" in message
        assert (
            "vocab-tgt.json has a vocabulary of 300 tokens, but the converted model's target vocabulary has 32"
            in message
        )
        assert "--no-tokenizer" in message
        assert sorted(path.name for path in out.iterdir()) == [
            "tokenizer_config.json",
            "vocab-src.json",
            "vocab-tgt.json",
        ]


def test_other_tokenizer_files_beside_the_written_tokenizer_are_refused(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "tokenizer.json").write_text(json.dumps({"model": {"vocab": json.loads(_vocabulary(24))}}))
    with pytest.raises(ValueError, match=r"tokenizer files \(tokenizer.json\) that the conversion's tokenizer"):
        convert_fairseq_checkpoint(IWSLT, out, overwrite=True)
    assert [path.name for path in out.iterdir()] == ["tokenizer.json"]


def test_a_tokenizer_that_fits_the_model_stays(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "vocab-src.json").write_text(_vocabulary(24))
    (out / "vocab-tgt.json").write_text(_vocabulary(32))
    convert_fairseq_checkpoint(IWSLT, out, tokenizer=False)
    assert json.loads((out / "vocab-tgt.json").read_text()) == json.loads(_vocabulary(32))


def test_a_language_model_beside_another_tokenizer_is_refused(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    added = [{"id": 299, "content": "<extra>"}]
    (out / "tokenizer.json").write_text(
        json.dumps({"model": {"vocab": json.loads(_vocabulary(8))}, "added_tokens": added})
    )
    with pytest.raises(
        ValueError,
        match="tokenizer.json has a vocabulary of 300 tokens, but the converted model's source vocabulary has 40",
    ):
        convert_fairseq_checkpoint(LANGUAGE_MODEL, out)
    assert not (out / "config.json").exists()


@pytest.mark.parametrize(
    "files, message",
    [
        (
            {"tokenizer_config.json": "{}", "spiece.model": "binary"},
            r"tokenizer files \(tokenizer_config.json, spiece.model\) .* cannot read",
        ),
        ({"vocab.json": "[1, 2"}, r"vocab.json is no readable tokenizer vocabulary \(JSONDecodeError"),
        ({"vocab.json": "[1, 2]"}, r"vocab.json is no readable tokenizer vocabulary \(AttributeError"),
    ],
)
def test_a_tokenizer_whose_size_cannot_be_read_is_refused(tmp_path, files, message):
    out = tmp_path / "out"
    out.mkdir()
    for name, text in files.items():
        (out / name).write_text(text)
    with pytest.raises(ValueError, match=message):
        convert_fairseq_checkpoint(NO_CODES, out)
