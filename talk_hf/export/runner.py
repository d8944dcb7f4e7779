"""Generate from an exported folder with ONNX Runtime and numpy only: greedy and beam search.

This file imports nothing of ``talk_hf`` (the export copies it into the folder as ``runner.py``), so a
serving host needs the folder, ``onnxruntime`` and ``numpy``.  ``OnnxGenerator(folder).generate(ids,
mask, max_new_tokens=...)`` returns what ``model.generate`` returns: for an encoder-decoder the
decoder start token then the new tokens, for a causal LM the prompt then the new tokens, (B, length)
int64, rows that ended padded with ``pad_token_id``.

Decoding follows transformers' ``generate``: greedy takes the argmax of the logits; beam search is
transformers' vectorised beam search (length penalty, ``early_stopping`` True / False / ``"never"``,
``2 * num_beams`` candidates per step); ``min_new_tokens`` forbids the end tokens until that many new
tokens.  No other logits processor is applied (repetition penalties, n-gram blocking, sampling).
Each beam step's log-softmax and ranking over the (rows, vocabulary) logits run in ONNX Runtime
(``beam_candidates.onnx``), numpy the rest over (batch, 2 * num_beams) candidates; a folder exported
without that graph decodes greedily only.
The graphs' float32 logits match PyTorch's to rounding, so tokens differ only where two candidates
tie to within it (an argmax, or beams whose scores agree to the last bits).
A causal LM's prompt runs token by token through the step graph (left padding allowed).  The state
of every layer keeps its shape from step to step; beam search reorders its rows.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort

MANIFEST_NAME = "manifest.json"
FORMAT, FORMAT_VERSION = "talk_hf-onnx", 1
REQUIRED_FIELDS = ("model_type", "is_encoder_decoder", "files", "graphs", "states", "vocab_size", "special_tokens")
CANDIDATES = "beam_candidates"  # the graph role of beam search's candidates (talk_hf.export.beam_graph)


def read_manifest(folder: str | Path) -> dict:
    """The checked manifest of an exported folder; FileNotFoundError / ValueError naming what is wrong."""
    path = Path(folder) / MANIFEST_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: export the model first (python -m talk_hf.export)")
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON: {error}") from None
    found = (manifest.get("format"), manifest.get("format_version")) if isinstance(manifest, dict) else None
    if found != (FORMAT, FORMAT_VERSION):
        raise ValueError(f"{path} is not a {FORMAT} manifest of version {FORMAT_VERSION} (format, version: {found})")
    missing = [field for field in REQUIRED_FIELDS if field not in manifest]
    if missing:
        raise ValueError(f"{path} lacks the fields {missing}")
    for role, name in manifest["files"].items():
        if not (Path(folder) / name).is_file():
            raise FileNotFoundError(f"the {role} graph {Path(folder) / name} named in {path} does not exist")
    return manifest


def _session(path: Path, graph: dict, options: ort.SessionOptions) -> ort.InferenceSession:
    """An ORT CPU session of ``path`` whose input and output names must be the manifest's ``graph``."""
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    found = {"inputs": [x.name for x in session.get_inputs()], "outputs": [x.name for x in session.get_outputs()]}
    for kind, names in found.items():
        if names != graph[kind]:
            raise ValueError(f"{path} has the {kind} {names}, but its manifest names {graph[kind]}")
    return session


