"""The torch-free runner decodes with the model's generation configuration as ``model.generate`` does (issue 58).

Two converted fairseq fixtures are exported once per module: the IWSLT LightConv encoder-decoder and
the DynamicConv LM.  Their generation configurations (set by ``talk_hf.convert``) are fairseq's:
``forced_eos_token_id``, ``suppress_tokens`` (the padding), ``min_length`` 2, beam 5, ``max_length``
202, which an export once dropped, so that the exported models decoded other tokens than
``model.generate`` without a word.  Held here:

* ``--check`` (`check_tokens`) passes on them: greedy and their own beam-5 defaults;
* every logits processor the runner applies gives generate's tokens (float32), greedy and beam search,
  alone and combined, over those defaults; so does generate's default length (20 new tokens, bounded by
  ``max_position_embeddings``), and the manifest holds the settings as generate resolves them;
* sampling draws from generate's processed distribution, seeded: top_k=1 and a tiny top_p are greedy,
  forbidden tokens are never drawn, the first token's frequencies match generate's probabilities;
  beam sampling at a tiny temperature is beam search;
* a setting the runner does not apply, an unknown one, a bad value or one the strategy would not use
  is refused by name before anything runs (from a request or from the manifest).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from packaging.version import Version

from talk_hf.convert import convert_fairseq_checkpoint
from talk_hf.export import OnnxGenerator, export_onnx
from talk_hf.export import runner as runner_module
from talk_hf.export.__main__ import check_tokens, load_model
from talk_hf.export.onnx_files import _generation_fields
from talk_hf.export.runner_decoding import _FinishedBeams
from talk_hf.export.runner_logits import top_k
from talk_hf.export.runner_settings import APPLIED, DEFAULT_LENGTH, NOT_APPLIED, SAMPLING_ONLY

from .torch_free import generate_without_torch

pytest.importorskip("onnxscript")
pytest.importorskip("onnxruntime")

FIXTURES = Path(__file__).parents[1] / "fixtures" / "fairseq"
CONVERTED = {"seq2seq": "lightconv_iwslt_de_en_args", "lm": "lightconv_lm_dynamic_cfg"}
NEW_TOKENS = 10
PAD = 1


# Before transformers 5.24 the repetition penalty also counts a left-padded prompt's padding tokens.
PENALTY_SKIPS_PADDING = Version(transformers.__version__) >= Version("5.24")


@dataclass
class Exported:
    model: torch.nn.Module
    folder: Path
    runner: OnnxGenerator
    ids: (
        torch.Tensor
    )  # (3, S): an encoder-decoder's sources (row 0 right-padded) or an LM's prompts (row 0 left-padded)
    mask: torch.Tensor

    @property
    def prompt_length(self) -> int:
        return 1 if self.model.config.is_encoder_decoder else self.ids.shape[1]

    @property
    def vocab(self) -> int:
        """The logits' size (fairseq pads its dictionaries to a multiple of 8)."""
        return self.runner.manifest["vocab_size"]

    def generate(self, **settings) -> np.ndarray:
        with torch.no_grad():
            return self.model.generate(input_ids=self.ids, attention_mask=self.mask, **settings).numpy()

    def run(self, **settings) -> np.ndarray:
        return self.runner.generate(self.ids.numpy(), self.mask.numpy(), **settings)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """``exported(kind)``: the converted fixture of ``kind`` exported (once per module) with its runner."""
    done = {}

    def export(kind: str) -> Exported:
        if kind not in done:
            root = tmp_path_factory.mktemp(kind)
            convert_fairseq_checkpoint(FIXTURES / CONVERTED[kind] / "model.pt", root / "model", tokenizer=False)
            model = load_model(str(root / "model"))
            export_onnx(model, root / "onnx")
            seq2seq = model.config.is_encoder_decoder
            generator = torch.Generator().manual_seed(1)
            ids = torch.randint(4, model.config.vocab_size, (3, 7 if seq2seq else 5), generator=generator)
            mask = torch.ones_like(ids)
            padding = (0, slice(5, None)) if seq2seq else (0, slice(None, 2))
            ids[padding], mask[padding] = PAD, 0
            done[kind] = Exported(model, root / "onnx", OnnxGenerator(root / "onnx", threads=1), ids, mask)
        return done[kind]

    return export


