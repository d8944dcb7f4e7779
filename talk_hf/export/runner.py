"""Generate from an exported folder with ONNX Runtime and numpy only, as ``model.generate`` does.

This file imports nothing of ``talk_hf`` (the export copies it into the folder as ``runner.py``, with
the files of `RUNNER_FILES` beside it: its checks of the manifest, the loading of its graphs, its checks
of each request's arrays, its generation settings and their resolution, its logits processors and
sampling, its decoding loops and their steps on bound buffers), so a serving host needs the folder,
``onnxruntime`` and ``numpy``.  ``OnnxGenerator(folder).generate(ids, mask, max_new_tokens=...)``
returns what ``model.generate`` returns: for an encoder-decoder the decoder start token then the new
tokens, for a causal LM the prompt then the new tokens, (B, length) int64, rows that ended padded with
``pad_token_id``.

Decoding follows transformers' ``generate`` with the model's generation configuration (the manifest's
``generation`` defaults) under the request's settings: greedy search, sampling (``do_sample``, seeded
by ``seed``), beam search and beam sampling, with the logits processors of `runner_settings.APPLIED`
applied in generate's order (`runner_logits`) and lengths counted as generate counts them
(`runner_request`).  A setting of generate's that the runner does not apply is refused, naming it
(`runner_settings.NOT_APPLIED`).
The graphs' float32 logits match PyTorch's to rounding, so greedy and beam tokens differ from
generate's only where two candidates tie to within it; sampled tokens follow generate's distribution
with numpy's random numbers, not torch's.
A causal LM's prompt runs in one call of its prompt graph (left padding allowed; token by token
through the step graph in a folder exported without one).  The state of every layer keeps its shape
from step to step; beam search reorders its rows.
"""

from __future__ import annotations

from os import PathLike
from pathlib import Path

import numpy as np

# The files of the runner that the export copies into the folder.
RUNNER_FILES = (
    "runner.py",
    "runner_checks.py",
    "runner_sessions.py",
    "runner_inputs.py",
    "runner_settings.py",
    "runner_request.py",
    "runner_logits.py",
    "runner_sampling.py",
    "runner_decoding.py",
    "runner_steps.py",
)

if __package__:  # talk_hf.export.runner
    from . import runner_checks as checks
    from . import (
        runner_decoding,
        runner_inputs,
        runner_logits,
        runner_request,
        runner_sampling,
        runner_sessions,
        runner_settings,
        runner_steps,
    )
else:  # the copy in an exported folder, imported as the top-level module ``runner``
    import hashlib
    import importlib
    import importlib.machinery
    import importlib.util
    import sys

    def _folder_package() -> str:
        """A package of this file's folder (named after its path), through which the files beside it,
        which import each other relatively, are imported."""
        folder = Path(__file__).resolve().parent
        name = "_talk_hf_runner_" + hashlib.sha256(str(folder).encode()).hexdigest()[:16]
        if name not in sys.modules:
            spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
            spec.submodule_search_locations = [str(folder)]
            sys.modules[name] = importlib.util.module_from_spec(spec)
        return name

    _missing = [name for name in RUNNER_FILES if not Path(__file__).with_name(name).is_file()]
    if _missing:  # checked before any import: a file that one of the others imports would be named by neither
        raise ImportError(
            f"{Path(__file__).parent} lacks {_missing}: runner.py runs with the files the export writes beside it "
            f"({', '.join(RUNNER_FILES)}); copy the whole exported folder"
        )

    def _beside(name: str):
        """The runner's file ``name``.py beside this one."""
        return importlib.import_module(f"{_folder_package()}.{name}")

    checks, runner_decoding = _beside("runner_checks"), _beside("runner_decoding")
    runner_logits, runner_settings = _beside("runner_logits"), _beside("runner_settings")
    runner_inputs, runner_steps = _beside("runner_inputs"), _beside("runner_steps")
    runner_request, runner_sampling = _beside("runner_request"), _beside("runner_sampling")
    runner_sessions = _beside("runner_sessions")

CANDIDATES, PROMPT = checks.CANDIDATES, checks.PROMPT


