"""Write a model's encoder and decoding step as ONNX files, with a manifest and the runner beside them.

The folder holds ``encoder.onnx`` (encoder-decoders), ``decoder_step.onnx``, ``beam_candidates.onnx``
(beam search's log-softmax and ranking of the step's logits, `beam_graph`), ``manifest.json`` (the
graphs' input and output names, each layer's state shape, the special tokens, the vocabulary size,
the model type, the generation defaults the runner applies, and the files the export wrote),
``runner.py`` and ``runner_checks.py`` (copies of `talk_hf.export.runner` and of its checks:
onnxruntime and numpy only).  Batch and source length are dynamic axes; every state keeps a fixed
(batch, history_size, channels) shape.

Each graph is one file, weights inside (ONNX's protobuf limit: 2 GB a graph).

The graphs come from ``torch.onnx.export(..., dynamo=True)`` (``torch.export``, then onnxscript's
optimiser), opset 18: PyTorch's supported exporter, whose graphs store a tied embedding once.  The
TorchScript exporter (``exporter="torchscript"``, deprecated by PyTorch) exports the same wrappers
faster into graphs of the same speed (benchmarks/README.md, "int8 methods and ONNX exporters").  The
tokens equal ``generate``'s in float32; ``onnxruntime.quantization.quantize_dynamic`` (int8 weights,
applied to the exported files) changes some beams.
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
from .graphs import export_graphs
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
EXPORTERS = ("dynamo", "torchscript")
# Every file an export may write (an encoder-decoder's; a causal LM's has no encoder.onnx).
EXPORT_FILES = (ENCODER_FILE, STEP_FILE, CANDIDATES_FILE, *runner.RUNNER_FILES, MANIFEST_NAME)
# Example sizes to trace with; not 0 or 1, which torch.export would fix as constants.  The step's rows
# are EXAMPLE_BATCH source rows x EXAMPLE_BEAMS (unequal, so that the two batch sizes stay apart).
EXAMPLE_BATCH, EXAMPLE_BEAMS, EXAMPLE_SOURCE_LENGTH = 2, 2, 5


def _graph_names(encoder, step) -> dict:
    """The input and output names of each graph (`export_graphs`' modules describe theirs)."""
    states = [f"state_{i}" for i in range(len(step.state_shapes))]
    graphs = {
        "decoder_step": {
            "inputs": ["input_ids", "positions", "token_mask", *states, *step.source_inputs],
            "outputs": ["logits", *(f"new_{name}" for name in states)],
        },
        CANDIDATES: {"inputs": list(INPUTS), "outputs": list(OUTPUTS)},
    }
    if encoder is not None:
        graphs["encoder"] = {"inputs": ["input_ids", "attention_mask"], "outputs": list(encoder.outputs)}
    return graphs


def _dynamic_axes(graph: dict, source_axes: dict[str, int], role: str) -> dict:
    """Each name's dynamic axes: the batch first (a step's source inputs: ``source_batch``, one row per
    source), and the source length where ``source_axes`` names it."""
    axes = {}
    for name in graph["inputs"] + graph["outputs"]:
        axes[name] = {0: "source_batch" if role == "decoder_step" and name in source_axes else "batch"}
        if name in source_axes:
            axes[name][source_axes[name]] = "source_length"
    return axes


def _export(module, args: tuple, path: Path, graph: dict, role: str, source_axes: dict[str, int], exporter: str):
    """Export ``module(*args)`` (``role``: "encoder" or "decoder_step") to ``path`` with ``graph``'s names,
    a dynamic batch and the source length dynamic on the axes ``source_axes`` gives."""
    axes = _dynamic_axes(graph, source_axes, role)
    if exporter == "torchscript":
        dynamic = {"dynamic_axes": axes}
    else:
        dims = {name: torch.export.Dim(name, min=1) for name in ("batch", "source_batch", "source_length")}
        shapes = [{axis: dims[dim] for axis, dim in axes[name].items()} for name in graph["inputs"]]
        if role == "decoder_step":  # forward(input_ids, positions, token_mask, *rest)
            shapes = [*shapes[:3], tuple(shapes[3:])]
        dynamic = {"dynamic_shapes": tuple(shapes), "verbose": False, "external_data": False}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (DeprecationWarning, UserWarning, FutureWarning, torch.jit.TracerWarning))
        torch.onnx.export(
            module,
            args,
            str(path),
            input_names=graph["inputs"],
            output_names=graph["outputs"],
            opset_version=OPSET,
            dynamo=exporter == "dynamo",
            **dynamic,
        )


def _special_tokens(model) -> dict:
    config, generation = model.config, model.generation_config
    eos = generation.eos_token_id if generation.eos_token_id is not None else config.eos_token_id
    pad = generation.pad_token_id if generation.pad_token_id is not None else config.pad_token_id
    tokens = {"eos_token_id": eos, "pad_token_id": pad, "bos_token_id": config.bos_token_id}
    if config.is_encoder_decoder:
        start = generation.decoder_start_token_id
        tokens["decoder_start_token_id"] = config.decoder_start_token_id if start is None else start
        if tokens["decoder_start_token_id"] is None:
            raise ValueError(f"{type(model).__name__}'s configuration has no decoder_start_token_id: set one to export")
    return tokens