@pytest.mark.parametrize("kind", CONVERTED)
def test_converted_fairseq_models_export_token_equal(exported, kind):
    """The export keeps fairseq's generation settings and ``--check`` (greedy, then the model's beam-5
    defaults with them) finds generate's tokens."""
    entry = exported(kind)
    generation = entry.runner.manifest["generation"]
    assert generation["forced_eos_token_id"] == 2 and generation["suppress_tokens"] == [PAD]
    assert generation["min_length"] == 2 and generation["num_beams"] == 5
    assert check_tokens(entry.model, str(entry.folder)) == ["greedy", "beam-5 (the model's generation defaults)"]


def test_check_names_the_strategy_and_row_of_a_folder_that_drops_settings(exported, tmp_path):
    """The fault of issue 58: an export whose manifest drops forced_eos_token_id, suppress_tokens and
    min_length (generate's defaults in their place) decodes other tokens; ``--check`` refuses it, naming where."""
    entry = exported("seq2seq")
    folder = shutil.copytree(entry.folder, tmp_path / "dropped")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["generation"].update(forced_eos_token_id=None, suppress_tokens=None, min_length=0)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=r"greedy: row \d of the check differs: generate gives \[2, "):
        check_tokens(entry.model, str(folder))


@pytest.mark.parametrize("kind", CONVERTED)
def test_the_manifest_holds_the_settings_generate_resolves(exported, kind, monkeypatch):
    """The export writes every setting as generate resolves it for the model (the model's value, else
    transformers' default), compared with generate's own merge of the two; a model without max_length gets
    generate's default length (20 new tokens), bounded by its config's max_position_embeddings."""
    entry = exported(kind)
    resolved, _ = entry.model._prepare_generation_config(None)
    generation = entry.runner.manifest["generation"]
    assert {name: generation[name] for name in APPLIED} == {name: getattr(resolved, name) for name in APPLIED}
    assert {name: generation.get(name) for name in NOT_APPLIED} == {
        name: getattr(resolved, name) for name in NOT_APPLIED
    }
    monkeypatch.setattr(entry.model.generation_config, "max_length", None)
    monkeypatch.setattr(entry.model.config, "max_position_embeddings", 12, raising=False)
    fields = _generation_fields(entry.model)
    assert fields["generation"]["max_length"] is None
    default_length = entry.model._prepare_generation_config(None)[0].max_length
    assert fields[DEFAULT_LENGTH] == {"new_tokens": default_length, "max_position_embeddings": 12}


@pytest.mark.filterwarnings("ignore:Using the model-agnostic default `max_length`")
@pytest.mark.parametrize("bound", [None, 7], ids=["free", "max_position_embeddings"])
@pytest.mark.parametrize("kind", CONVERTED)
def test_the_default_length_is_generates(exported, kind, bound, monkeypatch):
    """With no length anywhere, generate makes 20 new tokens after the prompt (an encoder-decoder's
    decoder start token counted as the prompt), at most the config's max_position_embeddings in all
    (here ``bound`` new tokens past the prompt); the runner too, from the manifest's default length as
    the export resolves it.  The model's defaults (beam 5, its processors) apply to both."""
    entry = exported(kind)
    monkeypatch.setattr(entry.model.generation_config, "max_length", None)
    if bound is not None:
        monkeypatch.setattr(entry.model.config, "max_position_embeddings", entry.prompt_length + bound, raising=False)
    monkeypatch.setitem(entry.runner.defaults, "max_length", None)
    monkeypatch.setitem(entry.runner.manifest, DEFAULT_LENGTH, _generation_fields(entry.model)[DEFAULT_LENGTH])
    new_tokens = bound or 20
    expected, tokens = entry.generate(min_new_tokens=new_tokens), entry.run(min_new_tokens=new_tokens)
    assert tokens.shape == (3, entry.prompt_length + new_tokens)
    np.testing.assert_array_equal(tokens, expected)


