"""The runner's checks of an exported folder's manifest: its fields, and the files it names.

Copied beside ``runner.py`` into every exported folder, so like it this file imports nothing but the
standard library and the runner's files beside it.  Each check raises before ONNX Runtime runs
anything, with a message that names the manifest field or the file, so a tampered folder never reaches
a raw ONNX Runtime, ``KeyError`` or ``IndexError`` failure:

* `read_manifest` / `check_manifest`: the manifest's fields, their types and ranges (token ids within
  the vocabulary, state sizes, graph names), and every ``files`` entry confined to the folder
  (`confined_file`: a plain file name, not a symlink that leads out, but for a Hugging Face Hub cache
  snapshot's links to its repository's blobs).
* `check_generation_config`: generation_config.json is still the one whose settings the manifest's
  ``generation`` field resolves.

The graphs ONNX Runtime loaded from the folder are checked against the manifest by
`runner_sessions.load_sessions`; a ``generate`` request's inputs by `runner_inputs.checked_inputs`, its
settings by `runner_request.resolved_settings`.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from .runner_settings import (
    DEFAULT_LENGTH,
    DEFAULT_LENGTH_FORM,
    GENERATION_FIELDS,
    check_setting,
    is_default_length,
    is_int,
    missing_fields,
)

MANIFEST_NAME = "manifest.json"
# In an exported folder only while an export or quantize_exported renames its files into it (folder_writes.publish).
MOVING_IN = ".talk_hf-moving-in.json"
# Version 2: the step takes the source's inputs one row per step row.
# Version 3: the manifest holds every generation setting the runner applies and generate's default length.
# Version 4: the step takes the source's inputs one row per source, each serving n consecutive step rows
# (its beams: rows = sources x n).
FORMAT, FORMAT_VERSION = "talk_hf-onnx", 4
# The manifest's field and each graph's metadata key of the export's id (a folder exported before it has none).
EXPORT_ID = "export_id"
GENERATION_CONFIG_FILE = "generation_config.json"
# The manifest's field of the SHA-256 (hex) of the generation_config.json whose settings its generation field
# resolves (a folder exported before it has none).
GENERATION_CONFIG_HASH = "generation_config_sha256"
REQUIRED_FIELDS = ("model_type", "is_encoder_decoder", "files", "graphs", "states", "vocab_size", "special_tokens")
CANDIDATES = "beam_candidates"  # the graph role of beam search's candidates (talk_hf.export.beam_graph)
PROMPT = "decoder_prompt"  # the graph role of a causal LM's whole prompt in one call (traced_forward.PromptGraph)
ROLES = ("encoder", "decoder_step", CANDIDATES, PROMPT)
STEP_LEADING_INPUTS = ("input_ids", "positions", "token_mask")


class Field:
    """Where a manifest's value sits, for messages: ``<path> field special_tokens.eos_token_id``."""

    def __init__(self, path: Path, name: str):
        self.path, self.name = path, name

    def error(self, expected: str, value) -> ValueError:
        return self.refuse(f"must be {expected}, got {value!r}")

    def refuse(self, detail: str) -> ValueError:
        return ValueError(
            f"{self.path} field {self.name} {detail}: the manifest was edited or damaged; "
            f"re-export the model (python -m talk_hf.export MODEL_DIR {self.path.parent})"
        )


def confined_file(folder: Path, field: str, name) -> Path:
    """The path of the file ``name`` in ``folder``, the manifest's ``field`` naming it.

    Raises:
        ValueError: ``name`` is not a plain file name of ``folder`` (an absolute path, a path with
            folders or ``..``, a symlink whose target lies outside ``folder`` and, for a Hub cache
            snapshot, outside its repository's blobs: `_link_targets`), naming ``field``.
        FileNotFoundError: no such file.
    """
    manifest = Field(Path(folder) / MANIFEST_NAME, field)
    if not isinstance(name, str) or name in ("", ".", "..") or Path(name).name != name or "\\" in name:
        raise manifest.error("a file name inside the exported folder (no folders, '..' or absolute paths)", name)
    path = Path(folder) / name
    if path.is_symlink() and not any(root in path.resolve().parents for root in _link_targets(folder)):
        raise manifest.error(f"a file inside the exported folder, not a symlink to {path.resolve()}", name)
    if not path.is_file():
        raise FileNotFoundError(f"{path}, named by {manifest.path} field {field}, does not exist or is not a file")
    return path


def _link_targets(folder: Path) -> list[Path]:
    """Where the symlinks among ``folder``'s files may lead: into the folder, and for a folder in a Hugging Face
    Hub cache snapshot (``<repo>/snapshots/<commit>/``, whose files are links to ``<repo>/blobs/``) that blobs folder."""
    inside = Path(folder).resolve()
    snapshots = [parent for parent in inside.parents if parent.name == "snapshots"][:1]
    return [inside, *(parent.parent / "blobs" for parent in snapshots)]


