"""Write a model's graphs as ONNX files, with its configurations, tokenizer, a manifest and the runner.

The folder holds ``encoder.onnx`` (encoder-decoders), ``decoder_prompt.onnx`` (causal LMs: a whole
prompt in one call, `traced_forward.PromptGraph`), ``decoder_step.onnx``, ``beam_candidates.onnx``
(beam search's log-softmax and ranking of the step's logits, `beam_graph`), ``config.json`` and
``generation_config.json`` (the model's, as ``save_pretrained`` writes them: what
`talk_hf.onnx` reads), the tokenizer's files when one is given, ``manifest.json`` (the graphs' input
and output names, each layer's state shape, the special tokens, the vocabulary size, the model type,
the generation settings as ``generate`` resolves them for the model with the SHA-256 of the
generation_config.json they come from (`GENERATION_CONFIG_HASH`: the runner refuses a folder whose file was
edited since, `runner_checks.check_generation_config`), the files the export wrote, and the export's
id, ``export_id``, which each graph also carries in its metadata: `runner_sessions.check_export_id`), ``runner.py`` and the
files of ``runner.RUNNER_FILES`` beside it (copies of `talk_hf.export.runner` and its modules:
onnxruntime and numpy only).  Batch, source and prompt length are dynamic axes; every state keeps a
fixed (batch, history_size, channels) shape.

Each graph is one file, weights inside (ONNX's protobuf limit: 2 GB a graph).

The graphs are the model's own forward (`traced_forward`), traced by ``torch.export`` (`graphs`) and
written by ``torch.onnx.export(..., dynamo=True)`` (onnxscript's optimiser), opset 18, whose graphs
store a tied embedding once.  The tokens equal ``generate``'s in float32;
``onnxruntime.quantization.quantize_dynamic`` (int8 weights, applied to the exported files) changes
some beams.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import onnx
import torch

from ..int8_model import refuse_if_int8
from ..transformers_internals import generate_defaults
from ..version import __version__
from . import runner
from .attention_lowering import TRANSLATIONS
from .beam_graph import INPUTS, OUTPUTS, candidates_graph, chunk_size
from .folder_writes import check_replaceable, previous_export_files, publish, remove_stale, staging_folder
from .graphs import TracedGraphs, check_head, start_token, trace_graphs
from .runner_checks import (
    CANDIDATES,
    EXPORT_ID,
    FORMAT,
    FORMAT_VERSION,
    GENERATION_CONFIG_FILE,
    GENERATION_CONFIG_HASH,
    MANIFEST_NAME,
    PROMPT,
    check_manifest,
)
from .runner_settings import (
    APPLIED,
    DEFAULT_LENGTH,
    DEFAULT_LENGTH_FORM,
    GENERATION_FIELDS,
    check_setting,
    is_default_length,
)

OPSET = 18
ENCODER_FILE, STEP_FILE, CANDIDATES_FILE = "encoder.onnx", "decoder_step.onnx", f"{CANDIDATES}.onnx"
PROMPT_FILE = f"{PROMPT}.onnx"
CONFIG_FILE = "config.json"
# torch.onnx's TorchScript exporter cannot trace the models' forward (their cache updates in place).
EXPORTERS = ("dynamo",)
# Every file an export writes besides the tokenizer's (an encoder-decoder writes no decoder_prompt.onnx,
# a causal LM no encoder.onnx).
EXPORT_FILES = (
    ENCODER_FILE,
    STEP_FILE,
    CANDIDATES_FILE,
    *runner.RUNNER_FILES,
    PROMPT_FILE,
    CONFIG_FILE,
    GENERATION_CONFIG_FILE,
    MANIFEST_NAME,
)


def _to_onnx(program: torch.export.ExportedProgram, path: Path, names: dict, export_id: str) -> None:
    """Write the traced ``program`` to ``path`` as ONNX (its optimiser run), with ``names``' input and output
    names and ``export_id`` in its metadata (`EXPORT_ID`)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (DeprecationWarning, UserWarning, FutureWarning))
        onnx_program = torch.onnx.export(
            program,
            (),
            input_names=names["inputs"],
            output_names=names["outputs"],
            opset_version=OPSET,
            dynamo=True,
            verbose=False,
            custom_translation_table=TRANSLATIONS,
        )
        onnx_program.model.metadata_props[EXPORT_ID] = export_id
        onnx_program.save(str(path), external_data=False)