def _baseline(entry: Exported) -> list[list[int]]:
    """Each row's new tokens, greedy, with the model's generation configuration."""
    return entry.run(num_beams=1, max_new_tokens=NEW_TOKENS)[:, entry.prompt_length :].tolist()


def _unused_first_token(base: list[list[int]]) -> int:
    """The smallest ordinary token (> 3) that starts no row of ``base``."""
    return next(token for token in range(4, 100) if token not in {row[0] for row in base})


# Settings -> functions of the greedy baseline's new tokens (so that forbidding a token bites).
PROCESSOR_SETTINGS = {
    "repetition_penalty": lambda base: dict(repetition_penalty=1.8),
    "repetition_penalty_below_1": lambda base: dict(repetition_penalty=0.6),
    "no_repeat_ngram_size_1": lambda base: dict(no_repeat_ngram_size=1),
    "no_repeat_ngram_size_2": lambda base: dict(no_repeat_ngram_size=2),
    "bad_words_ids": lambda base: dict(bad_words_ids=[[base[0][0]], [base[1][0], base[1][1]], [2]]),
    "forced_bos_token_id": lambda base: dict(forced_bos_token_id=_unused_first_token(base)),
    "forced_eos_token_id": lambda base: dict(forced_eos_token_id=[2, base[2][0]]),
    "suppress_tokens": lambda base: dict(suppress_tokens=[base[0][0], base[1][0], base[2][0]]),
    "begin_suppress_tokens": lambda base: dict(begin_suppress_tokens=[base[0][0], base[2][0]]),
    "min_new_tokens": lambda base: dict(min_new_tokens=NEW_TOKENS - 1),
    "min_length": lambda base: dict(min_length=8),
    "max_length": lambda base: dict(max_length=7, max_new_tokens=None),
    "all_together": lambda base: dict(
        repetition_penalty=1.3,
        no_repeat_ngram_size=2,
        bad_words_ids=[[base[1][0], base[1][1]]],
        forced_bos_token_id=4,
        suppress_tokens=[base[0][1]],
        begin_suppress_tokens=[base[2][0]],
        min_new_tokens=3,
    ),
}


@pytest.mark.parametrize("beams", [1, 3], ids=["greedy", "beam3"])
@pytest.mark.parametrize("name", PROCESSOR_SETTINGS)
@pytest.mark.parametrize("kind", CONVERTED)
def test_each_processor_gives_generates_tokens(exported, kind, name, beams):
    entry = exported(kind)
    settings = dict(num_beams=beams, max_new_tokens=NEW_TOKENS) | PROCESSOR_SETTINGS[name](_baseline(entry))
    settings = {key: value for key, value in settings.items() if value is not None}
    np.testing.assert_array_equal(entry.run(**settings), entry.generate(**settings))


def test_the_repetition_penalty_skips_an_lm_prompts_left_padding(exported):
    """The padding columns of a left-padded prompt hold the token that row 0 starts with under a strong
    repetition penalty: generate does not penalise them (its mask), and neither does the runner."""
    if not PENALTY_SKIPS_PADDING:
        pytest.skip(
            f"transformers {transformers.__version__}'s repetition penalty counts padding; the runner follows 5.24+"
        )
    entry = exported("lm")
    settings = dict(num_beams=1, max_new_tokens=NEW_TOKENS, repetition_penalty=5.0)
    first = int(entry.run(**settings)[0, entry.prompt_length])
    ids = entry.ids.clone()
    ids[0, :2] = first  # row 0's two padding columns (mask 0)
    with torch.no_grad():
        expected = entry.model.generate(input_ids=ids, attention_mask=entry.mask, **settings).numpy()
    tokens = entry.runner.generate(ids.numpy(), entry.mask.numpy(), **settings)
    np.testing.assert_array_equal(tokens, expected)
    assert tokens[0, entry.prompt_length] == first


