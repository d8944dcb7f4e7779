"""Faults of exported folders and of the ONNX runner's requests (issue 57, items 0, 1 and 5), each injected:

* a manifest's ``files`` entry that leads out of the folder (``..``, an absolute path, a symlink) is
  refused by `quantize_exported` and `OnnxGenerator`, naming the field, and the file outside is untouched;
* `quantize_exported` is all or nothing: a damaged graph is named and the folder stays byte for byte;
* a tampered manifest is refused with its field named; a bad request is refused as ``generate`` refuses it;
* the export re-exports into its own folder, replacing a symlink there (not the file it points to), and
  refuses a user's symlink without ``overwrite`` (a user's files and ``--overwrite``: test_export.py).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from talk_hf.export import OnnxGenerator, export_onnx, folder_writes, quantize_exported
from talk_hf.export import __main__ as command_line
from talk_hf.export.__main__ import main
from talk_hf.export.folder_writes import STAGING_PREFIX
from talk_hf.export.runner import RUNNER_FILES

from ..models.helpers import VOCAB
from .exported import EXPORTED, SharedExport, SharedExports, fingerprint, inputs

pytest.importorskip("onnxruntime")

SEQ2SEQ, LM = EXPORTED["dynamic-seq2seq"], EXPORTED["dynamic-lm"]


@pytest.fixture(scope="module")
def exported(shared_exports) -> Path:
    """The session's float32 export of the tiny DynamicConv encoder-decoder (never changed: tests tamper
    with copies)."""
    return shared_exports("dynamic-seq2seq").folder


def _copy(exported: Path, tmp_path: Path) -> Path:
    return shutil.copytree(exported, tmp_path / "export", symlinks=True)


def _edit_manifest(folder: Path, edit) -> Path:
    manifest = json.loads((folder / "manifest.json").read_text())
    edit(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def _outside_file(tmp_path: Path, folder: Path) -> Path:
    """A user's model next to the export, in ``victim/`` (a copy of the export's encoder)."""
    victim = tmp_path / "victim" / "users_model.onnx"
    victim.parent.mkdir()
    shutil.copyfile(folder / "encoder.onnx", victim)
    return victim


def _lead_out(how: str, folder: Path, victim: Path) -> None:
    """Make the manifest's ``files.encoder`` lead to ``victim``: by ``..``, an absolute path or a symlink."""
    if how == "symlink":
        (folder / "encoder.onnx").unlink()
        (folder / "encoder.onnx").symlink_to(victim)
        return
    target = "../victim/users_model.onnx" if how == "dotdot" else str(victim)
    _edit_manifest(folder, lambda manifest: manifest["files"].update(encoder=target))


@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlink"])
@pytest.mark.parametrize("reader", ["quantize_exported", "OnnxGenerator"])
def test_manifest_files_stay_inside_the_folder(exported, tmp_path, how, reader):
    folder = _copy(exported, tmp_path)
    victim = _outside_file(tmp_path, folder)
    _lead_out(how, folder, victim)
    victim_bytes, before = victim.read_bytes(), fingerprint(folder)
    with pytest.raises(ValueError, match=r"manifest.json field files.encoder must be .*inside the exported folder"):
        quantize_exported(folder) if reader == "quantize_exported" else OnnxGenerator(folder)
    assert victim.read_bytes() == victim_bytes
    assert fingerprint(folder) == before


def test_a_test_that_changes_a_shared_export_is_named(tmp_path):
    """The serving tests' shared exports (exported.py) are checked at the session's end: a file changed,
    added or removed in a shared folder fails the session, naming the folder."""
    exports = SharedExports(tmp_path)
    folder = tmp_path / "dynamic-lm"
    folder.mkdir()
    (folder / "manifest.json").write_text("{}")
    ids = torch.ones(1, 1, dtype=torch.long)
    exports.done["dynamic-lm"] = SharedExport("dynamic-lm", folder, 2, ids, ids, fingerprint(folder))
    exports.check_unchanged()
    for change in (
        lambda: (folder / "manifest.json").write_text("{ }"),
        lambda: (folder / "extra.onnx").write_text(""),
        lambda: (folder / "manifest.json").unlink(),
    ):
        change()
        with pytest.raises(AssertionError, match=re.escape(f"tests changed the shared exports ['{folder}']")):
            exports.check_unchanged()
        (folder / "extra.onnx").unlink(missing_ok=True)
        (folder / "manifest.json").write_text("{}")