def read_manifest(folder: str | Path) -> dict:
    """The checked manifest of an exported folder (`check_manifest`); FileNotFoundError / ValueError naming
    what is wrong."""
    path, moving_in = Path(folder) / MANIFEST_NAME, Path(folder) / MOVING_IN
    if moving_in.exists():
        raise ValueError(
            f"{folder} is half written: the export or quantize_exported that wrote it stopped while renaming its files "
            f"in ({moving_in} lists them), so its graphs may not be its manifest's: {_finish(moving_in)}"
        )
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: export the model first (python -m talk_hf.export)")
    try:
        manifest = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path} is not valid JSON: {error}") from None
    check_manifest(manifest, path)
    return manifest


def finish_advice(folder: Path, writer) -> str:
    """What to run to finish ``folder`` after its ``writer`` (``"quantize_exported"``; else the export) stopped
    while moving its files in."""
    if writer == "quantize_exported":
        return f"run talk_hf.export.quantize_exported({str(folder)!r}) again, which moves the rest in"
    return f"export the model again (python -m talk_hf.export MODEL_DIR {folder})"


def _finish(moving_in: Path) -> str:
    """`finish_advice` for the writer named by the ``moving_in`` note."""
    try:
        writer = json.loads(moving_in.read_text()).get("writer")
    except (OSError, ValueError, AttributeError):
        writer = None
    return finish_advice(moving_in.parent, writer)


def check_manifest(manifest, path: Path) -> None:
    """Refuse a manifest (read from ``path``) that the runner could not follow, naming its field."""
    found = (manifest.get("format"), manifest.get("format_version")) if isinstance(manifest, dict) else None
    if found != (FORMAT, FORMAT_VERSION):
        raise ValueError(
            f"{path} is not a {FORMAT} manifest of version {FORMAT_VERSION} (format, version: {found}): export the "
            f"model again (python -m talk_hf.export MODEL_DIR {path.parent}), or run it with the runner.py exported beside it"
        )
    missing = [field for field in REQUIRED_FIELDS if field not in manifest]
    if missing:
        raise ValueError(f"{path} lacks the fields {missing}")
    if not isinstance(manifest["model_type"], str):
        raise Field(path, "model_type").error("a string", manifest["model_type"])
    seq2seq = manifest["is_encoder_decoder"]
    if not isinstance(seq2seq, bool):
        raise Field(path, "is_encoder_decoder").error("true or false", seq2seq)
    vocab = manifest["vocab_size"]
    if not is_int(vocab) or vocab < 2:
        raise Field(path, "vocab_size").error("an int >= 2", vocab)
    if "source_vocab_size" in manifest:
        source_vocab = manifest["source_vocab_size"]
        if not seq2seq or not is_int(source_vocab) or source_vocab < 2:
            expected = "an encoder-decoder's source vocabulary size, an int >= 2 (a causal LM has none)"
            raise Field(path, "source_vocab_size").error(expected, source_vocab)
    if EXPORT_ID in manifest and not (isinstance(manifest[EXPORT_ID], str) and manifest[EXPORT_ID]):
        raise Field(path, EXPORT_ID).error("the export's id, a non-empty string", manifest[EXPORT_ID])
    digest = manifest.get(GENERATION_CONFIG_HASH, "0" * 64)
    if not (isinstance(digest, str) and re.fullmatch("[0-9a-f]{64}", digest)):
        expected = f"the SHA-256 of {GENERATION_CONFIG_FILE}, 64 lowercase hex digits"
        raise Field(path, GENERATION_CONFIG_HASH).error(expected, digest)
    _check_files(manifest["files"], path, seq2seq)
    _check_graphs(manifest, path)
    _check_special_tokens(manifest["special_tokens"], path, vocab, seq2seq)
    generation = manifest.get("generation", {})
    unknown = sorted(set(generation) - set(GENERATION_FIELDS)) if isinstance(generation, dict) else None
    if unknown is None or unknown:
        raise Field(path, "generation").error(f"an object of the settings of generate, not {unknown}", generation)
    missing = missing_fields(manifest)
    if missing:
        raise ValueError(
            f"{path} lacks {missing}, the generation defaults the runner reads (an edited manifest): export again "
            f"with this talk_hf (python -m talk_hf.export MODEL_DIR {path.parent})"
        )
    for name, value in generation.items():
        try:
            check_setting(name, value, vocab)
        except (TypeError, ValueError) as error:
            raise Field(path, f"generation.{name}").refuse(str(error).removeprefix(f"{name} ")) from None
    if not is_default_length(manifest[DEFAULT_LENGTH]):
        raise Field(path, DEFAULT_LENGTH).error(DEFAULT_LENGTH_FORM, manifest[DEFAULT_LENGTH])


