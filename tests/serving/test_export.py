"""`talk_hf.export`: the exported encoder and decoding step, run by ONNX Runtime through the numpy
runner, decode the tokens of ``model.generate`` (greedy and beam, float32) for TaLK, DynamicConv and
LightConv encoder-decoders and LMs, SliceNet and the toy family of the tests (registered as a new
family is, with no export code of its own); the states keep their shapes; the export holds no
statement of a block's math; the runner needs neither talk_hf nor torch; bad models, folders and
requests say what is wrong.

Each model is exported once per test session (`exported.SharedExports`), with an end token chosen so
that row 0 ends early when the length is free.  The sources are of different lengths: row 0
right-padded, row 1 left-padded.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from talk_hf.export import OnnxGenerator, export_onnx, quantize_exported
from talk_hf.export.__main__ import load_tokenizer, main

from ..models import helpers
from ..models.helpers import VOCAB
from .exported import EXPORTED, NEW_TOKENS, fingerprint
from .torch_free import generate_without_torch

pytest.importorskip("onnx")
pytest.importorskip("onnxscript")
pytest.importorskip("onnxruntime")


@dataclass
class Exported:
    model: torch.nn.Module
    folder: Path
    generator: OnnxGenerator
    ids: torch.Tensor  # (3, S) sources (row 0 right-padded, row 1 left-padded) or prompts (row 0 left-padded)
    mask: torch.Tensor
    eos: int

    @property
    def prompt_length(self) -> int:
        """Columns of generate's output before the new tokens: the decoder start token, or the prompt."""
        return 1 if self.model.config.is_encoder_decoder else self.ids.shape[1]

    def both(self, **settings) -> tuple[np.ndarray, np.ndarray]:
        """(generate's tokens, the runner's) for ``settings``."""
        expected = self.model.generate(input_ids=self.ids, attention_mask=self.mask, do_sample=False, **settings)
        return expected.numpy(), self.generator.generate(self.ids.numpy(), self.mask.numpy(), **settings)


@pytest.fixture(scope="module")
def exported(shared_exports):
    """``exported(name)``: the session's export of ``name`` with a new copy of its model and a runner
    (once per module)."""
    done = {}

    def export(name: str) -> Exported:
        if name not in done:
            shared = shared_exports(name)
            generator = OnnxGenerator(shared.folder, threads=1)
            done[name] = Exported(shared.model(), shared.folder, generator, shared.ids, shared.mask, shared.eos)
        return done[name]

    return export


@pytest.mark.parametrize("name", EXPORTED)
@pytest.mark.parametrize("free_length", [False, True], ids=["fixed_length", "free_length"])
def test_greedy_equals_generate(exported, name, free_length):
    entry = exported(name)
    settings = dict(max_new_tokens=NEW_TOKENS + 2, min_new_tokens=0 if free_length else NEW_TOKENS + 2)
    expected, tokens = entry.both(**settings)
    np.testing.assert_array_equal(tokens, expected)
    assert (entry.eos in tokens[0, entry.prompt_length :]) == free_length


BEAM_SETTINGS = [
    dict(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, num_beams=3),
    dict(max_new_tokens=NEW_TOKENS, num_beams=3),
]
TALK_BEAM_SETTINGS = [
    dict(max_new_tokens=NEW_TOKENS, num_beams=4, early_stopping=True),
    dict(max_new_tokens=NEW_TOKENS, num_beams=4, early_stopping="never", length_penalty=0.5),
    dict(max_new_tokens=NEW_TOKENS, num_beams=2, length_penalty=2.0),
]


@pytest.mark.parametrize(
    "name, settings",
    [(name, settings) for name in EXPORTED for settings in BEAM_SETTINGS]
    + [(name, settings) for name in ("talk-seq2seq", "talk-lm") for settings in TALK_BEAM_SETTINGS],
)
def test_beam_search_equals_generate(exported, name, settings):
    expected, tokens = exported(name).both(**settings)
    np.testing.assert_array_equal(tokens, expected)


def test_beam_search_past_the_runners_first_buffers_equals_generate(exported):
    """70 new tokens: the runner's beam-search buffers (64 new tokens wide at first) double mid-search."""
    expected, tokens = exported("talk-seq2seq").both(max_new_tokens=70, min_new_tokens=70, num_beams=3)
    assert tokens.shape[1] == 71
    np.testing.assert_array_equal(tokens, expected)