def test_a_symlink_inside_the_folder_is_read(exported, tmp_path):
    folder = _copy(exported, tmp_path)
    (folder / "encoder.onnx").rename(folder / "encoder-real.onnx")
    (folder / "encoder.onnx").symlink_to("encoder-real.onnx")
    ids, mask = (tensor.numpy() for tensor in inputs(SEQ2SEQ))
    expected = OnnxGenerator(exported).generate(ids, mask, max_new_tokens=4)
    np.testing.assert_array_equal(OnnxGenerator(folder).generate(ids, mask, max_new_tokens=4), expected)


def test_quantizing_a_damaged_export_leaves_the_folder_as_it_was(exported, tmp_path):
    """A garbage encoder.onnx (decoder_step.onnx, quantized first, is fine): the error names the file and
    its field, and every file stays as it was (no int8 graph, no int8 in the manifest, no staging folder);
    once the graph is mended, the folder quantizes once."""
    folder = _copy(exported, tmp_path)
    assert list(json.loads((folder / "manifest.json").read_text())["files"])[0] == "decoder_step"
    (folder / "encoder.onnx").write_bytes(b"not an onnx graph")
    before = fingerprint(folder)
    with pytest.raises(ValueError, match=r"encoder.onnx \(manifest.json field files.encoder\) could not be quantized"):
        quantize_exported(folder)
    assert fingerprint(folder) == before
    assert not [path for path in folder.iterdir() if path.name.startswith(STAGING_PREFIX)]
    shutil.copyfile(exported / "encoder.onnx", folder / "encoder.onnx")
    assert sorted(quantize_exported(folder)) == ["decoder_step.onnx", "encoder.onnx"]
    with pytest.raises(ValueError, match="is already int8"):
        quantize_exported(folder)


def _set(path: str, value):
    """An edit of the manifest: the field at the dotted ``path`` set to ``value`` (``DELETE``: removed)."""

    def edit(manifest):
        *parents, last = path.split(".")
        for key in parents:
            manifest = manifest[int(key) if isinstance(manifest, list) else key]
        if value is DELETE:
            del manifest[last]
        else:
            manifest[int(last) if isinstance(manifest, list) else last] = value

    return edit