class OnnxGenerator:
    """The exported encoder (encoder-decoders) and decoding step of a folder, as ORT sessions.

    Args:
        folder: a folder written by ``talk_hf.export.export_onnx`` (``manifest.json`` and the graphs).
        threads: ORT's intra-op threads (None: ORT's default, one per core).
        optimization: ORT's graph optimisation level, ``"basic"``, ``"extended"`` or ``"all"``.
        spin: let ORT's worker threads spin between calls (ORT's default; lower latency, but each
            keeps a core busy while idle, which slows whatever else runs on it).  Off by default.
        check_generation_config: refuse, here, a folder whose generation_config.json is not the one its
            manifest's generation settings come from (`runner_checks.check_generation_config`); False for a
            caller that decodes with that file itself and uses the sessions only (talk_hf.onnx's models):
            `generate` then refuses it.
    """

    def __init__(
        self,
        folder: str | Path,
        threads: int | None = None,
        optimization: str = "all",
        spin: bool = False,
        *,
        check_generation_config: bool = True,
    ):
        if not isinstance(folder, (str, PathLike)):
            raise TypeError(
                f"folder must be the path of an exported folder (a str or Path), got {type(folder).__name__}"
            )
        self.folder = Path(folder)
        self.manifest = checks.read_manifest(folder)
        self.generation_config_checked = check_generation_config
        if check_generation_config:
            checks.check_generation_config(folder, self.manifest)
        self.defaults = runner_request.checked_defaults(self.manifest)  # generate's, checked once
        self.sessions = runner_sessions.load_sessions(self.folder, self.manifest, threads, optimization, spin)
        self.step_inputs = self.manifest["graphs"]["decoder_step"]["inputs"]
        self.source_inputs = self.step_inputs[3 + len(self.manifest["states"]) :]
        states = [state["name"] for state in self.manifest["states"]]
        step = dict(ids="input_ids", positions="positions", token_mask="token_mask", states=states)
        step["source"] = self.source_inputs
        # each graph's input of token ids and the vocabulary they lie in (a causal LM's prompt: its only one)
        vocab, source_vocab = self.manifest["vocab_size"], checks.source_vocab_size(self.manifest)
        grouped = ("input_ids", "encoder_attention_mask") if self.source_inputs else None
        self._step_inputs = runner_inputs.GraphInputs(
            self.sessions["decoder_step"], "OnnxGenerator.step", step, {"input_ids": vocab}, grouped
        )
        self._step_feed = self._step_inputs.feed
        source = dict(input_ids="input_ids", attention_mask="attention_mask")
        self._encode_feed = self._feed("encoder", "OnnxGenerator.encode", source, {"input_ids": source_vocab})
        self._prompt_feed = self._feed(PROMPT, "OnnxGenerator.read_prompt", source, {"input_ids": source_vocab})
        scored = dict(logits="logits", beam_scores="beam_scores", count="count")
        self._candidates_feed = self._feed(CANDIDATES, "OnnxGenerator.candidates", scored, {})
        tokens = self.manifest["special_tokens"]
        eos = tokens.get("eos_token_id")
        self.eos = np.array([] if eos is None else np.atleast_1d(eos), dtype=np.int64)
        self.is_end = np.zeros(self.manifest["vocab_size"], bool)  # (V,): indexing it is ~100x np.isin's speed
        self.is_end[self.eos] = True
        self.pad = tokens.get("pad_token_id")
        if self.pad is None:
            self.pad = int(self.eos[0]) if len(self.eos) else 0

    def _feed(self, role: str, call: str, parameters: dict, token_ids: dict):
        """The checked feed of the graph ``role`` (`runner_inputs.GraphInputs.feed`), None for a graph the folder lacks."""
        session = self.sessions.get(role)
        return session and runner_inputs.GraphInputs(session, call, parameters, token_ids).feed

    def new_states(self, batch: int) -> list[np.ndarray]:
        """Zero histories for ``batch`` (an int >= 1) rows: (batch, history_size, channels) float32 per layer."""
        batch = runner_settings.check_integer("OnnxGenerator.new_states: batch", batch, 1)
        return [np.zeros((batch, s["history_size"], s["channels"]), np.float32) for s in self.manifest["states"]]

    def encode(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> list[np.ndarray]:
        """Source (B, S) ids and mask -> the step's source inputs, in its order: the encoder's outputs
        of those names (e.g. each layer's cross-attention keys and values) and, as
        ``encoder_attention_mask``, the mask.  Arrays of another dtype, rank or shape, and ids outside the
        vocabulary, are refused, naming them."""
        if self._encode_feed is None:
            raise ValueError(f"OnnxGenerator.encode: {self.folder} holds a causal LM, which has no encoder")
        outputs = self.sessions["encoder"].run(None, self._encode_feed(input_ids, attention_mask))
        named = dict(zip(self.manifest["graphs"]["encoder"]["outputs"], outputs, strict=True))
        named["encoder_attention_mask"] = attention_mask
        return [named[name] for name in self.source_inputs]

    def step(self, ids, positions, token_mask, states, source) -> tuple[np.ndarray, list[np.ndarray]]:
        """One token per row: ids, positions, token_mask (B, 1) int64, the histories and the source's
        inputs (encoder-decoders; empty for an LM), one row per source, each serving n consecutive step
        rows (B = sources x n: n = 1, or the beams of each sentence) -> logits (B, V) and the new
        histories.  Arrays of another dtype, rank or shape, rows that differ in number (step rows not a
        multiple of the source's), another count of states or source arrays, or ids outside the
        vocabulary are refused, naming them."""
        feed = self._step_feed(ids, positions, token_mask, states, source)
        logits, *states = self.sessions["decoder_step"].run(None, feed)
        return _by_row(logits), states

    def bind_steps(self, states: list[np.ndarray], source: list[np.ndarray]) -> runner_steps.BoundSteps:
        """A request's steps from ``states`` and ``source`` (as `step` takes them; checked here, once) on
        buffers of their own, reused from step to step (`runner_steps.BoundSteps`: its ``step`` and, for
        beam search, ``reorder``)."""
        session = self.sessions["decoder_step"]
        return runner_steps.BoundSteps(session, self._step_inputs, self.manifest["vocab_size"], states, source)

    def read_prompt(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        """A causal LM's (B, T) prompt ids and mask (int64; 0 at left padding) -> the logits (B, V) after
        it and each layer's history: one call of the prompt graph, or, in a folder exported without
        it, one step per prompt token.  Arrays of another dtype or rank, or of two shapes, and ids outside the
        vocabulary, are refused, naming them."""
        if self._prompt_feed:
            logits, *states = self.sessions[PROMPT].run(None, self._prompt_feed(input_ids, attention_mask))
            return _by_row(logits), states
        if self._encode_feed:
            raise ValueError(
                f"OnnxGenerator.read_prompt: {self.folder} holds an encoder-decoder, whose prompt is its source: encode it"
            )
        states, positions = self.new_states(input_ids.shape[0]), np.maximum(np.cumsum(attention_mask, axis=1) - 1, 0)
        for t in range(input_ids.shape[1]):
            token = slice(t, t + 1)
            logits, states = self.step(input_ids[:, token], positions[:, token], attention_mask[:, token], states, [])
        return logits, states

    def candidates(self, logits: np.ndarray, beam_scores: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Beam search's candidates: the step's (B * beams, V) logits and the (B, beams) running scores ->
        the ``count`` largest ``log_softmax(logits) + beam score`` per batch row (B, count), largest
        first, and their indices ``beam * V + token`` (B, count) int64, equal scores lowest index first.

        Raises:
            ValueError: logits not a (rows, V) float32 array (`step`'s), beam_scores not a (B, beams) float32
                array with B, beams >= 1 and B * beams == rows, count not in [1, beams * V], or no candidates
                graph in the folder.
            TypeError: count not an int.
        """
        call = "OnnxGenerator.candidates"
        if self._candidates_feed is None:
            raise self._no_candidates_graph(f"{call}: ")
        feed = self._candidates_feed(logits, beam_scores, np.ones(1, np.int64))  # the count: checked below
        (batch, beams), vocab = beam_scores.shape, logits.shape[1]
        if batch < 1 or beams < 1:  # no candidate to rank: ONNX Runtime's Reshape fails, or the count's range is empty
            raise ValueError(
                f"{call}: beam_scores must be (batch, beams) with batch >= 1 and beams >= 1, got shape {beam_scores.shape}"
            )
        if len(logits) != batch * beams:
            raise ValueError(
                f"{call}: logits has {len(logits)} rows, but beam_scores of shape {beam_scores.shape} needs "
                f"batch * beams = {batch * beams} of them: one row per beam, the beams of each batch row together"
            )
        count = runner_settings.check_integer(f"{call}: count", count, 1, beams * vocab, " (beams * vocab_size)")
        feed["count"] = np.array([count], np.int64)
        scores, indices = self.sessions[CANDIDATES].run(None, feed)
        return scores, indices

    def _no_candidates_graph(self, where: str = "") -> ValueError:
        """The error for beam search in a folder exported without the candidates graph."""
        return ValueError(
            f"{where}{self.folder} has no {CANDIDATES}.onnx (exported by an older talk_hf): re-export the model "
            f"(python -m talk_hf.export MODEL_DIR {self.folder}) to search with num_beams > 1; greedy decoding "
            "runs from it as it is, and so does beam search with the runner.py exported beside it"
        )

    def generate(self, input_ids, attention_mask=None, *, seed=None, **settings) -> np.ndarray:
        """Tokens of (B, S) ``input_ids`` (source or prompt) with its (B, S) mask (1 at real tokens).

        ``settings`` are ``generate``'s (`runner_settings.APPLIED`: ``max_new_tokens``, ``max_length``,
        ``min_new_tokens``, ``min_length``, ``num_beams``, ``do_sample``, ``length_penalty``,
        ``early_stopping``, ``repetition_penalty``, ``no_repeat_ngram_size``, ``bad_words_ids``,
        ``forced_bos_token_id``, ``forced_eos_token_id``, ``suppress_tokens``, ``begin_suppress_tokens``,
        ``temperature``, ``top_k``, ``top_p``); one left out (or None) is the manifest's (generate's default
        for the model).  ``seed`` (an int >= 0 or a ``numpy.random.Generator``; None: fresh entropy) seeds
        sampling.  The inputs and settings are refused as ``generate`` refuses them, and a setting the
        runner does not apply or that the request's strategy would not use is refused by name
        (`runner_inputs.checked_inputs`, `runner_request.resolved_settings`), before anything runs.
        """
        if not self.generation_config_checked:
            checks.check_generation_config(self.folder, self.manifest)
        ids, mask = runner_inputs.checked_inputs(input_ids, attention_mask, checks.source_vocab_size(self.manifest))
        seq2seq = self.manifest["is_encoder_decoder"]
        prompt_length = 1 if seq2seq else ids.shape[1]
        vocab, default_length = self.manifest["vocab_size"], self.manifest[runner_settings.DEFAULT_LENGTH]
        settings = runner_request.resolved_settings(settings, self.defaults, default_length, vocab, prompt_length)
        rng = runner_sampling.sampling_generator(seed, settings["do_sample"])
        beams = settings["num_beams"]
        if beams > 1 and CANDIDATES not in self.sessions:
            raise self._no_candidates_graph()
        batch = ids.shape[0]
        if seq2seq:
            source = self.encode(ids, mask)
            prompt = np.full((batch, 1), self.manifest["special_tokens"]["decoder_start_token_id"], np.int64)
            positions = np.zeros((batch, 1), np.int64)
            logits, states = self.step(prompt, positions, np.ones_like(prompt), self.new_states(batch), source)
            seen, padding = np.ones((batch, 1), np.int64), np.zeros(batch, np.int64)
        else:
            source, prompt = [], ids
            logits, states = self.read_prompt(ids, mask)
            seen, padding = mask.sum(axis=1, keepdims=True), np.argmax(mask != 0, axis=1)
        processors = runner_logits.LogitsProcessors(settings, self.eos, prompt_length, np.repeat(padding, beams))
        decoding = runner_decoding.Decoding(self, logits, states, source, seen, prompt, settings, processors, rng)
        return decoding.greedy() if beams == 1 else decoding.beam_search()


def _by_row(logits: np.ndarray) -> np.ndarray:
    """A graph's (B, 1, V) logits output (the LM head's own) as a (B, V) view."""
    return logits[:, 0]
