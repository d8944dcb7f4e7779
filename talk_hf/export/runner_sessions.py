"""The runner's ONNX Runtime sessions of an exported folder: loading its graphs and checking them against
its manifest.

Copied beside ``runner.py`` into every exported folder (ONNX Runtime and the runner's files beside it
only).  `load_sessions` opens each graph the manifest's ``files`` names as an ONNX Runtime CPU session
with the caller's threads, optimisation level and spinning, and refuses, naming the file or the
manifest field, before anything runs:

* a file ONNX Runtime does not load, or whose input and output names are not the manifest's (`_session`);
* `check_graph_shapes`: graphs that do not declare the manifest's state shapes and vocabulary, or
  logits of a shape the runner does not read;
* `check_export_id`: a graph of another export than the one that wrote the manifest.
"""

from __future__ import annotations

from pathlib import Path

import onnxruntime as ort

from .runner_checks import EXPORT_ID, MANIFEST_NAME, PROMPT, Field, confined_file
from .runner_settings import check_integer, is_int

_STATE = ort.capi.onnxruntime_pybind11_state  # ONNX Runtime's errors of a file it cannot load as a graph
_LOAD_ERRORS = (_STATE.Fail, _STATE.InvalidArgument, _STATE.InvalidGraph, _STATE.InvalidProtobuf, _STATE.NoSuchFile)
# ``optimization`` -> ONNX Runtime's graph optimisation level.
LEVELS = {"basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}
# ONNX Runtime fusions the sessions leave out: their CPU kernel is slower than the nodes they replace.
# SkipLayerNormFusion makes Add + LayerNormalization one com.microsoft SkipLayerNormalization, whose float
# kernel walks each row in scalar loops (a serial sum, a division per element): about 1.6 us a row at
# width 256 against 0.25 us unfused, so 0.26 ms instead of 0.04 ms for each layer norm of a beam step's
# 160 rows (one thread, ONNX Runtime 1.32), and as much of an encoder's (batch x source length) rows.
DISABLED_FUSIONS = ("SkipLayerNormFusion",)


def load_sessions(folder: Path, manifest: dict, threads: int | None, optimization: str, spin: bool) -> dict:
    """{role: ONNX Runtime CPU session} of each graph of ``folder``'s (checked) ``manifest``, checked
    against it (`check_graph_shapes`, `check_export_id`).  ``threads``: intra-op threads (None: ONNX
    Runtime's default); ``optimization``: a key of `LEVELS`; ``spin``: let the worker threads spin
    between calls.  TypeError / ValueError naming the argument, the file or the manifest field."""
    options = session_options(threads, optimization, spin)
    files, graphs = manifest["files"], manifest["graphs"]
    sessions = {
        role: _session(confined_file(folder, f"files.{role}", name), role, graphs[role], options)
        for role, name in files.items()
    }
    check_graph_shapes(manifest, sessions, folder)
    check_export_id(manifest, sessions, folder)
    return sessions


def session_options(threads: int | None, optimization: str, spin: bool) -> ort.SessionOptions:
    """ONNX Runtime's options for every session of a folder (see `load_sessions` for the arguments), with
    `DISABLED_FUSIONS` left out; TypeError / ValueError naming a bad argument."""
    if not isinstance(spin, bool):
        raise TypeError(f"spin must be True or False, got {spin!r}")
    if optimization not in LEVELS:
        raise ValueError(f"optimization must be one of {list(LEVELS)}, got {optimization!r}")
    options = ort.SessionOptions()
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, LEVELS[optimization])
    if threads is not None:
        options.intra_op_num_threads = check_integer("threads", threads, 1)
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    options.add_session_config_entry("optimization.disable_specified_optimizers", ",".join(DISABLED_FUSIONS))
    return options


def _session(path: Path, role: str, graph: dict, options: ort.SessionOptions) -> ort.InferenceSession:
    """An ORT CPU session of ``path`` (the manifest's ``files.<role>``) whose input and output names must be
    the manifest's ``graph``; ValueError naming a file ONNX Runtime does not load (damaged, not a graph, or
    saved by another tool with ONNX external data that is not beside it: an export writes none)."""
    try:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except _LOAD_ERRORS as error:
        raise ValueError(
            f"{path}, named by {path.with_name(MANIFEST_NAME)} field files.{role}, is not an ONNX graph that "
            f"ONNX Runtime loads (damaged, truncated, or missing its external data?): export the model again ({error})"
        ) from None
    found = {"inputs": [x.name for x in session.get_inputs()], "outputs": [x.name for x in session.get_outputs()]}
    for kind, names in found.items():
        if names != graph[kind]:
            raise ValueError(f"{path} has the {kind} {names}, but its manifest names {graph[kind]}")
    return session


def check_graph_shapes(manifest: dict, sessions: dict, folder: Path) -> None:
    """The loaded step graph declares each state input as the manifest's (batch, history_size, channels)
    and logits of the manifest's vocabulary size, and the step and prompt graphs logits (batch, 1, vocab)
    (``sessions``: role -> ONNX Runtime session)."""
    path = Path(folder) / MANIFEST_NAME
    declared = {x.name: x.shape for x in sessions["decoder_step"].get_inputs()}
    for i, state in enumerate(manifest["states"]):
        found = declared[state["name"]][1:]
        if found != [state["history_size"], state["channels"]]:
            expected = f"the step graph's history_size and channels of {state['name']}, {found}"
            raise Field(path, f"states[{i}]").error(expected, state)
    logits = sessions["decoder_step"].get_outputs()[0].shape
    if is_int(logits[-1]) and logits[-1] != manifest["vocab_size"]:
        raise Field(path, "vocab_size").error(f"the step graph's logits size {logits[-1]}", manifest["vocab_size"])
    for role in ("decoder_step", PROMPT):
        shape = sessions[role].get_outputs()[0].shape if role in sessions else [0, 1, 0]
        if len(shape) != 3 or shape[1] != 1:
            raise ValueError(
                f"{Path(folder) / manifest['files'][role]} gives logits of shape {shape}, but the runner reads "
                "(batch, 1, vocab): export the model again"
            )


def check_export_id(manifest: dict, sessions: dict, folder: Path) -> None:
    """Each loaded graph (``sessions``: role -> ONNX Runtime session) carries the manifest's ``export_id`` in its
    metadata: a graph copied in from another export of the same shapes is refused, naming its file."""
    for role, session in sessions.items() if EXPORT_ID in manifest else ():
        found = session.get_modelmeta().custom_metadata_map.get(EXPORT_ID)
        if found != manifest[EXPORT_ID]:
            raise ValueError(
                f"{Path(folder) / manifest['files'][role]} is not a graph of the export that wrote "
                f"{Path(folder) / MANIFEST_NAME} (its {EXPORT_ID} {found!r}, the manifest's {manifest[EXPORT_ID]!r}): "
                f"the folder mixes two exports' files; export the model again"
            )