DELETE = object()
TAMPERED = {
    "state-history": (
        _set("states.0.history_size", 5),
        r"field states\[0\] must be the step graph's history_size and channels",
    ),
    "state-channels": (
        _set("states.1.channels", 8),
        r"field states\[1\] must be the step graph's history_size and channels",
    ),
    "state-missing-key": (_set("states.0.channels", DELETE), r"field states\[0\] must be"),
    "states-not-a-list": (_set("states", {"state_0": 2}), "field states must be a list"),
    "vocabulary": (_set("vocab_size", VOCAB + 1), "field vocab_size must be the step graph's logits size 40"),
    "vocabulary-string": (_set("vocab_size", "40"), "field vocab_size must be an int >= 2"),
    "source-vocabulary-string": (
        _set("source_vocab_size", "40"),
        "field source_vocab_size must be an encoder-decoder's source vocabulary size, an int >= 2",
    ),
    "eos-too-large": (_set("special_tokens.eos_token_id", VOCAB), r"special_tokens.eos_token_id must be None or"),
    "eos-negative": (_set("special_tokens.eos_token_id", -1), r"special_tokens.eos_token_id must be None or"),
    "eos-list": (_set("special_tokens.eos_token_id", [2, 99]), r"special_tokens.eos_token_id must be None or"),
    "pad-float": (_set("special_tokens.pad_token_id", 1.5), "special_tokens.pad_token_id must be None or"),
    "no-start-token": (
        _set("special_tokens.decoder_start_token_id", DELETE),
        "special_tokens.decoder_start_token_id must be a token id in",
    ),
    "files-a-list": (_set("files", ["decoder_step.onnx", "encoder.onnx"]), "field files must be an object"),
    "files-unknown-role": (_set("files.vocoder", "encoder.onnx"), "field files must be an object"),
    "files-no-encoder": (_set("files.encoder", DELETE), "field files must be an object of an encoder-decoder's"),
    "num-beams-string": (_set("generation.num_beams", "4"), r"field generation.num_beams must be an int"),
    "early-stopping": (_set("generation.early_stopping", "yes"), "field generation.early_stopping must be"),
    "length-penalty-nan": (_set("generation.length_penalty", float("nan")), "generation.length_penalty must be"),
    "top-k-null": (_set("generation.top_k", None), "field generation.top_k must be an int, got None"),
    "generation-unknown": (
        _set("generation.beam_width", 4),
        r"field generation must be an object of the settings of generate, not \[.beam_width.\]",
    ),
    # A manifest edited to lack what the export writes for the runner's settings.
    "generation-setting-missing": (
        _set("generation.top_k", DELETE),
        r"manifest.json lacks \['generation.top_k'\], the generation defaults .* export again with this talk_hf",
    ),
    "generation-missing": (
        _set("generation", DELETE),
        r"manifest.json lacks \['generation.max_length', .*'generation.top_p'\], .* export again with this talk_hf",
    ),
    "default-length-missing": (
        _set("default_length", DELETE),
        r"manifest.json lacks \['default_length'\], .* export again with this talk_hf \(python -m talk_hf.export",
    ),
    "default-length-zero": (
        _set("default_length.new_tokens", 0),
        r"field default_length must be an object of new_tokens \(an int >= 1\) and max_position_embeddings",
    ),
    "default-length-bound-float": (
        _set("default_length.max_position_embeddings", 12.5),
        r"field default_length must be an object of new_tokens .* got \{'new_tokens': 20, 'max_position_embeddings': 12.5\}",
    ),
    "step-inputs": (_set("graphs.decoder_step.inputs.3", "state_9"), "field graphs.decoder_step.inputs must be"),
    "graph-names-missing": (_set("graphs.encoder", DELETE), "field graphs.encoder must be"),
    "is-encoder-decoder": (_set("is_encoder_decoder", "yes"), "field is_encoder_decoder must be true or false"),
}


@pytest.mark.parametrize("name", TAMPERED)
def test_a_tampered_manifest_is_refused_naming_its_field(exported, tmp_path, name):
    edit, message = TAMPERED[name]
    folder = _edit_manifest(_copy(exported, tmp_path), edit)
    with pytest.raises(ValueError, match=message):
        OnnxGenerator(folder)


@pytest.fixture(scope="module")
def runner(exported) -> OnnxGenerator:
    return OnnxGenerator(exported, threads=1)