def check_generation_config(folder: str | Path, manifest: dict) -> None:
    """Refuse ``folder`` (its checked ``manifest``) where its generation_config.json is missing or not the file
    whose SHA-256 the manifest's `GENERATION_CONFIG_HASH` holds (an edit since the export): the runner decodes
    with the manifest's ``generation`` settings, resolved from that file at export time, so it would decode
    otherwise than the file says.  A manifest without the field (an older export) is not checked."""
    expected = manifest.get(GENERATION_CONFIG_HASH)
    path = Path(folder) / GENERATION_CONFIG_FILE
    if expected is None:
        return
    if not path.is_file():
        what = "does not exist"
    elif hashlib.sha256(path.read_bytes()).hexdigest() != expected:
        what = "was changed since the export"
    else:
        return
    raise ValueError(
        f"{path} {what} ({MANIFEST_NAME}'s {GENERATION_CONFIG_HASH} names the exported one): the runner applies the "
        f"manifest's generation settings, resolved from that file at export time, so it would not decode as the file "
        "says; to serve the file's settings, load the folder with talk_hf.onnx's ORTModelForCausalLM / "
        "ORTModelForSeq2SeqLM (which decode with them) and save_pretrained it into another folder (which restates "
        f"them in its manifest), or export the model again (python -m talk_hf.export MODEL_DIR {folder})"
    )


def source_vocab_size(manifest: dict) -> int:
    """The vocabulary of the ids that ``generate`` and ``encode`` take: an encoder-decoder's source
    vocabulary (its own size when the model has separate source and target embeddings; in a folder
    exported without the field, the target's, ``vocab_size``), a causal LM's vocabulary."""
    return manifest.get("source_vocab_size", manifest["vocab_size"])


def _check_files(files, path: Path, seq2seq: bool) -> None:
    """``files``: {role: file name} with the roles an export of this kind has, each a file of the folder."""
    required = {"decoder_step", *(["encoder"] if seq2seq else [])}
    # Optional: a folder exported before beam_candidates.onnx (or a causal LM's decoder_prompt.onnx) has none.
    allowed = required | {CANDIDATES, *([] if seq2seq else [PROMPT])}
    if not isinstance(files, dict) or not required <= set(files) <= allowed:
        kind = "an encoder-decoder" if seq2seq else "a causal LM"
        raise Field(path, "files").error(f"an object of {kind}'s graph files, with the roles {sorted(allowed)}", files)
    for role, name in files.items():
        confined_file(path.parent, f"files.{role}", name)


def _string_list(value) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _check_graphs(manifest: dict, path: Path) -> None:
    """``graphs`` (each file's input and output names) and ``states`` agree: the step's inputs are the
    leading three, the states', then the encoder's outputs it takes (and the source mask)."""
    graphs, states = manifest["graphs"], manifest["states"]
    if not isinstance(graphs, dict):
        raise Field(path, "graphs").error("an object of each graph's input and output names", graphs)
    for role in manifest["files"]:
        graph = graphs.get(role)
        if not isinstance(graph, dict) or not all(_string_list(graph.get(kind)) for kind in ("inputs", "outputs")):
            raise Field(path, f"graphs.{role}").error('{"inputs": [names], "outputs": [names]}', graph)
    shape = '{"name": str, "history_size": int >= 0, "channels": int >= 1}'
    if not isinstance(states, list):
        raise Field(path, "states").error(f"a list of {shape}", states)
    for i, state in enumerate(states):
        keys_ok = isinstance(state, dict) and set(state) == {"name", "history_size", "channels"}
        if not keys_ok or not isinstance(state["name"], str) or not is_int(state["history_size"]):
            raise Field(path, f"states[{i}]").error(shape, state)
        if state["history_size"] < 0 or not is_int(state["channels"]) or state["channels"] < 1:
            raise Field(path, f"states[{i}]").error(shape, state)
    inputs = graphs["decoder_step"]["inputs"]
    leading = [*STEP_LEADING_INPUTS, *(state["name"] for state in states)]
    source = inputs[len(leading) :]
    encoder_outputs = graphs["encoder"]["outputs"] if manifest["is_encoder_decoder"] else []
    if inputs[: len(leading)] != leading or not set(source) <= {*encoder_outputs, "encoder_attention_mask"}:
        takes = "the encoder's outputs" if manifest["is_encoder_decoder"] else "nothing"
        expected = f"{leading} (the states' names) then {takes}"
        raise Field(path, "graphs.decoder_step.inputs").error(expected, inputs)


def _check_special_tokens(tokens, path: Path, vocab: int, seq2seq: bool) -> None:
    """Each special token None or an id in [0, vocab) (the end token also a non-empty list of them); an
    encoder-decoder's ``decoder_start_token_id`` present."""
    if not isinstance(tokens, dict):
        raise Field(path, "special_tokens").error("an object of token ids", tokens)
    known = ("eos_token_id", "pad_token_id", "bos_token_id", "decoder_start_token_id")
    unknown = set(tokens) - set(known)
    if unknown:
        raise Field(path, "special_tokens").error(f"an object of the ids {list(known)}", tokens)
    if seq2seq and tokens.get("decoder_start_token_id") is None:
        raise Field(path, "special_tokens.decoder_start_token_id").error(f"a token id in [0, {vocab})", None)
    for name, value in tokens.items():
        ids = value if name == "eos_token_id" and isinstance(value, list) and value else [value]
        if value is not None and not all(is_int(token) and 0 <= token < vocab for token in ids):
            ranged = f"a token id in [0, {vocab})" + (" or a non-empty list of them" if name == "eos_token_id" else "")
            raise Field(path, f"special_tokens.{name}").error(f"None or {ranged}", value)