@pytest.mark.parametrize("name", ["bad_words_ids", "forced_bos_token_id", "suppress_tokens", "begin_suppress_tokens"])
def test_the_processors_change_the_greedy_tokens(exported, name):
    """The settings above bite: without them the tokens are others."""
    entry = exported("seq2seq")
    base = _baseline(entry)
    settings = PROCESSOR_SETTINGS[name](base)
    assert entry.run(num_beams=1, max_new_tokens=NEW_TOKENS, **settings)[:, entry.prompt_length :].tolist() != base


def _sample(entry: Exported, **settings) -> np.ndarray:
    return entry.run(do_sample=True, max_new_tokens=NEW_TOKENS, **{"num_beams": 1, **settings})


@pytest.mark.parametrize("kind", CONVERTED)
def test_sampling_is_seeded(exported, kind):
    entry = exported(kind)
    for beams in (1, 3):
        first = _sample(entry, seed=7, num_beams=beams)
        np.testing.assert_array_equal(_sample(entry, seed=7, num_beams=beams), first)
        np.testing.assert_array_equal(_sample(entry, seed=np.random.default_rng(7), num_beams=beams), first)
        assert not np.array_equal(_sample(entry, seed=8, num_beams=beams), first)


@pytest.mark.parametrize("warper", [dict(top_k=1), dict(top_p=1e-6)], ids=["top_k=1", "top_p=1e-6"])
@pytest.mark.parametrize("kind", CONVERTED)
def test_sampling_from_one_token_is_greedy(exported, kind, warper):
    entry = exported(kind)
    greedy = entry.run(num_beams=1, max_new_tokens=NEW_TOKENS, repetition_penalty=1.5)
    np.testing.assert_array_equal(_sample(entry, seed=0, repetition_penalty=1.5, temperature=3.0, **warper), greedy)


def test_beam_sampling_at_a_tiny_temperature_is_beam_search(exported):
    """Scaled by 1 / temperature, the beams' scores are far apart next to the draws' noise, so beam
    sampling keeps beam search's candidates (in the same order, their scores ranked as before)."""
    entry = exported("seq2seq")
    expected = entry.generate(num_beams=3, max_new_tokens=NEW_TOKENS)
    np.testing.assert_array_equal(_sample(entry, num_beams=3, temperature=1e-5, seed=0), expected)


@pytest.mark.parametrize("beams", [1, 3])
def test_forbidden_tokens_are_never_drawn(exported, beams):
    """Suppressed tokens, bad words and, before min_new_tokens, the end token never appear in 64 rows
    drawn at a high temperature (which makes every other token likely), sampled or beam-sampled."""
    entry = exported("lm")
    rows = np.repeat(entry.ids.numpy(), 22, axis=0)[:64]
    mask = np.repeat(entry.mask.numpy(), 22, axis=0)[:64]
    settings = dict(suppress_tokens=[PAD, 4, 5], bad_words_ids=[[6]], min_new_tokens=NEW_TOKENS)
    tokens = entry.runner.generate(
        rows, mask, do_sample=True, temperature=5.0, num_beams=beams, max_new_tokens=NEW_TOKENS, seed=3, **settings
    )
    new = tokens[:, entry.prompt_length :]
    assert new.shape == (64, NEW_TOKENS)
    assert not np.isin(new, [PAD, 4, 5, 6]).any() and not (new[:, :-1] == 2).any()
    assert (new[:, -1] == 2).all()  # forced_eos_token_id (the model's): the last token ends every row
    assert len(np.unique(new)) > entry.vocab // 2  # the draws spread over the vocabulary