IDS = np.full((2, 5), 4)
BAD_REQUESTS = {
    "id-negative": (
        dict(input_ids=IDS - 5),
        ValueError,
        r"input_ids must hold token ids in \[0, 40\), got values from -1",
    ),
    "id-too-large": (dict(input_ids=IDS + 36), ValueError, r"input_ids must hold token ids in \[0, 40\), got .* to 40"),
    "float-ids": (dict(input_ids=IDS + 0.7), ValueError, "input_ids must hold integer token ids, got dtype float64"),
    "ragged-ids": (dict(input_ids=[[4, 5], [4]]), ValueError, "input_ids must be a .* rows of equal length"),
    "empty-batch": (dict(input_ids=IDS[:0]), ValueError, r"batch and length >= 1, got shape \(0, 5\)"),
    "mask-2": (dict(input_ids=IDS, attention_mask=IDS * 0 + 2), ValueError, r"only 0 \(padding\) and 1 .* got \[2\]"),
    "mask-half": (dict(input_ids=IDS, attention_mask=IDS * 0 + 0.5), ValueError, r"1 \(real token\), got \[0.5\]"),
    "mask-shape": (dict(input_ids=IDS, attention_mask=IDS[:, :4]), ValueError, r"attention_mask has shape \(2, 4\)"),
    "early-stopping": (dict(input_ids=IDS, early_stopping="yes"), ValueError, "early_stopping must be True, False or"),
    "length-penalty-nan": (dict(input_ids=IDS, length_penalty=float("nan")), ValueError, "length_penalty must be a"),
    "length-penalty-text": (dict(input_ids=IDS, length_penalty="1"), ValueError, "length_penalty must be a finite"),
    "length-penalty-overflow": (  # Python's OverflowError in beam search's new_tokens ** length_penalty
        dict(input_ids=IDS, num_beams=2, length_penalty=1e300, max_new_tokens=3),
        ValueError,
        r"length_penalty 1e\+300 overflows: 3 new tokens \*\* length_penalty is beyond a float's range",
    ),
    "beams-huge": (dict(input_ids=IDS, num_beams=10**6), ValueError, r"num_beams must be in \[1, 40\] \(no more beams"),
    "beams-string": (dict(input_ids=IDS, num_beams="3"), TypeError, "num_beams must be an int, got '3'"),
    "max-new-zero": (dict(input_ids=IDS, max_new_tokens=0), ValueError, "max_new_tokens must be >= 1, got 0"),
    "max-new-float": (dict(input_ids=IDS, max_new_tokens=2.5), TypeError, "max_new_tokens must be an int"),
    "min-new-negative": (dict(input_ids=IDS, min_new_tokens=-1), ValueError, "min_new_tokens must be >= 0"),
}


@pytest.mark.parametrize("name", BAD_REQUESTS)
def test_a_bad_request_is_refused_as_generate_refuses_it(runner, name):
    request, error, message = BAD_REQUESTS[name]
    with pytest.raises(error, match=message):
        runner.generate(**request)


def test_a_manifest_length_penalty_that_would_overflow_is_inert_without_beams(runner, monkeypatch):
    """Greedy decoding does not apply the manifest's length_penalty, so a huge one refuses only beam search."""
    expected = runner.generate(IDS, max_new_tokens=3, num_beams=1)
    monkeypatch.setitem(runner.defaults, "length_penalty", 1e300)
    np.testing.assert_array_equal(runner.generate(IDS, max_new_tokens=3, num_beams=1), expected)
    with pytest.raises(ValueError, match="length_penalty 1e\\+300 overflows"):
        runner.generate(IDS, max_new_tokens=3, num_beams=2)


@pytest.mark.parametrize("folder", [None, 3, b"folder"], ids=["none", "int", "bytes"])
def test_a_folder_that_is_not_a_path_is_named(folder):
    with pytest.raises(TypeError, match=r"^folder must be the path of an exported folder \(a str or Path\), got "):
        OnnxGenerator(folder)


def test_bad_session_options_are_refused(exported):
    with pytest.raises(ValueError, match="threads must be >= 1, got 0"):
        OnnxGenerator(exported, threads=0)
    with pytest.raises(TypeError, match="spin must be True or False, got 'no'"):
        OnnxGenerator(exported, spin="no")
    assert (
        OnnxGenerator(exported, threads=np.int64(1)).sessions["encoder"].get_session_options().intra_op_num_threads == 1
    )


def test_a_huge_max_new_tokens_allocates_only_the_steps_taken(exported, tmp_path):
    """Beam search with max_new_tokens=10**12 (a preallocated (batch, beams, length) buffer would be
    terabytes) returns as soon as the search ends: every token but one ends a beam here."""
    ends = [token for token in range(VOCAB) if token != 5]
    folder = _edit_manifest(_copy(exported, tmp_path), _set("special_tokens.eos_token_id", ends))
    ids, mask = (tensor.numpy() for tensor in inputs(SEQ2SEQ))
    tokens = OnnxGenerator(folder, threads=1).generate(ids, mask, max_new_tokens=10**12, num_beams=2)
    assert tokens.shape[0] == len(ids) and tokens.shape[1] <= 4


