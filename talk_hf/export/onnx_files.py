"""Write a model's encoder and decoding step as ONNX files, with a manifest and the runner beside them.

The folder holds ``encoder.onnx`` (encoder-decoders), ``decoder_step.onnx``, ``beam_candidates.onnx``
(beam search's log-softmax and ranking of the step's logits, `beam_graph`), ``manifest.json`` (the
graphs' input and output names, each layer's state shape, the special tokens, the vocabulary size,
the model type, the generation defaults the runner applies, and the files the export wrote),
``runner.py`` and ``runner_checks.py`` (copies of `talk_hf.export.runner` and of its checks:
onnxruntime and numpy only).  Batch and source length are dynamic axes; every state keeps a fixed
(batch, history_size, channels) shape.

Each graph is one file, weights inside (ONNX's protobuf limit: 2 GB a graph).

The graphs are the model's own forward (`traced_forward`), traced by ``torch.export`` (`graphs`) and
written by ``torch.onnx.export(..., dynamo=True)`` (onnxscript's optimiser), opset 18, whose graphs
store a tied embedding once.  The tokens equal ``generate``'s in float32;
``onnxruntime.quantization.quantize_dynamic`` (int8 weights, applied to the exported files) changes
some beams.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import onnx
import torch

from ..int8_model import refuse_if_int8
from ..version import __version__
from . import runner
from .beam_graph import INPUTS, OUTPUTS, candidates_graph, chunk_size
from .folder_writes import check_replaceable, previous_export_files, publish, staging_folder
from .graphs import TracedGraphs, check_head, start_token, trace_graphs
from .runner_checks import (
    CANDIDATES,
    FORMAT,
    FORMAT_VERSION,
    GENERATION_FIELDS,
    MANIFEST_NAME,
    check_manifest,
    check_setting,
)

OPSET = 18
ENCODER_FILE, STEP_FILE, CANDIDATES_FILE = "encoder.onnx", "decoder_step.onnx", f"{CANDIDATES}.onnx"
# torch.onnx's TorchScript exporter cannot trace the models' forward (their cache updates in place).
EXPORTERS = ("dynamo",)
# Every file an export may write (an encoder-decoder's; a causal LM's has no encoder.onnx).
EXPORT_FILES = (ENCODER_FILE, STEP_FILE, CANDIDATES_FILE, *runner.RUNNER_FILES, MANIFEST_NAME)


def _to_onnx(program: torch.export.ExportedProgram, path: Path, names: dict) -> None:
    """Write the traced ``program`` to ``path`` as ONNX (its optimiser run), with ``names``' input and output names."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (DeprecationWarning, UserWarning, FutureWarning))
        torch.onnx.export(
            program,
            (),
            str(path),
            input_names=names["inputs"],
            output_names=names["outputs"],
            opset_version=OPSET,
            dynamo=True,
            verbose=False,
            external_data=False,
        )


def _special_tokens(model) -> dict:
    config, generation = model.config, model.generation_config
    eos = generation.eos_token_id if generation.eos_token_id is not None else config.eos_token_id
    pad = generation.pad_token_id if generation.pad_token_id is not None else config.pad_token_id
    tokens = {"eos_token_id": eos, "pad_token_id": pad, "bos_token_id": config.bos_token_id}
    if config.is_encoder_decoder:
        tokens["decoder_start_token_id"] = start_token(model)
    return tokens


def _generation_defaults(model) -> dict:
    """The settings of ``GENERATION_FIELDS`` that the model's generation configuration sets, checked as
    the runner checks them (a ValueError naming the field before anything is exported)."""
    generation = model.generation_config
    defaults = {name: getattr(generation, name) for name in GENERATION_FIELDS if getattr(generation, name) is not None}
    for name, value in defaults.items():
        try:
            check_setting(name, value, model.get_output_embeddings().out_features)
        except (TypeError, ValueError) as error:
            raise ValueError(
                f"{type(model).__name__}'s generation_config.{error}: the runner cannot apply it"
            ) from None
    return defaults


def written_files(is_encoder_decoder: bool) -> list[str]:
    """The names of the files an export writes: `EXPORT_FILES`, but a causal LM's has no encoder."""
    return [name for name in EXPORT_FILES if is_encoder_decoder or name != ENCODER_FILE]


def export_onnx(model, folder: str | Path, exporter: str = "dynamo", overwrite: bool = False) -> Path:
    """Export ``model`` (a generative head, float32, eval mode) into ``folder``.

    Every file is written into a staging folder inside ``folder`` and then renamed into place, the
    manifest last; its ``written`` field lists them.  A previous export's files are replaced (and those
    the new export does not write, such as a causal LM's export replacing an encoder-decoder's
    ``encoder.onnx``, deleted); any other file of the same name as one the export writes is refused
    (`folder_writes.check_replaceable`), before anything is exported, unless ``overwrite``.

    Args:
        model: a head of the package's models or of a registered family (see `graphs.trace_graphs`).
        folder: created if missing.
        exporter: ``"dynamo"`` (``torch.export``, then ``torch.onnx.export(dynamo=True)``), the only one.
        overwrite: replace files of the names in ``EXPORT_FILES`` even when no export wrote them.

    Returns:
        The path of the manifest.
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
    special_tokens, generation = _special_tokens(model), _generation_defaults(model)
    folder = Path(folder)
    names = written_files(model.config.is_encoder_decoder)
    check_replaceable(folder, names, overwrite)
    traced = trace_graphs(model)
    previous = previous_export_files(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with staging_folder(folder) as staging:
        files = _write_graphs(model, traced, staging)
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
            "special_tokens": special_tokens,
            "generation": generation,
            "exported_with": {"talk_hf": __version__, "torch": torch.__version__, "exporter": exporter, "opset": OPSET},
            "written": names,
        }
        for name in runner.RUNNER_FILES:
            shutil.copyfile(Path(runner.__file__).with_name(name), staging / name)
        (staging / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
        check_manifest(manifest, staging / MANIFEST_NAME)  # the runner reads what the export writes
        publish(staging, folder, names)
    for stale in previous & set(EXPORT_FILES) - set(names):
        (folder / stale).unlink(missing_ok=True)
    return folder / MANIFEST_NAME


def _write_graphs(model, traced: TracedGraphs, folder: Path) -> dict:
    """Write the ``traced`` encoder (encoder-decoders) and step, and the beam candidates graph, into
    ``folder``: each graph's file name, by role."""
    files = {"decoder_step": STEP_FILE}
    if traced.encoder is not None:
        _to_onnx(traced.encoder, folder / ENCODER_FILE, traced.names["encoder"])
        files["encoder"] = ENCODER_FILE
    _to_onnx(traced.step, folder / STEP_FILE, traced.names["decoder_step"])
    vocab_size = model.get_output_embeddings().out_features
    onnx.save(candidates_graph(vocab_size, chunk_size(vocab_size), OPSET), folder / CANDIDATES_FILE)
    files[CANDIDATES] = CANDIDATES_FILE
    return files