def test_the_first_token_follows_generates_distribution(exported):
    """4,000 draws of the first new token: their frequencies are generate's probabilities after its
    processors and warpers (temperature, top-k, top-p, repetition penalty, the minimum length), within
    sampling noise, and tokens generate gives no probability are never drawn."""
    entry = exported("seq2seq")
    settings = dict(do_sample=True, num_beams=1, max_new_tokens=2, temperature=1.5, top_k=12, top_p=0.9)
    settings["repetition_penalty"] = 1.4
    with torch.no_grad():
        scores = entry.model.generate(
            input_ids=entry.ids[:1],
            attention_mask=entry.mask[:1],
            output_scores=True,
            return_dict_in_generate=True,
            **settings,
        ).scores[0]
    expected = torch.softmax(scores[0], dim=-1).numpy()
    ids, mask = np.repeat(entry.ids[:1].numpy(), 4000, axis=0), np.repeat(entry.mask[:1].numpy(), 4000, axis=0)
    drawn = entry.runner.generate(ids, mask, seed=0, **settings)[:, entry.prompt_length]
    frequencies = np.bincount(drawn, minlength=entry.vocab) / len(drawn)
    assert (expected > 0).sum() > 3  # a spread distribution, not one token
    assert 0.5 * np.abs(frequencies - expected).sum() < 0.04
    assert not frequencies[expected == 0].any()


# A value of each setting the runner does not apply at which generate applies it.
ACTIVE = {
    "guidance_scale": 2.0,
    "sequence_bias": [[[5], 1.0]],
    "encoder_repetition_penalty": 1.2,
    "encoder_no_repeat_ngram_size": 2,
    "exponential_decay_length_penalty": [5, 1.1],
    "remove_invalid_values": True,
    "renormalize_logits": True,
    "min_p": 0.1,
    "typical_p": 0.9,
    "epsilon_cutoff": 0.01,
    "eta_cutoff": 0.01,
    "top_h": 0.5,
    "watermarking_config": {"greenlist_ratio": 0.25},
    "num_return_sequences": 2,
    "num_beam_groups": 2,
    "diversity_penalty": 0.5,
    "penalty_alpha": 0.6,
    "dola_layers": "high",
    "constraints": [[5]],
    "force_words_ids": [[5]],
    "prompt_lookup_num_tokens": 3,
    "assistant_early_exit": 1,
    "use_mtp": True,
    "max_time": 1.0,
    "stop_strings": ["x"],
    "token_healing": True,
    "low_memory": True,
}


def test_every_setting_the_runner_does_not_apply_is_listed_with_a_value_that_applies_it():
    assert list(ACTIVE) == list(NOT_APPLIED)


@pytest.mark.parametrize("name", NOT_APPLIED)
def test_a_setting_the_runner_does_not_apply_is_refused_by_name(exported, name):
    entry = exported("seq2seq")
    sampling = dict(do_sample=True) if name in SAMPLING_ONLY else {}
    with pytest.raises(ValueError, match=rf"{name}=.* \(passed to generate\): the runner does not apply {name}"):
        entry.run(**{name: ACTIVE[name]}, **sampling, num_beams=1)


def test_a_manifest_default_the_runner_does_not_apply_is_refused_unless_overridden(exported, monkeypatch):
    """The export writes such a setting (the folder still serves engines that apply it) and the runner
    refuses it at run time, naming it and the way to decode without it."""
    entry = exported("seq2seq")
    expected = entry.run(num_beams=1, max_new_tokens=NEW_TOKENS)
    monkeypatch.setitem(entry.runner.defaults, "guidance_scale", 3.0)
    message = r"guidance_scale=3.0 \(the manifest's generation default\).*pass guidance_scale=1.0"
    with pytest.raises(ValueError, match=message):
        entry.run(num_beams=1, max_new_tokens=NEW_TOKENS)
    np.testing.assert_array_equal(entry.run(num_beams=1, max_new_tokens=NEW_TOKENS, guidance_scale=1.0), expected)