@pytest.mark.slow  # exports a model
def test_a_previous_export_is_replaced_and_its_stale_files_removed(exported, tmp_path):
    """Exporting into an export's folder needs no overwrite: a causal LM exported over an encoder-decoder's
    export replaces its files, removes the encoder.onnx that export wrote, and a user's other files stay.
    A file of that name that is a symlink is replaced, never the file it points to; in a folder that no
    export wrote, such a symlink is refused unless overwrite (checked before anything is traced)."""
    victim = tmp_path / "victim.py"
    victim.write_text("precious")
    foreign = tmp_path / "out"
    foreign.mkdir()
    (foreign / "runner.py").symlink_to(victim)
    with pytest.raises(FileExistsError, match=r"holds \['runner.py'\]"):
        export_onnx(LM.model(), foreign)
    folder_writes.check_replaceable(foreign, ["runner.py"], overwrite=True)
    folder = _copy(exported, tmp_path)
    (folder / "notes.txt").write_text("keep me")
    (folder / "runner.py").unlink()
    (folder / "runner.py").symlink_to(victim)
    export_onnx(LM.model(), folder)
    written = ["beam_candidates.onnx", "decoder_step.onnx", "manifest.json", *sorted(RUNNER_FILES)]
    written = sorted([*written, "config.json", "decoder_prompt.onnx", "generation_config.json"])
    assert sorted(path.name for path in folder.iterdir()) == sorted([*written, "notes.txt"])
    assert sorted(OnnxGenerator(folder).manifest["written"]) == written
    assert victim.read_text() == "precious" and not (folder / "runner.py").is_symlink()


def test_export_refuses_generation_defaults_the_runner_cannot_apply(tmp_path):
    """Checked before anything is exported: the folder is not even created."""
    model = LM.model()
    model.generation_config.num_beams = VOCAB + 1
    with pytest.raises(ValueError, match=r"DynamicConvForCausalLM's generation_config.num_beams must be in \[1, 40\]"):
        export_onnx(model, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_export_refuses_a_bound_on_the_default_length_the_runner_cannot_apply(tmp_path):
    """A config's max_position_embeddings (generate's bound on its default length) that is not an int >= 1
    is refused before anything is exported."""
    model = LM.model()
    model.config.max_position_embeddings = 0
    with pytest.raises(ValueError, match=r"DynamicConvForCausalLM's default length .*'max_position_embeddings': 0\}"):
        export_onnx(model, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_export_refuses_a_file_as_its_folder(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError, match="file is a file, so .* cannot be a folder"):
        export_onnx(LM.model(), tmp_path / "file" / "out")


@pytest.mark.parametrize(
    "value, message",
    [("40", "vocab_size must be an int, got '40'"), (-1, "vocab_size must be >= 1, got -1")],
    ids=["wrong-type", "out-of-range"],
)
def test_command_line_names_the_config_field_of_a_bad_value(tmp_path, capsys, value, message):
    """A config.json value the configuration refuses (a TypeError for a wrong type) is one ``error:`` line
    naming the file and the field, not a traceback."""
    LM.model().save_pretrained(tmp_path / "model")
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    (tmp_path / "model" / "config.json").write_text(json.dumps({**config, "vocab_size": value}))
    capsys.readouterr()  # save_pretrained's progress
    assert main([str(tmp_path / "model"), str(tmp_path / "onnx")]) == 1
    error = capsys.readouterr().err
    assert error.startswith(f"error: {tmp_path / 'model' / 'config.json'} does not load: {message}"), error
    assert not (tmp_path / "onnx").exists()


def _other_vocabulary(model: Path) -> None:
    """The config.json of a larger vocabulary than its weights'."""
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "vocab_size": VOCAB + 8}))