def special_tokens(model) -> dict:
    """The manifest's ``special_tokens``: the end, padding and start tokens that ``model``'s ``generate`` reads
    (generation configuration first, then model configuration); ``model`` needs only ``config`` and
    ``generation_config`` (a PyTorch model, or a `talk_hf.onnx` model restating its folder)."""
    config, generation = model.config, model.generation_config
    eos = generation.eos_token_id if generation.eos_token_id is not None else config.eos_token_id
    pad = generation.pad_token_id if generation.pad_token_id is not None else config.pad_token_id
    tokens = {"eos_token_id": eos, "pad_token_id": pad, "bos_token_id": config.bos_token_id}
    if config.is_encoder_decoder:
        tokens["decoder_start_token_id"] = start_token(model)
    return tokens


def generation_fields(generation_config, vocab_size: int, config, owner: str) -> dict:
    """The manifest's ``generation`` and `DEFAULT_LENGTH` fields: what ``generate`` resolves for a model of
    ``config`` (its ``max_position_embeddings``) and ``vocab_size`` logits under ``generation_config``.

    ``generation``: each setting of ``GENERATION_FIELDS`` as ``generation_config`` sets it, else as
    transformers' ``generate`` defaults it (`generate_defaults`); every one of ``APPLIED`` (None where
    neither sets it), those of ``NOT_APPLIED`` where not None.  ``max_length`` stays None where the
    configuration leaves it unset: generate then counts its default in new tokens after the prompt, at most the
    config's ``max_position_embeddings`` (`DEFAULT_LENGTH`).  Each value is checked as the runner checks
    it (a ValueError naming it and ``owner``, the model's class, before anything is written).
    """
    defaults = generate_defaults()
    generation = {}
    for name in GENERATION_FIELDS:
        value, source = getattr(generation_config, name), f"generation_config.{name}"
        if value is None and name != "max_length":
            value, source = defaults.get(name), f"generation setting {name} (transformers' default)"
        try:
            check_setting(name, value, vocab_size)
        except (TypeError, ValueError) as error:
            problem = str(error).removeprefix(f"{name} ")
            raise ValueError(f"{owner}'s {source} {problem}: the runner cannot apply it") from None
        if value is not None or name in APPLIED:
            generation[name] = value
    bound = getattr(config, "max_position_embeddings", None)
    default_length = {"new_tokens": defaults["max_length"], "max_position_embeddings": bound}
    if not is_default_length(default_length):
        raise ValueError(
            f"{owner}'s default length {default_length} (transformers' default max_length in new "
            f"tokens, at most config.max_position_embeddings) must be {DEFAULT_LENGTH_FORM}"
        )
    return {"generation": generation, DEFAULT_LENGTH: default_length}


def _generation_fields(model) -> dict:
    """`generation_fields` of ``model``'s generation configuration, vocabulary (its logits' width) and config."""
    vocab_size = model.get_output_embeddings().out_features
    return generation_fields(model.generation_config, vocab_size, model.config, type(model).__name__)


def write_generation_config(generation_config, folder: Path) -> dict:
    """Write ``generation_config`` into ``folder`` as ``save_pretrained`` writes it (``generation_config.json``):
    the manifest's `GENERATION_CONFIG_HASH` field of those bytes, which the runner checks the file against
    (`runner_checks.check_generation_config`)."""
    generation_config.save_pretrained(folder)
    return {GENERATION_CONFIG_HASH: hashlib.sha256((folder / GENERATION_CONFIG_FILE).read_bytes()).hexdigest()}