def _generation_defaults(model) -> dict:
    """The settings of ``GENERATION_FIELDS`` that the model's generation configuration sets, checked as
    the runner checks them (a ValueError naming the field before anything is exported)."""
    generation = model.generation_config
    defaults = {name: getattr(generation, name) for name in GENERATION_FIELDS if getattr(generation, name) is not None}
    for name, value in defaults.items():
        try:
            check_setting(name, value, model.lm_head.out_features)
        except (TypeError, ValueError) as error:
            raise ValueError(
                f"{type(model).__name__}'s generation_config.{error}: the runner cannot apply it"
            ) from None
    return defaults


def written_files(is_encoder_decoder: bool) -> list[str]:
    """The names of the files an export writes: `EXPORT_FILES`, but a causal LM's has no encoder."""
    return [name for name in EXPORT_FILES if is_encoder_decoder or name != ENCODER_FILE]


def export_onnx(model, folder: str | Path, exporter: str = "dynamo", overwrite: bool = False) -> Path:
    """Export ``model`` (a TaLK / DynamicConv / LightConv / SliceNet head, float32, eval mode) into ``folder``.

    Every file is written into a staging folder inside ``folder`` and then renamed into place, the
    manifest last; its ``written`` field lists them.  A previous export's files are replaced (and those
    the new export does not write, such as a causal LM's export replacing an encoder-decoder's
    ``encoder.onnx``, deleted); any other file of the same name as one the export writes is refused
    (`folder_writes.check_replaceable`), before anything is exported, unless ``overwrite``.

    Args:
        model: a `ConvForConditionalGeneration` or `ConvForCausalLM` (see `export_graphs`).
        folder: created if missing.
        exporter: ``"dynamo"`` (``torch.onnx.export(dynamo=True)``) or ``"torchscript"``.
        overwrite: replace files of the names in ``EXPORT_FILES`` even when no export wrote them.

    Returns:
        The path of the manifest.
    """
    refuse_if_int8(model, "export_onnx", "export the floating-point model, then quantize_exported (--int8)")
    if exporter not in EXPORTERS:
        raise ValueError(f"exporter must be one of {EXPORTERS}, got {exporter!r}")
    encoder, step = export_graphs(model)
    dtypes = {parameter.dtype for parameter in model.parameters()}
    if dtypes != {torch.float32}:
        raise ValueError(f"export a float32 model; {type(model).__name__} has parameters of {sorted(map(str, dtypes))}")
    special_tokens, generation = _special_tokens(model), _generation_defaults(model)
    folder = Path(folder)
    names = written_files(model.config.is_encoder_decoder)
    check_replaceable(folder, names, overwrite)
    previous = previous_export_files(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with staging_folder(folder) as staging:
        files, graphs = _write_graphs(model, encoder, step, staging, exporter)
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
                for name, (size, channels) in zip(
                    graphs["decoder_step"]["inputs"][3 : 3 + len(step.state_shapes)], step.state_shapes, strict=True
                )
            ],
            "vocab_size": model.lm_head.out_features,
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


def _write_graphs(model, encoder, step, folder: Path, exporter: str) -> tuple[dict, dict]:
    """Export the ``encoder`` (None for a causal LM) and ``step`` modules of `export_graphs` and the beam
    candidates graph into ``folder``; each graph's file name, and its input and output names, by role."""
    graphs = _graph_names(encoder, step)
    batch, rows, device = EXAMPLE_BATCH, EXAMPLE_BATCH * EXAMPLE_BEAMS, model.device
    ids = torch.full((rows, 1), model.config.bos_token_id or 0, device=device)
    ones = torch.ones_like(ids)
    histories = [torch.zeros(rows, size, channels, device=device) for size, channels in step.state_shapes]
    step_args = (ids, ids * 0, ones, *histories)
    files = {"decoder_step": STEP_FILE}
    with torch.no_grad():
        if encoder is not None:
            source = ids[:batch].expand(batch, EXAMPLE_SOURCE_LENGTH).contiguous()
            source_mask = torch.ones_like(source)
            encoder_axes = {"input_ids": 1, "attention_mask": 1, **encoder.outputs}
            example = (source, source_mask)
            _export(encoder, example, folder / ENCODER_FILE, graphs["encoder"], "encoder", encoder_axes, exporter)
            named = dict(zip(encoder.outputs, encoder(*example), strict=True))
            named["encoder_attention_mask"] = source_mask
            step_args += tuple(named[name] for name in step.source_inputs)
            files["encoder"] = ENCODER_FILE
        step_graph = graphs["decoder_step"]
        _export(step, step_args, folder / STEP_FILE, step_graph, "decoder_step", step.source_inputs, exporter)
    vocab_size = model.lm_head.out_features
    onnx.save(candidates_graph(vocab_size, chunk_size(vocab_size), OPSET), folder / CANDIDATES_FILE)
    files[CANDIDATES] = CANDIDATES_FILE
    return files, graphs
