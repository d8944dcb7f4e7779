"""`talk_hf.export`: the exported encoder and decoding step, run by ONNX Runtime through the numpy
runner, decode the tokens of ``model.generate`` (greedy and beam, float32) for TaLK, DynamicConv and
LightConv encoder-decoders and LMs and SliceNet; the states keep their shapes; TaLK's one-token window
formula is the op's; the runner needs neither talk_hf nor torch; bad models, folders and requests say
what is wrong.

Each model is exported once per module (TaLK and SliceNet with the default dynamo exporter, the others
with the faster TorchScript one), with an end token chosen so that row 0 ends early when the length is
free.  The sources are of different lengths: row 0 right-padded, row 1 left-padded.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
import torch

from talk_hf.export import OnnxGenerator, export_onnx, quantize_exported
from talk_hf.export.__main__ import main
from talk_hf.export.mixer_math import sequence_core, step_sum, talk_full_kernel
from talk_hf.layers.dynamic_conv_mixer import DynamicConvCore, LightConvCore
from talk_hf.layers.talk_mixer import TaLKCore
from talk_hf.ops import talk_conv

from ..models import helpers, toy_family
from ..models.helpers import CASES, PAD, VOCAB, Case

pytest.importorskip("onnx")
pytest.importorskip("onnxscript")
pytest.importorskip("onnxruntime")

# LightConv's encoder-decoder, its decoder's histories 1 and 4 rows long.
LIGHT_CONV_SEQ2SEQ = replace(
    helpers.LIGHT_CONV_SEQ2SEQ,
    config_kwargs={**helpers.LIGHT_CONV_SEQ2SEQ.config_kwargs, "decoder_kernel_sizes": [2, 5]},
)
_BY_NAME = {case.name: case for case in [*CASES, LIGHT_CONV_SEQ2SEQ]}
EXPORTED = {
    name: _BY_NAME[name]
    for name in (
        "talk-seq2seq",
        "talk-lm",
        "dynamic-seq2seq",
        "dynamic-lm",
        "light_conv-seq2seq",
        "light_conv-lm",
        "slicenet",
    )
}
NEW_TOKENS = 8


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


def _inputs(case: Case) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(3, VOCAB, (3, 7 if case.is_seq2seq else 5), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    paddings = [(0, slice(5, None)), (1, slice(None, 3))] if case.is_seq2seq else [(0, slice(None, 2))]
    for padding in paddings:
        ids[padding], mask[padding] = PAD, 0
    return ids, mask


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """``exported(name)``: the model of ``name`` exported (once per module) with its runner."""
    done = {}

    def export(name: str) -> Exported:
        if name not in done:
            model = EXPORTED[name].model()
            ids, mask = _inputs(EXPORTED[name])
            # The end token: row 0's third new token when nothing ends, so that row 0 ends early.
            model.generation_config.eos_token_id = None
            free = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False)
            eos = int(next(t for t in free[0, -NEW_TOKENS + 2 :] if t > PAD))
            model.generation_config.eos_token_id = model.config.eos_token_id = eos
            folder = tmp_path_factory.mktemp(name)
            export_onnx(model, folder, exporter="dynamo" if name.startswith(("talk", "slicenet")) else "torchscript")
            done[name] = Exported(model, folder, OnnxGenerator(folder, threads=1), ids, mask, eos)
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


@pytest.mark.parametrize("max_left", [0, 1, 3, 8])
def test_talk_step_formula_equals_the_op(max_left):
    """One token's window sum over its (max_left + 1)-row context equals talk_conv's last row, for
    random offsets, offsets of 0 and 1, and reaches of whole tokens (edge fractions of 0)."""
    core = TaLKCore(conv_dim=8, heads=2, max_offset=max_left, causal=True, offset_dropout=0.0)
    context = torch.randn(6, max_left + 1, 8)
    offsets = torch.rand(6, max_left + 1, 2)
    offsets[:3, -1] = torch.tensor([[0.0, 1.0], [1.0, 0.0], [1 / max(max_left, 1), 0.5]])
    expected = talk_conv(context, offsets, None, max_left, 0)[:, -1:]
    torch.testing.assert_close(step_sum(context, talk_full_kernel(core, offsets[:, -1], None)), expected)


@pytest.mark.parametrize(
    "core",
    [
        TaLKCore(8, 2, 3, causal=False, offset_dropout=0.0),
        TaLKCore(8, 2, 0, causal=False, offset_dropout=0.0),
        DynamicConvCore(8, 2, 4, causal=False, weight_dropout=0.0),
        LightConvCore(8, 2, 3, causal=False, weight_dropout=0.0),
    ],
    ids=["talk", "talk-reach-0", "dynamic_conv-even", "light_conv"],
)
def test_encoder_window_sums_equal_the_ops(core):
    if isinstance(core, LightConvCore):
        core.init_weights()
    u = torch.randn(3, 9, 8)
    u[0, 6:] = 0  # padding
    torch.testing.assert_close(sequence_core(core.eval(), u), core(u))


def test_runner_needs_neither_talk_hf_nor_torch(exported):
    """The folder's own runner.py decodes (greedy and beam search) in a process where importing talk_hf,
    torch or transformers fails."""
    entry = exported("talk-seq2seq")
    expected = [entry.both(max_new_tokens=NEW_TOKENS, num_beams=beams)[0].tolist() for beams in (1, 3)]
    script = (
        "import sys, json, numpy as np\n"
        "sys.modules.update(dict.fromkeys(['talk_hf', 'torch', 'transformers']))\n"
        f"sys.path.insert(0, {str(entry.folder)!r})\n"
        "import runner\n"
        f"generator = runner.OnnxGenerator({str(entry.folder)!r}, threads=1)\n"
        f"ids, mask = np.array({entry.ids.tolist()}), np.array({entry.mask.tolist()})\n"
        f"tokens = [generator.generate(ids, mask, max_new_tokens={NEW_TOKENS}, num_beams=b) for b in (1, 3)]\n"
        "print(json.dumps([t.tolist() for t in tokens]))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == expected


def test_export_refuses_what_it_cannot_express(tmp_path):
    headless = EXPORTED["slicenet"].model().model
    with pytest.raises(ValueError, match=r"supports the heads .* not SliceNetModel"):
        export_onnx(headless, tmp_path)
    toy = next(case for case in CASES if case.head is toy_family.ToyForConditionalGeneration).model()
    with pytest.raises(ValueError, match="encoder layer 0 has a DepthwiseConvCore mixer core"):
        export_onnx(toy, tmp_path)
    model = EXPORTED["dynamic-lm"].model()
    with pytest.raises(ValueError, match="exporter must be one of"):
        export_onnx(model, tmp_path, exporter="tflite")
    with pytest.raises(ValueError, match=r"eval mode: call DynamicConvForCausalLM.eval\(\)"):
        export_onnx(model.train(), tmp_path)
    with pytest.raises(ValueError, match="export a float32 model"):
        export_onnx(model.eval().to(torch.bfloat16), tmp_path)
    assert not list(tmp_path.iterdir())


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
        (lambda folder, m: m.update(format="other"), ValueError, "is not a talk_hf-onnx manifest of version 1"),
        (lambda folder, m: m.pop("states"), ValueError, r"lacks the fields \['states'\]"),
        (
            lambda folder, m: m["graphs"]["decoder_step"]["outputs"].pop(),
            ValueError,
            "decoder_step.onnx has the outputs",
        ),
    ],
    ids=["no-manifest", "no-graph", "wrong-format", "missing-field", "wrong-names"],
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


@pytest.mark.parametrize("name", ["light_conv-seq2seq", "slicenet"])
def test_command_line_exports_and_checks(tmp_path, capsys, name):
    model = EXPORTED[name].model()
    model.save_pretrained(tmp_path / "model")
    assert main([str(tmp_path / "model"), str(tmp_path / "onnx"), "--exporter", "torchscript", "--check"]) == 0
    assert "check: greedy tokens of 4 random inputs equal model.generate's" in capsys.readouterr().out
    assert OnnxGenerator(tmp_path / "onnx").manifest["head"] == type(model).__name__
    assert main([str(tmp_path / "model"), str(tmp_path / "int8"), "--exporter", "torchscript", "--int8"]) == 0
    assert "int8: decoder_step.onnx, encoder.onnx" in capsys.readouterr().out
    assert OnnxGenerator(tmp_path / "int8").manifest["int8"]["weight_type"] == "QInt8"


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
    SliceNet's attention, a product of the query and the encoder output, stays float32), leaves the beam
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
        nodes = onnx.load(folder / file).graph.node
        assert {"DynamicQuantizeLinear", "MatMulInteger"} <= {node.op_type for node in nodes}
        float_products = {node.input[1] for node in nodes if node.op_type in ("MatMul", "Gemm")}
        assert float_products <= {"source_keys", "encoder_hidden_states"}, file
    ids, mask = float32.ids.numpy(), float32.mask.numpy()
    expected = _first_step_logits(float32.generator, ids, mask)
    logits = _first_step_logits(OnnxGenerator(folder, threads=1), ids, mask)
    assert np.sqrt(np.mean((logits - expected) ** 2)) < 0.1 * expected.std()
    with pytest.raises(ValueError, match="is already int8"):
        quantize_exported(folder)


def test_command_line_names_a_bad_model(tmp_path, capsys):
    assert main([str(tmp_path / "missing"), str(tmp_path / "onnx")]) == 1
    error = capsys.readouterr().err
    assert error.startswith("error:") and "missing is not a save_pretrained folder: it has no config.json" in error
    next(case for case in CASES if case.name == "toy-seq2seq").model().save_pretrained(tmp_path / "toy")
    assert main([str(tmp_path / "toy"), str(tmp_path / "onnx")]) == 1
    assert "error: encoder layer 0 has a DepthwiseConvCore mixer core" in capsys.readouterr().err