def write_manifest(manifest: dict, folder: Path, graphs_folder: Path | None = None) -> None:
    """Write ``manifest`` into ``folder`` (`MANIFEST_NAME`) and check it as the runner reads it, its graph files
    those of ``graphs_folder`` (None: ``folder``)."""
    (folder / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
    check_manifest(manifest, (graphs_folder or folder) / MANIFEST_NAME)


def written_files(is_encoder_decoder: bool) -> list[str]:
    """The names of the files an export writes besides the tokenizer's: `EXPORT_FILES`, but an
    encoder-decoder's has no prompt graph and a causal LM's no encoder."""
    skipped = PROMPT_FILE if is_encoder_decoder else ENCODER_FILE
    return [name for name in EXPORT_FILES if name != skipped]


def export_onnx(model, folder: str | Path, exporter: str = "dynamo", overwrite: bool = False, tokenizer=None) -> Path:
    """Export ``model`` (a generative head, float32, eval mode) into ``folder``.

    Every file is written into a staging folder inside ``folder`` and then renamed into place, the
    manifest last; its ``written`` field lists them.  A previous export's files are replaced (and those
    the new export does not write, such as a causal LM's export replacing an encoder-decoder's
    ``encoder.onnx``, or the tokenizer files of an export that had one, deleted); any other file of the
    same name as one the export writes is refused (`folder_writes.check_replaceable`), before anything
    is exported, unless ``overwrite``.

    Args:
        model: a head of the package's models or of a registered family (see `graphs.trace_graphs`).
        folder: created if missing.
        exporter: ``"dynamo"`` (``torch.export``, then ``torch.onnx.export(dynamo=True)``), the only one.
        overwrite: replace files of the names in ``EXPORT_FILES`` (or the tokenizer's) even when no export
            wrote them.
        tokenizer: the model's tokenizer (a transformers tokenizer), whose ``save_pretrained`` files go
            into the folder with the graphs, so that a host decodes text; None: no tokenizer files.

    Returns:
        The path of the manifest.

    Raises:
        ValueError: a model that cannot be exported (see `graphs.trace_graphs`), a tokenizer whose
            vocabulary is larger than the model's or whose files are not plain files.
        TypeError: a ``tokenizer`` without ``save_pretrained``.
        FileExistsError, IsADirectoryError, NotADirectoryError: see `folder_writes.check_replaceable`.
    """
    refuse_if_int8(model, "export_onnx", "export the floating-point model, then quantize_exported (--int8)")
    if exporter not in EXPORTERS:
        raise ValueError(
            f"exporter must be one of {EXPORTERS}, got {exporter!r} (torch.onnx's TorchScript exporter cannot "
            "trace the models' forward, whose generation cache updates in place)"
        )
    check_head(model)
    dtypes = {parameter.dtype for parameter in model.parameters()}
    if dtypes != {torch.float32}:
        raise ValueError(f"export a float32 model; {type(model).__name__} has parameters of {sorted(map(str, dtypes))}")
    fields = {"special_tokens": special_tokens(model), **_generation_fields(model)}
    fields["exported_with"] = {"talk_hf": __version__, "torch": torch.__version__, "exporter": exporter, "opset": OPSET}
    fields[EXPORT_ID] = uuid.uuid4().hex  # tells this export's graphs from another's of the same shapes
    folder = Path(folder)
    with _saved_tokenizer(tokenizer, model.config.vocab_size) as (tokenizer_folder, tokenizer_files):
        names = [*written_files(model.config.is_encoder_decoder), *tokenizer_files]
        check_replaceable(folder, names, overwrite)
        traced = trace_graphs(model)
        previous = previous_export_files(folder)
        folder.mkdir(parents=True, exist_ok=True)
        with staging_folder(folder) as staging:
            _write_folder(model, traced, staging, {**fields, "written": names})
            for name in tokenizer_files:
                shutil.copyfile(tokenizer_folder / name, staging / name)
            publish(staging, folder, names)
    remove_stale(folder, previous, names)
    return folder / MANIFEST_NAME


def _write_folder(model, traced: TracedGraphs, staging: Path, fields: dict) -> None:
    """Write the graphs, the configurations, the runner and the manifest into ``staging``, the manifest
    with ``fields`` (special tokens, generation settings and default length, ``exported_with``, ``export_id``,
    ``written``) and the hash of the generation_config.json written, and checked as the runner reads it; each
    graph carries ``export_id`` too."""
    files = _write_graphs(model, traced, staging, fields[EXPORT_ID])
    model.config.save_pretrained(staging)
    fields = {**fields, **write_generation_config(model.generation_config, staging)}
    graphs = {**traced.names, CANDIDATES: {"inputs": list(INPUTS), "outputs": list(OUTPUTS)}}
    state_names = graphs["decoder_step"]["inputs"][3 : 3 + len(traced.layout.state_shapes)]
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "model_type": model.config.model_type,
        "head": type(model).__name__,
        "is_encoder_decoder": model.config.is_encoder_decoder,
        "files": files,
        "graphs": graphs,
        "states": [
            {"name": name, "history_size": size, "channels": channels}
            for name, (size, channels) in zip(state_names, traced.layout.state_shapes, strict=True)
        ],
        "vocab_size": model.get_output_embeddings().out_features,
        **({"source_vocab_size": model.config.vocab_size} if model.config.is_encoder_decoder else {}),
        **fields,
    }
    for name in runner.RUNNER_FILES:
        shutil.copyfile(Path(runner.__file__).with_name(name), staging / name)
    write_manifest(manifest, staging)  # checked: the runner reads what the export writes