@pytest.mark.parametrize("name", EXPORTED)
def test_step_logits_equal_the_forward_pass(exported, name):
    """Teacher forcing through the step graph gives the logits of the model's full forward pass (targets
    longer than every state's history, so that the oldest rows leave each window)."""
    entry = exported(name)
    runner, ids, mask = entry.generator, entry.ids.numpy(), entry.mask.numpy()
    states = runner.new_states(len(ids))
    if entry.model.config.is_encoder_decoder:
        length = max(state["history_size"] for state in runner.manifest["states"]) + 4
        targets = torch.randint(3, VOCAB, (len(ids), length), generator=torch.Generator().manual_seed(4))
        with torch.no_grad():
            expected = entry.model(input_ids=entry.ids, attention_mask=entry.mask, decoder_input_ids=targets).logits
        source, feed = runner.encode(ids, mask), targets.numpy()
        positions = np.arange(length)[None].repeat(len(ids), 0)
        real = np.ones_like(feed)
    else:
        with torch.no_grad():
            expected = entry.model(input_ids=entry.ids, attention_mask=entry.mask).logits
        source, feed, positions, real = [], ids, np.maximum(mask.cumsum(1) - 1, 0), mask
    for t in range(feed.shape[1]):
        column = slice(t, t + 1)
        logits, states = runner.step(feed[:, column], positions[:, column], real[:, column], states, source)
        np.testing.assert_allclose(logits, expected[:, t].numpy(), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("length", [1, 300])
def test_the_encoder_graph_takes_any_source_length(exported, length):
    """Traced at one source length, the encoder graph holds for others: 1 token, and 300 (TaLK's PyTorch
    path then sums over several blocks, where eager runs one of 256 or more rows)."""
    entry = exported("talk-seq2seq")
    ids = torch.randint(3, VOCAB, (2, length), generator=torch.Generator().manual_seed(5))
    mask = torch.ones_like(ids)
    mask[1, : length // 2] = 0
    feed = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
    hidden = entry.generator.sessions["encoder"].run(None, feed)[0]
    with torch.no_grad():
        expected = entry.model.get_encoder()(ids, attention_mask=mask).last_hidden_state
    np.testing.assert_allclose(hidden, expected.numpy(), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", ["talk-seq2seq", "dynamic-lm", "slicenet"])
def test_states_keep_their_shapes(exported, name):
    """Every state input is (batch, history_size, channels) with fixed sizes but the batch, and each step
    returns it moved on by one row, in the same shape."""
    entry = exported(name)
    runner = entry.generator
    declared = {x.name: x.shape for x in runner.sessions["decoder_step"].get_inputs()}
    for state in runner.manifest["states"]:
        assert declared[state["name"]][1:] == [state["history_size"], state["channels"]]
        assert isinstance(declared[state["name"]][0], str)  # the batch is dynamic
    ids = entry.ids.numpy()
    source = runner.encode(ids, entry.mask.numpy()) if runner.manifest["is_encoder_decoder"] else []
    states = runner.new_states(len(ids))
    token, position = np.full((len(ids), 1), 5, np.int64), np.zeros((len(ids), 1), np.int64)
    for step in range(12):
        _, new_states = runner.step(token, position + step, np.ones_like(token), states, source)
        for old, new in zip(states, new_states, strict=True):
            assert new.shape == old.shape and new.dtype == np.float32
            np.testing.assert_array_equal(new[:, :-1], old[:, 1:])
        states = new_states


def test_runner_needs_neither_talk_hf_nor_torch(exported):
    """The folder's own runner.py decodes (greedy and beam search) in a process where importing talk_hf,
    torch or transformers fails."""
    entry = exported("talk-seq2seq")
    requests = [dict(max_new_tokens=NEW_TOKENS, num_beams=beams) for beams in (1, 3)]
    expected = [entry.both(**request)[0].tolist() for request in requests]
    assert generate_without_torch(entry.folder, entry.ids.tolist(), entry.mask.tolist(), requests) == expected


class _HostReadingCore(torch.nn.Module):
    """A core whose forward reads a value of its input on the host (no graph can hold that branch)."""

    def __init__(self, core):
        super().__init__()
        self.core = core
        self.history_size = core.history_size

    def forward(self, u, context=None):
        if u.abs().sum().item() > 1e30:
            return u
        return self.core(u, context)


def test_export_refuses_what_it_cannot_express(tmp_path):
    headless = EXPORTED["slicenet"].model().model
    with pytest.raises(ValueError, match=r"supports the heads .* not SliceNetModel"):
        export_onnx(headless, tmp_path)
    model = EXPORTED["dynamic-lm"].model()
    with pytest.raises(ValueError, match="exporter must be one of"):
        export_onnx(model, tmp_path, exporter="torchscript")
    with pytest.raises(ValueError, match=r"eval mode: call DynamicConvForCausalLM.eval\(\)"):
        export_onnx(model.train(), tmp_path)
    with pytest.raises(ValueError, match="export a float32 model"):
        export_onnx(model.eval().to(torch.bfloat16), tmp_path)
    model = EXPORTED["dynamic-lm"].model()
    mixer = model.model.decoder.layers[1].mixer
    mixer.core = _HostReadingCore(mixer.core)
    with pytest.raises(ValueError, match="DynamicConvForCausalLM's decoding step does not trace into one graph"):
        export_onnx(model, tmp_path)
    assert not list(tmp_path.iterdir())


def test_export_restates_no_block():
    """talk_hf.export calls the model's modules: none of its modules imports the layers, the cores'
    ops or the models' internals (each block's math lives there), and none defines a module class
    other than the graph wrappers, whose forward calls the model's own."""
    import talk_hf.export as package

    sources = {path.name: path.read_text() for path in Path(package.__file__).parent.glob("*.py")}
    internals = ("..layers", "talk_hf.layers", "..ops", "talk_hf.ops", "..models.conv_modeling", "..models.slicenet")
    for name, text in sources.items():
        for internal in (*internals, "torch.nn.functional"):
            assert f"from {internal}" not in text and f"import {internal}" not in text, (name, internal)
    wrappers = {
        "class DecodingStepGraph(nn.Module):",
        "class EncoderGraph(nn.Module):",
        "class PromptGraph(DecodingStepGraph):",
    }
    classes = [line for text in sources.values() for line in text.splitlines() if line.startswith("class ")]
    assert sorted(line for line in classes if "Module" in line or "Graph)" in line) == sorted(wrappers)
    traced = sources["traced_forward.py"]
    assert traced.count("self.model(") == 3 and "get_encoder()(" in traced


def _broken_copy(exported, tmp_path, edit) -> Path:
    folder = shutil.copytree(exported("dynamic-lm").folder, tmp_path / "copy")
    manifest = json.loads((folder / "manifest.json").read_text())
    edit(folder, manifest)
    if (folder / "manifest.json").exists() and manifest is not None:
        (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


@pytest.mark.parametrize(
    "edit, error, message",
    [
        (lambda folder, m: (folder / "manifest.json").unlink(), FileNotFoundError, r"manifest.json does not exist"),
        (
            lambda folder, m: (folder / "decoder_step.onnx").unlink(),
            FileNotFoundError,
            "decoder_step.onnx, named by .*manifest.json field files.decoder_step, does not exist",
        ),
        (lambda folder, m: m.update(format="other"), ValueError, "is not a talk_hf-onnx manifest of version 4"),
        (  # an export of an earlier talk_hf, whose step takes the source once per step row
            lambda folder, m: m.update(format_version=3),
            ValueError,
            r"of version 4 \(format, version: \('talk_hf-onnx', 3\)\): export the model again \(python -m talk_hf.export",
        ),
        (lambda folder, m: m.pop("states"), ValueError, r"lacks the fields \['states'\]"),
        (
            lambda folder, m: m["graphs"]["decoder_step"]["outputs"].pop(),
            ValueError,
            "decoder_step.onnx has the outputs",
        ),
    ],
    ids=["no-manifest", "no-graph", "wrong-format", "earlier-format", "missing-field", "wrong-names"],
)
def test_runner_refuses_a_bad_folder(exported, tmp_path, edit, error, message):
    with pytest.raises(error, match=message):
        OnnxGenerator(_broken_copy(exported, tmp_path, edit))


@pytest.mark.parametrize("spin", [False, True])
def test_runner_threads_spin_only_when_asked(exported, spin):
    """Idle ORT worker threads spin (busy a core) only with spin=True; tokens are the same."""
    float32 = exported("dynamic-lm")
    generator = OnnxGenerator(float32.folder, threads=2, spin=spin)
    for session in generator.sessions.values():
        entry = session.get_session_options().get_session_config_entry("session.intra_op.allow_spinning")
        assert entry == ("1" if spin else "0")
    ids, mask = float32.ids.numpy(), float32.mask.numpy()
    np.testing.assert_array_equal(generator.generate(ids, mask), float32.generator.generate(ids, mask))


def test_runner_refuses_bad_json_and_bad_requests(exported, tmp_path):
    folder = _broken_copy(exported, tmp_path, lambda folder, m: None)
    (folder / "manifest.json").write_text("{not json")
    with pytest.raises(ValueError, match="manifest.json is not valid JSON"):
        OnnxGenerator(folder)
    runner = exported("dynamic-lm").generator
    with pytest.raises(ValueError, match=r"input_ids must be \(batch, length\)"):
        runner.generate(np.arange(3, 8))
    with pytest.raises(ValueError, match=r"attention_mask has shape \(2, 4\) but input_ids \(2, 5\)"):
        runner.generate(np.full((2, 5), 4), np.ones((2, 4)))
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1, got 0"):
        runner.generate(np.full((2, 5), 4), max_new_tokens=0)
    with pytest.raises(ValueError, match="optimization must be one of"):
        OnnxGenerator(exported("dynamic-lm").folder, optimization="max")


# The export: a user's files are never replaced without asking.

USER_FILES = {"runner.py": "print('my own runner')\n", "manifest.json": '{"mine": true}\n', "encoder.onnx": "weights"}


def _user_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "out"
    folder.mkdir()
    for name, text in {**USER_FILES, "notes.txt": "keep me"}.items():
        (folder / name).write_text(text)
    return folder


def test_export_refuses_to_replace_a_users_files(tmp_path):
    folder = _user_folder(tmp_path)
    before = fingerprint(folder)
    with pytest.raises(
        FileExistsError, match=r"holds \['encoder.onnx', 'manifest.json', 'runner.py'\].*overwrite=True"
    ):
        export_onnx(EXPORTED["dynamic-seq2seq"].model(), folder)
    assert fingerprint(folder) == before


def test_overwrite_help_names_the_files_it_replaces(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--overwrite replace the files encoder.onnx, decoder_step.onnx, beam_candidates.onnx, runner.py" in help_text


# (model, the model folder's tokenizer: copied by the export, or left out with --no-tokenizer); the
# encoder-decoder of the cheapest export, and the toy family (registered from outside the package).  A
# model folder without a tokenizer exports as --no-tokenizer does (main's tokenizer is None either way):
# test_command_line_names_a_tokenizer_that_does_not_load checks that such a folder's tokenizer is None.
COMMAND_LINE_CASES = [("light_conv-seq2seq", "copied"), ("toy-seq2seq", "--no-tokenizer")]


@pytest.mark.parametrize("name,tokenizer", COMMAND_LINE_CASES)
def test_command_line_exports_and_checks(tmp_path, capsys, name, tokenizer):
    """Into a folder holding a user's files: refused (before the model loads), the folder unchanged,
    unless --overwrite, which replaces the files of the export's names and keeps the others."""
    model = EXPORTED[name].model()
    model.save_pretrained(tmp_path / "model")
    helpers.word_tokenizer().save_pretrained(tmp_path / "model")
    folder = _user_folder(tmp_path)
    before = fingerprint(folder)
    command = [str(tmp_path / "model"), str(folder), "--check", "--int8"]
    command += ["--no-tokenizer"] if tokenizer == "--no-tokenizer" else []
    capsys.readouterr()
    assert main(command) == 1
    error = capsys.readouterr().err
    assert error.startswith("error:") and "['encoder.onnx', 'manifest.json', 'runner.py']" in error
    assert "--overwrite" in error and fingerprint(folder) == before
    # One export: the float32 graphs are checked against generate, then quantized in place.
    assert main([*command, "--overwrite"]) == 0
    assert (folder / "notes.txt").read_text() == "keep me"
    assert all((folder / file).read_bytes() != text.encode() for file, text in USER_FILES.items())
    printed = capsys.readouterr().out
    assert "check: greedy tokens of 4 random inputs equal model.generate's" in printed
    assert printed.index("check:") < printed.index("int8: decoder_step.onnx, encoder.onnx")
    manifest = OnnxGenerator(folder).manifest
    assert manifest["head"] == type(model).__name__ and manifest["int8"]["weight_type"] == "QInt8"
    assert (", with its tokenizer (" in printed) is (tokenizer == "copied")
    assert ("tokenizer.json" in manifest["written"]) is (tokenizer == "copied")
    assert (folder / "tokenizer.json").is_file() is (tokenizer == "copied")


def test_command_line_names_a_tokenizer_that_does_not_load(tmp_path, capsys):
    EXPORTED["dynamic-lm"].model().save_pretrained(tmp_path / "model")
    assert load_tokenizer(str(tmp_path / "model")) is None  # a folder without a tokenizer exports none
    (tmp_path / "model" / "tokenizer_config.json").write_text('{"tokenizer_class": "NoSuchTokenizer"}')
    assert main([str(tmp_path / "model"), str(tmp_path / "onnx")]) == 1
    error = capsys.readouterr().err
    assert "holds a tokenizer_config.json whose tokenizer does not load" in error and "--no-tokenizer" in error
    assert not (tmp_path / "onnx").exists()


def _first_step_logits(generator: OnnxGenerator, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """(B, V) logits of the first step: an encoder-decoder's start token over the source ``ids``, an
    LM's first token (each row's first column)."""
    manifest = generator.manifest
    if manifest["is_encoder_decoder"]:
        first = np.full((len(ids), 1), manifest["special_tokens"]["decoder_start_token_id"], np.int64)
        source = generator.encode(ids, mask)
    else:
        first, source = ids[:, :1].astype(np.int64), []
    return generator.step(first, np.zeros_like(first), np.ones_like(first), generator.new_states(len(ids)), source)[0]


@pytest.mark.parametrize("name", ["dynamic-lm", "slicenet"])
def test_int8_quantizes_every_graph_once_and_stays_close(exported, tmp_path, name):
    """quantize_exported puts the products with weights in int8 (ONNX Runtime's integer MatMul; only
    products of two activations, such as SliceNet's attention, stay float32), leaves the beam
    candidates graph (no weights) as it is, records it, keeps the logits close to float32's (relative to
    their spread), and refuses a second quantization."""
    onnx = pytest.importorskip("onnx")
    float32 = exported(name)
    folder = shutil.copytree(float32.folder, tmp_path / "int8")
    files = sorted(name for role, name in float32.generator.manifest["files"].items() if role != "beam_candidates")
    assert sorted(quantize_exported(folder)) == files
    candidates = "beam_candidates.onnx"
    assert (folder / candidates).read_bytes() == (float32.folder / candidates).read_bytes()
    for file in files:
        graph = onnx.load(folder / file).graph
        assert {"DynamicQuantizeLinear", "MatMulInteger"} <= {node.op_type for node in graph.node}
        weights = {initializer.name for initializer in graph.initializer}
        float_products = [node for node in graph.node if node.op_type in ("MatMul", "Gemm")]
        assert not [node.name for node in float_products if weights & set(node.input)], file
    ids, mask = float32.ids.numpy(), float32.mask.numpy()
    expected = _first_step_logits(float32.generator, ids, mask)
    logits = _first_step_logits(OnnxGenerator(folder, threads=1), ids, mask)
    assert np.sqrt(np.mean((logits - expected) ** 2)) < 0.1 * expected.std()
    with pytest.raises(ValueError, match="is already int8"):
        quantize_exported(folder)


def test_command_line_imports_the_module_that_registers_a_family(tmp_path, capsys, monkeypatch):
    """A model type no module of this process registers is named, with --import as the remedy (without it,
    transformers' "update Transformers" text); --import imports each module before the model loads, and
    one that does not import is named."""
    saved = EXPORTED["toy-lm"].model().config.to_dict()
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps({**saved, "model_type": "toy_conv_lm_unregistered"}))
    assert main([str(tmp_path / "model"), str(tmp_path / "onnx")]) == 1
    error = capsys.readouterr().err
    assert "its model type 'toy_conv_lm_unregistered' is not registered in this process" in error
    assert "pass --import MODULE" in error
    (tmp_path / "registers_a_family.py").write_text("IMPORTED = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "registers_a_family", raising=False)
    assert main(["--import", "registers_a_family", str(tmp_path / "missing"), str(tmp_path / "onnx")]) == 1
    assert sys.modules["registers_a_family"].IMPORTED  # imported before the model folder was read
    assert "missing is not a save_pretrained folder" in capsys.readouterr().err
    assert main(["--import", "no_such_module_of_a_family", str(tmp_path / "model"), str(tmp_path / "onnx")]) == 1
    assert "error: --import no_such_module_of_a_family: No module named 'no_such_module_of_a_family'" in (
        capsys.readouterr().err
    )


def test_command_line_names_a_bad_model(tmp_path, capsys):
    assert main([str(tmp_path / "missing"), str(tmp_path / "onnx")]) == 1
    error = capsys.readouterr().err
    assert error.startswith("error:") and "missing is not a save_pretrained folder: it has no config.json" in error