def _truncated_weights(model: Path) -> None:
    weights = (model / "model.safetensors").read_bytes()
    (model / "model.safetensors").write_bytes(weights[: len(weights) // 2])


@pytest.mark.parametrize(
    "damage, cause",
    [(_other_vocabulary, "ignore_mismatched_sizes"), (_truncated_weights, "deserializing header")],
    ids=["other-shapes", "truncated-file"],
)
def test_command_line_names_weights_that_do_not_load(tmp_path, capsys, damage, cause):
    """Weights that do not fit the config (a RuntimeError after transformers' load report) or a damaged
    weights file (safetensors' own error) are one ``error:`` line naming the folder, not a traceback."""
    LM.model().save_pretrained(tmp_path / "model")
    damage(tmp_path / "model")
    capsys.readouterr()  # save_pretrained's progress
    assert main([str(tmp_path / "model"), str(tmp_path / "onnx")]) == 1
    error = capsys.readouterr().err.splitlines()[-1]
    assert error.startswith(f"error: the weights in {tmp_path / 'model'} do not load into the dynamic_conv_lm model"), (
        error
    )
    assert cause in error and "save the model again" in error
    assert not (tmp_path / "onnx").exists()


def test_command_line_refuses_weights_missing_or_left_over(tmp_path, capsys):
    """A weights file that lacks one of the model's weights (transformers would initialise it at random and
    only log it) and holds one the model has not (dropped) is refused, naming both, before anything is written."""
    safetensors_torch = pytest.importorskip("safetensors.torch")
    LM.model().save_pretrained(tmp_path / "model")
    path = tmp_path / "model" / "model.safetensors"
    weights = safetensors_torch.load_file(path)
    dropped = sorted(weights)[-1]
    weights["extra.weight"] = weights.pop(dropped)
    safetensors_torch.save_file(weights, path, metadata={"format": "pt"})
    capsys.readouterr()  # save_pretrained's progress
    assert main([str(tmp_path / "model"), str(tmp_path / "onnx")]) == 1
    error = capsys.readouterr().err.splitlines()[-1]
    expected = (
        f"error: the weights in {tmp_path / 'model'} are not those of the dynamic_conv_lm model of its config.json"
    )
    assert error.startswith(f"{expected}: it lacks ['{dropped}'] and holds ['extra.weight']"), error
    assert not (tmp_path / "onnx").exists()


@pytest.mark.parametrize(
    "damage",
    [lambda data: b"not a graph", lambda data: data[: len(data) // 2], lambda data: b""],
    ids=["garbage", "truncated", "empty"],
)
@pytest.mark.parametrize("graph", ["encoder", "decoder_step", "beam_candidates"])
def test_a_damaged_graph_file_is_named(exported, tmp_path, graph, damage):
    """A graph file ONNX Runtime cannot load is refused naming the file, the manifest field and the fix,
    not with ONNX Runtime's own INVALID_PROTOBUF / INVALID_ARGUMENT error."""
    folder = _copy(exported, tmp_path)
    path = folder / f"{graph}.onnx"
    path.write_bytes(damage(path.read_bytes()))
    message = f"{re.escape(str(path))}, named by .*manifest.json field files.{graph}, is not an ONNX graph that ONNX Runtime loads"
    with pytest.raises(ValueError, match=f"^{message} .*export the model again"):
        OnnxGenerator(folder)


@pytest.mark.parametrize("target", ["folder", "new-subfolder"])
def test_command_line_names_a_read_only_target_before_loading_the_model(tmp_path, capsys, monkeypatch, target):
    """An output folder (or the folder it would be made in) that refuses new files is named with the fix
    before the model loads or is traced; it failed after tracing, naming the export's hidden staging folder."""
    LM.model().save_pretrained(tmp_path / "model")
    (tmp_path / "out").mkdir()

    def refused(prefix, dir):
        raise PermissionError(1, "Operation not permitted", str(Path(dir) / prefix))

    monkeypatch.setattr(folder_writes.tempfile, "mkdtemp", refused)  # a read-only folder, as root cannot chmod one
    monkeypatch.setattr(command_line, "load_model", lambda model_dir: pytest.fail("the model loaded"))
    output = tmp_path / "out" / ("sub" if target == "new-subfolder" else "")
    capsys.readouterr()  # save_pretrained's progress
    assert main([str(tmp_path / "model"), str(output)]) == 1
    error = capsys.readouterr().err.splitlines()[-1]
    assert error == (
        f"error: {output} cannot be written: {tmp_path / 'out'} refuses new files (Operation not permitted); "
        "choose another output folder, or make it writable"
    )
    assert list((tmp_path / "out").iterdir()) == []