class OnnxGenerator:
    """The exported encoder (encoder-decoders) and decoding step of a folder, as ORT sessions.

    Args:
        folder: a folder written by ``talk_hf.export.export_onnx`` (``manifest.json`` and the graphs).
        threads: ORT's intra-op threads (None: ORT's default, one per core).
        optimization: ORT's graph optimisation level, ``"basic"``, ``"extended"`` or ``"all"``.
        spin: let ORT's worker threads spin between calls (ORT's default; lower latency, but each
            keeps a core busy while idle, which slows whatever else runs on it).  Off by default.
    """

    def __init__(self, folder: str | Path, threads: int | None = None, optimization: str = "all", spin: bool = False):
        self.folder = Path(folder)
        self.manifest = read_manifest(folder)
        levels = {"basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}
        if optimization not in levels:
            raise ValueError(f"optimization must be one of {list(levels)}, got {optimization!r}")
        options = ort.SessionOptions()
        options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, levels[optimization])
        if threads is not None:
            options.intra_op_num_threads = threads
        options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
        files, graphs = self.manifest["files"], self.manifest["graphs"]
        self.sessions = {role: _session(self.folder / files[role], graphs[role], options) for role in files}
        self.step_inputs = graphs["decoder_step"]["inputs"]
        self.source_inputs = self.step_inputs[3 + len(self.manifest["states"]) :]
        tokens = self.manifest["special_tokens"]
        eos = tokens.get("eos_token_id")
        self.eos = np.array([] if eos is None else np.atleast_1d(eos), dtype=np.int64)
        self.is_end = np.zeros(self.manifest["vocab_size"], bool)  # (V,): indexing it is ~100x np.isin's speed
        self.is_end[self.eos] = True
        self.pad = tokens.get("pad_token_id")
        if self.pad is None:
            self.pad = int(self.eos[0]) if len(self.eos) else 0

    def new_states(self, batch: int) -> list[np.ndarray]:
        """Zero histories for ``batch`` rows: (batch, history_size, channels) float32 per layer."""
        return [np.zeros((batch, s["history_size"], s["channels"]), np.float32) for s in self.manifest["states"]]

    def encode(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> list[np.ndarray]:
        """Source (B, S) ids and mask -> the step's source inputs, in its order: the encoder's outputs
        of those names (e.g. each layer's cross-attention keys and values) and, as
        ``encoder_attention_mask``, the mask."""
        outputs = self.sessions["encoder"].run(None, {"input_ids": input_ids, "attention_mask": attention_mask})
        named = dict(zip(self.manifest["graphs"]["encoder"]["outputs"], outputs, strict=True))
        named["encoder_attention_mask"] = attention_mask
        return [named[name] for name in self.source_inputs]

    def step(self, ids, positions, token_mask, states, source) -> tuple[np.ndarray, list[np.ndarray]]:
        """One token per row: ids, positions, token_mask (B, 1) int64, the histories and the source's
        inputs (encoder-decoders; empty for an LM), once per source row (B_s rows: the B rows are B_s
        groups of B / B_s consecutive rows, e.g. beams) -> logits (B, V) and the new histories."""
        values = [ids, positions, token_mask, *states, *source]
        logits, *states = self.sessions["decoder_step"].run(None, dict(zip(self.step_inputs, values, strict=True)))
        return logits, states

    def candidates(self, logits: np.ndarray, beam_scores: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Beam search's candidates: the step's (B * beams, V) logits and the (B, beams) running scores ->
        the ``count`` largest ``log_softmax(logits) + beam score`` per batch row (B, count), largest
        first, and their indices ``beam * V + token`` (B, count) int64, equal scores lowest index first."""
        feed = {"logits": logits, "beam_scores": beam_scores, "count": np.array([count], np.int64)}
        scores, indices = self.sessions[CANDIDATES].run(None, feed)
        return scores, indices

    def generate(
        self,
        input_ids,
        attention_mask=None,
        max_new_tokens: int | None = None,
        min_new_tokens: int = 0,
        num_beams: int | None = None,
        length_penalty: float | None = None,
        early_stopping: bool | str | None = None,
    ) -> np.ndarray:
        """Tokens of (B, S) ``input_ids`` (source or prompt) with its (B, S) mask (1 at real tokens).

        The defaults of ``max_new_tokens`` (``max_length`` minus the decoder prompt), ``num_beams``,
        ``length_penalty`` and ``early_stopping`` are the model's generation configuration's.
        """
        ids = np.asarray(input_ids, dtype=np.int64)
        if ids.ndim != 2 or ids.shape[1] == 0:
            raise ValueError(f"input_ids must be (batch, length) with length >= 1, got shape {ids.shape}")
        mask = np.ones_like(ids) if attention_mask is None else np.asarray(attention_mask, dtype=np.int64)
        if mask.shape != ids.shape:
            raise ValueError(f"attention_mask has shape {mask.shape} but input_ids {ids.shape}")
        settings = self.manifest.get("generation", {})
        num_beams = settings.get("num_beams", 1) if num_beams is None else num_beams
        seq2seq = self.manifest["is_encoder_decoder"]
        prompt_length = 1 if seq2seq else ids.shape[1]
        if max_new_tokens is None:
            max_new_tokens = settings.get("max_length", 20) - prompt_length
        if max_new_tokens < 1 or num_beams < 1:
            raise ValueError(f"max_new_tokens and num_beams must be >= 1, got {max_new_tokens} and {num_beams}")
        if num_beams > 1 and CANDIDATES not in self.sessions:
            raise ValueError(
                f"{self.folder} has no {CANDIDATES}.onnx (exported by an older talk_hf): re-export the model "
                f"(python -m talk_hf.export MODEL_DIR {self.folder}) to search with num_beams > 1; greedy decoding "
                "runs from it as it is, and so does beam search with the runner.py exported beside it"
            )
        batch = ids.shape[0]
        if seq2seq:
            source = self.encode(ids, mask)
            prompt = np.full((batch, 1), self.manifest["special_tokens"]["decoder_start_token_id"], np.int64)
            positions = np.zeros((batch, 1), np.int64)
            logits, states = self.step(prompt, positions, np.ones_like(prompt), self.new_states(batch), source)
            seen = np.ones((batch, 1), np.int64)
        else:
            source, prompt, states = [], ids, self.new_states(batch)
            positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0)
            for t in range(ids.shape[1]):
                logits, states = self.step(ids[:, t : t + 1], positions[:, t : t + 1], mask[:, t : t + 1], states, [])
            seen = mask.sum(axis=1, keepdims=True)
        decoding = _Decoding(self, logits, states, source, seen, prompt_length, max_new_tokens, min_new_tokens)
        if num_beams == 1:
            return np.concatenate([prompt, decoding.greedy()], axis=1)
        penalty = settings.get("length_penalty", 1.0) if length_penalty is None else length_penalty
        stopping = settings.get("early_stopping", False) if early_stopping is None else early_stopping
        return decoding.beam_search(prompt, num_beams, penalty, stopping)


class _Decoding:
    """One generate call after the prompt: its first logits (B, V), states, source inputs, and the
    tokens seen per row (B, 1) (the next token's position)."""

    def __init__(self, generator, logits, states, source, seen, prompt_length, max_new, min_new):
        self.generator, self.logits, self.states, self.source = generator, logits, states, source
        self.seen, self.prompt_length, self.max_new, self.min_new = seen, prompt_length, max_new, min_new

    def advance(self, tokens: np.ndarray) -> None:
        """Feed the (B,) ``tokens``: the logits and states of the next step."""
        column = tokens.reshape(-1, 1).astype(np.int64)
        self.logits, self.states = self.generator.step(
            column, self.seen, np.ones_like(column), self.states, self.source
        )
        self.seen = self.seen + 1

    def forbid_end(self, scores: np.ndarray, new_tokens: int) -> np.ndarray:
        """``min_new_tokens``: the end tokens get -inf while fewer new tokens than that were made."""
        if new_tokens < self.min_new and len(self.generator.eos):
            scores[:, self.generator.eos] = -np.inf
        return scores

    def candidates(self, beam_scores: np.ndarray, keep: int, new_tokens: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``keep`` best (B, keep) scores of the step's logits and running (B, beams) ``beam_scores``, and
        their indices ``beam * V + token`` (`OnnxGenerator.candidates`).  While ``min_new_tokens`` forbids
        the end tokens, the graph ranks ``beams * len(eos)`` more, and the end tokens among them are dropped:
        the order of the rest is the order with the end tokens' scores at -inf."""
        generator, vocab = self.generator, self.logits.shape[-1]
        extra = beam_scores.shape[1] * len(generator.eos) if new_tokens < self.min_new else 0
        scores, indices = generator.candidates(self.logits, beam_scores, keep + extra)
        if extra:
            allowed = np.argsort(generator.is_end[indices % vocab], axis=1, kind="stable")[:, :keep]
            scores, indices = np.take_along_axis(scores, allowed, 1), np.take_along_axis(indices, allowed, 1)
        return scores, indices

    def greedy(self) -> np.ndarray:
        """(B, new) argmax tokens; a row that produced an end token continues with padding."""
        is_end, pad = self.generator.is_end, self.generator.pad
        running = np.ones(len(self.logits), dtype=bool)
        tokens = []
        for new in range(self.max_new):
            chosen = np.where(running, self.forbid_end(self.logits, new).argmax(axis=-1), pad)
            tokens.append(chosen)
            running &= ~is_end[chosen]
            if new + 1 == self.max_new or not running.any():
                break
            self.advance(chosen)
        return np.stack(tokens, axis=1)

    def beam_search(self, prompt: np.ndarray, beams: int, length_penalty: float, early_stopping) -> np.ndarray:
        """transformers' ``_beam_search`` (5.x) in numpy, float32 like it: the best finished beam per row."""
        batch, vocab = prompt.shape[0], self.logits.shape[-1]
        self.logits = np.repeat(self.logits, beams, axis=0)
        self.states = [np.repeat(state, beams, axis=0) for state in self.states]
        self.seen = np.repeat(self.seen, beams, axis=0)
        eos, start, max_length = self.generator.eos, self.prompt_length, self.prompt_length + self.max_new
        keep = max(2, 1 + len(eos)) * beams
        fill = self.generator.pad if self.generator.pad else (eos[0] if len(eos) else -1)
        running = np.full((batch, beams, max_length), fill, np.int64)
        running[:, :, :start] = prompt[:, None]
        finished = running.copy()
        running_scores = np.zeros((batch, beams), np.float32)
        running_scores[:, 1:] = -1e9
        scores = np.full((batch, beams), -1e9, np.float32)
        done = np.zeros((batch, beams), bool)
        improvable = np.ones((batch, 1), bool)
        lengths = np.zeros((batch, beams), np.int64)
        top_beams = np.arange(keep) < beams
        for length in range(start, max_length):
            top_scores, order = self.candidates(running_scores, keep, length - start)
            source_beam, token = order // vocab, order % vocab
            top_sequences = np.take_along_axis(running, source_beam[:, :, None], axis=1)
            top_sequences[:, :, length] = token
            hits = self.generator.is_end[token] | (length + 1 >= max_length)
            # the running beams of the next step: the best candidates that did not end
            blocked = top_scores + hits.astype(np.float32) * np.float32(-1e9)
            chosen = _top_k(blocked, beams)
            rows = (np.take_along_axis(source_beam, chosen, axis=1) + np.arange(batch)[:, None] * beams).reshape(-1)
            running = np.take_along_axis(top_sequences, chosen[:, :, None], axis=1)
            running_scores = np.take_along_axis(blocked, chosen, axis=1)
            # the finished beams: merge the candidates that ended among the top ``beams``
            ended = hits & top_beams[None, :]
            final = top_scores / np.float32((length + 1 - start) ** length_penalty)
            final += (done.all(axis=1, keepdims=True) & (early_stopping is True)).astype(np.float32) * np.float32(-1e9)
            final += (~improvable).astype(np.float32) * np.float32(-1e9)
            final += (~ended).astype(np.float32) * np.float32(-1e9)
            merged = np.concatenate([scores, final], axis=1)
            best = _top_k(merged, beams)
            scores = np.take_along_axis(merged, best, axis=1)
            finished = np.take_along_axis(np.concatenate([finished, top_sequences], axis=1), best[:, :, None], axis=1)
            lengths = np.take_along_axis(np.concatenate([lengths, np.full_like(token, length + 1 - start)], 1), best, 1)
            done = np.take_along_axis(np.concatenate([done, ended], axis=1), best, axis=1)
            hypothetical = (max_length if early_stopping == "never" and length_penalty > 0 else length + 1) - start
            best_running = running_scores[:, :1] / np.float32(hypothetical**length_penalty)
            worst_done = np.where(done, scores.min(axis=1, keepdims=True), np.float32(-1e9))
            improvable = improvable & (best_running > worst_done).any(axis=-1, keepdims=True)
            if not improvable.any() or (done.all() and early_stopping is True) or hits.all():
                break
            self.states = [state[rows] for state in self.states]
            self.advance(running[:, :, length].reshape(-1))
        return finished[:, 0, : start + lengths[:, 0].max()]


def _top_k(values: np.ndarray, k: int) -> np.ndarray:
    """(N, M) -> (N, k) indices of the k largest values per row, largest first, ties lowest index first."""
    return np.argsort(-values, axis=1, kind="stable")[:, :k]