def test_sampling_defaults_of_the_manifest_are_inert_without_sampling(exported, monkeypatch):
    """A generation configuration may set temperature and top_p for users who sample; greedy decoding
    (do_sample unset) leaves them unused, as generate does, without an error."""
    entry = exported("seq2seq")
    expected = entry.run(num_beams=1, max_new_tokens=NEW_TOKENS)
    for name, value in dict(temperature=0.6, top_p=0.9, top_k=5, typical_p=0.5).items():
        monkeypatch.setitem(entry.runner.defaults, name, value)
    np.testing.assert_array_equal(entry.run(num_beams=1, max_new_tokens=NEW_TOKENS), expected)


def test_an_unrecordable_generation_setting_is_refused_at_export(exported, tmp_path, monkeypatch):
    watermarking = pytest.importorskip("transformers").WatermarkingConfig()
    model = exported("seq2seq").model
    monkeypatch.setattr(model.generation_config, "watermarking_config", watermarking)
    with pytest.raises(ValueError, match="generation_config.watermarking_config is a WatermarkingConfig, which the"):
        export_onnx(model, tmp_path / "onnx")
    assert not (tmp_path / "onnx").exists()


BAD_SETTINGS = {
    "unknown": (dict(beam_width=3), ValueError, r"generate got \['beam_width'\]: the runner's generate takes"),
    "not-tokens": (dict(output_scores=True), ValueError, r"generate got \['output_scores'\]"),
    "repetition-zero": (dict(repetition_penalty=0), ValueError, "repetition_penalty must be a finite number > 0"),
    "repetition-text": (dict(repetition_penalty="2"), ValueError, "repetition_penalty must be a finite number > 0"),
    "ngram-negative": (dict(no_repeat_ngram_size=-1), ValueError, "no_repeat_ngram_size must be >= 0, got -1"),
    "ngram-float": (dict(no_repeat_ngram_size=1.5), TypeError, "no_repeat_ngram_size must be an int"),
    "bad-words-empty": (dict(bad_words_ids=[]), ValueError, "bad_words_ids must be a non-empty list of token id"),
    "bad-word-empty": (dict(bad_words_ids=[[]]), ValueError, r"bad_words_ids\[0\] must be a non-empty list"),
    "bad-word-outside": (dict(bad_words_ids=[[5], [5, 99]]), ValueError, r"bad_words_ids\[1\] must be .* in \[0, "),
    "forced-bos-outside": (dict(forced_bos_token_id=99), ValueError, r"forced_bos_token_id must be a token id in"),
    "forced-bos-list": (dict(forced_bos_token_id=[5]), ValueError, r"forced_bos_token_id must be a token id in"),
    "forced-eos-empty": (dict(forced_eos_token_id=[]), ValueError, "forced_eos_token_id must be a non-empty list"),
    "suppress-negative": (dict(suppress_tokens=[-1]), ValueError, r"suppress_tokens must be a list of token ids"),
    "suppress-int": (dict(suppress_tokens=5), ValueError, r"suppress_tokens must be a list of token ids"),
    "begin-suppress-text": (dict(begin_suppress_tokens="5"), ValueError, "begin_suppress_tokens must be a list"),
    "do-sample-text": (dict(do_sample="yes"), ValueError, "do_sample must be True or False, got 'yes'"),
    "temperature-negative": (dict(do_sample=True, temperature=-1), ValueError, "temperature must be a finite number"),
    "temperature-zero": (dict(do_sample=True, temperature=0), ValueError, "temperature must be > 0 when sampling"),
    "top-k-negative": (dict(do_sample=True, top_k=-1), ValueError, "top_k must be >= 0, got -1"),
    "top-p-above-1": (dict(do_sample=True, top_p=1.5), ValueError, r"top_p must be a number in \[0, 1\]"),
    "min-length-negative": (dict(min_length=-1), ValueError, "min_length must be >= 0"),
    "max-length-prompt": (dict(max_length=1), ValueError, "max_length 1 leaves no new token after the 1-token"),
    "seed-negative": (dict(do_sample=True, seed=-1), ValueError, "seed must be >= 0, got -1"),
    "seed-text": (dict(do_sample=True, seed="1"), TypeError, "seed must be an int"),
    "seed-greedy": (dict(num_beams=1, seed=1), ValueError, "seed applies only when sampling"),
    "temperature-greedy": (
        dict(temperature=0.5),
        ValueError,
        "temperature applies only when sampling: pass do_sample=True",
    ),
    "typical-p-greedy": (dict(num_beams=1, typical_p=0.9), ValueError, "typical_p applies only when sampling"),
    "penalty-greedy": (dict(num_beams=1, length_penalty=2.0), ValueError, "length_penalty applies only to beam search"),
}