@contextmanager
def _saved_tokenizer(tokenizer, vocab_size: int) -> Iterator[tuple[Path | None, list[str]]]:
    """``tokenizer`` saved into a temporary folder: (that folder, its file names), deleted at the end;
    (None, []) without a tokenizer.  Refused before anything is exported: an object without
    ``save_pretrained`` (TypeError), more tokens than the model's ``vocab_size`` rows, or files that
    are not plain files of the folder (folders, links) (ValueError)."""
    if tokenizer is None:
        yield None, []
        return
    if not callable(getattr(tokenizer, "save_pretrained", None)):
        raise TypeError(
            f"tokenizer must be a transformers tokenizer (with save_pretrained), got {type(tokenizer).__name__}"
        )
    if len(tokenizer) > vocab_size:
        raise ValueError(
            f"tokenizer has {len(tokenizer)} tokens but the model's vocabulary {vocab_size}: pass the tokenizer the "
            "model was trained with"
        )
    with tempfile.TemporaryDirectory(prefix="talk_hf-tokenizer-") as saved:
        tokenizer.save_pretrained(saved)
        entries = sorted(Path(saved).iterdir())
        odd = [entry.name for entry in entries if entry.is_symlink() or not entry.is_file()]
        clashing = [entry.name for entry in entries if entry.name in EXPORT_FILES]
        if odd or clashing:
            what = f"folders or links {odd}" if odd else f"files named as the export's own, {clashing}"
            raise ValueError(
                f"{type(tokenizer).__name__}.save_pretrained writes {what}: the export copies a tokenizer's plain "
                "files only, beside its own; export without tokenizer= and copy its files yourself"
            )
        yield Path(saved), [entry.name for entry in entries]


def _write_graphs(model, traced: TracedGraphs, folder: Path, export_id: str) -> dict:
    """Write the ``traced`` encoder (encoder-decoders) or prompt (causal LMs) and step, and the beam
    candidates graph, into ``folder``, each with ``export_id`` in its metadata: each graph's file name, by role."""
    files = {"decoder_step": STEP_FILE}
    if traced.encoder is not None:
        _to_onnx(traced.encoder, folder / ENCODER_FILE, traced.names["encoder"], export_id)
        files["encoder"] = ENCODER_FILE
    if traced.prompt is not None:
        _to_onnx(traced.prompt, folder / PROMPT_FILE, traced.names[PROMPT], export_id)
        files[PROMPT] = PROMPT_FILE
    _to_onnx(traced.step, folder / STEP_FILE, traced.names["decoder_step"], export_id)
    vocab_size = model.get_output_embeddings().out_features
    candidates = candidates_graph(vocab_size, chunk_size(vocab_size), OPSET)
    onnx.helper.set_model_props(candidates, {EXPORT_ID: export_id})
    onnx.save(candidates, folder / CANDIDATES_FILE)
    files[CANDIDATES] = CANDIDATES_FILE
    return files