@pytest.mark.parametrize("name", BAD_SETTINGS)
def test_a_bad_setting_is_refused_naming_it(exported, name):
    settings, error, message = BAD_SETTINGS[name]
    with pytest.raises(error, match=message):
        exported("seq2seq").run(**settings)


@pytest.mark.parametrize(
    "setting, message",
    [
        (dict(suppress_tokens=[999]), r"field generation.suppress_tokens must be a list of token ids in \[0, "),
        (dict(do_sample=1), "field generation.do_sample must be True or False"),
        (dict(watermarking_config="x"), None),  # a value the export could have written: refused at run time
    ],
)
def test_a_manifest_with_a_bad_setting_is_refused_naming_its_field(exported, tmp_path, setting, message):
    folder = shutil.copytree(exported("seq2seq").folder, tmp_path / "copy")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["generation"].update(setting)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    if message is None:
        with pytest.raises(ValueError, match="the runner does not apply watermarking_config"):
            OnnxGenerator(folder).generate(np.full((1, 3), 5))
    else:
        with pytest.raises(ValueError, match=message):
            OnnxGenerator(folder)


def test_a_bad_manifest_default_is_refused_at_load_and_a_request_checks_only_its_own(exported, tmp_path, monkeypatch):
    """A damaged generation default is refused when the folder is loaded, naming manifest.json and the
    field, not at the first generate; a request of a loaded folder checks only the settings it passes
    (the defaults were checked at load)."""
    entry = exported("seq2seq")
    folder = shutil.copytree(entry.folder, tmp_path / "copy")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["generation"]["top_p"] = 2.0
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=r"manifest.json field generation.top_p must be a number in \[0, 1\], got 2.0"):
        OnnxGenerator(folder)
    checked = []
    check_setting = runner_module.runner_settings.check_setting
    monkeypatch.setattr(
        runner_module.runner_settings,
        "check_setting",
        lambda name, *rest: checked.append(name) or check_setting(name, *rest),
    )
    expected = entry.run(num_beams=1, max_new_tokens=NEW_TOKENS)
    assert checked == ["num_beams", "max_new_tokens"]
    np.testing.assert_array_equal(expected, entry.generate(num_beams=1, max_new_tokens=NEW_TOKENS, do_sample=False))


def test_the_folders_runner_samples_and_processes_without_talk_hf_or_torch(exported):
    """The folder's own runner.py, with its files beside it, in a process where importing talk_hf,
    torch or transformers fails: seeded sampling and beam search with processors give the tokens of
    this process's runner."""
    entry = exported("lm")
    requests = [
        dict(do_sample=True, seed=5, top_k=5, num_beams=1, max_new_tokens=6),
        dict(num_beams=3, no_repeat_ngram_size=2, repetition_penalty=1.3, max_new_tokens=6),
    ]
    expected = [entry.run(**request).tolist() for request in requests]
    assert generate_without_torch(entry.folder, entry.ids.tolist(), entry.mask.tolist(), requests) == expected


@pytest.mark.parametrize("seed", range(4))
def test_top_k_is_a_stable_sorts_first_k(seed):
    """runner_logits.top_k (a partial sort) gives the first k of a stable descending sort, ties and
    -inf included."""
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 6, size=(5, 300)).astype(np.float32)
    values[rng.random(values.shape) < 0.3] = -np.inf
    for k in (1, 4, 10, 80, 300):
        np.testing.assert_array_equal(top_k(values, k), np.argsort(-values, axis=1, kind="stable")[:, :k])


@pytest.mark.parametrize("length_penalty", [1.0, 0.5, -1.0])
@pytest.mark.parametrize("seed", range(3))
def test_a_batch_row_where_no_candidate_ended_keeps_its_finished_beams(seed, length_penalty):
    """Beam search skips merging the finished beams at a step where no candidate ended; that is exact:
    the merge, run where only batch row 0 has an ended candidate, leaves each other row's finished beams
    (scores in order with -1e9 where none yet, sequences, lengths, done) as they were, with candidate
    scores from 0 down (-1e9 plus a score of |x| < 32 rounds to -1e9 itself), rows all done, rows that
    cannot improve."""
    rng = np.random.default_rng(seed)
    batch, beams, keep, start, column = 5, 3, 6, 1, 4
    running = rng.integers(3, 50, (batch * beams, 8))
    running[:, column:] = 0
    finished = _FinishedBeams(np.zeros((batch, beams, 8), np.int64), start, length_penalty, True)
    real = np.arange(beams) < np.array([[1], [0], [beams], [2], [beams]])  # row 2 and 4: all done
    scores = -np.sort(rng.exponential(3.0, (batch, beams)).astype(np.float32), axis=1)
    finished.scores = np.where(real, scores, np.float32(-1e9))
    finished.done, finished.lengths = real, np.where(real, rng.integers(1, column, (batch, beams)), 0)
    finished.sequences = np.where(real[:, :, None], rng.integers(3, 50, (batch, beams, 8)), 0)
    top_scores = -np.sort(rng.exponential(20.0, (batch, keep)).astype(np.float32), axis=1)
    top_scores[:, 0] = [0.0, -0.0, -1e-3, -31.0, -40.0]
    ended = np.zeros((batch, keep), bool)
    ended[0, 0] = True
    improvable = np.array([[True], [True], [True], [False], [True]])
    source_row = rng.integers(0, beams, (batch, keep)) + np.arange(batch)[:, None] * beams
    before = [array.copy() for array in (finished.scores, finished.sequences, finished.lengths, finished.done)]
    finished.merge(top_scores, ended, improvable, running, source_row, rng.integers(3, 50, (batch, keep)), column)
    after = (finished.scores, finished.sequences, finished.lengths, finished.done)
    for kept, now in zip(before, after, strict=True):
        np.testing.assert_array_equal(now[1:], kept[1:])
    assert finished.done[0].sum() == 2 and finished.lengths[0].max() == column + 1 - start


@pytest.mark.parametrize("missing", ["runner_settings.py", "runner_logits.py"])
def test_a_runner_without_its_files_names_the_missing_one(tmp_path, missing):
    """runner.py without one of its files (runner_settings.py, or runner_logits.py, which runner_decoding.py
    imports too): importing runner names the file it lacks, before importing any."""
    for name in runner_module.RUNNER_FILES:
        if name != missing:
            shutil.copyfile(Path(runner_module.__file__).with_name(name), tmp_path / name)
    script = f"import sys\nsys.path.insert(0, {str(tmp_path)!r})\nimport runner\n"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert f"ImportError: {tmp_path} lacks ['{missing}']: runner.py runs with the files" in result.stderr
