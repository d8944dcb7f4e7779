"""Generate from an exported folder with ONNX Runtime and numpy only: greedy and beam search.

This file imports nothing of ``talk_hf`` (the export copies it into the folder as ``runner.py``, and
its checks of the manifest and of each request as ``runner_checks.py`` beside it), so a serving host
needs the folder, ``onnxruntime`` and ``numpy``.  ``OnnxGenerator(folder).generate(ids,
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

from pathlib import Path

import numpy as np
import onnxruntime as ort

if __package__:  # talk_hf.export.runner
    from . import runner_checks as checks
else:  # the copy in an exported folder, imported as the top-level module ``runner``: its checks lie beside it
    import importlib.util

    _spec = importlib.util.spec_from_file_location("runner_checks", Path(__file__).with_name("runner_checks.py"))
    checks = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(checks)

CANDIDATES = checks.CANDIDATES
# The files of the runner that the export copies into the folder.
RUNNER_FILES = ("runner.py", "runner_checks.py")


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
        self.manifest = checks.read_manifest(folder)
        if not isinstance(spin, bool):
            raise TypeError(f"spin must be True or False, got {spin!r}")
        levels = {"basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}
        if optimization not in levels:
            raise ValueError(f"optimization must be one of {list(levels)}, got {optimization!r}")
        options = ort.SessionOptions()
        options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, levels[optimization])
        if threads is not None:
            options.intra_op_num_threads = checks.check_integer("threads", threads, 1)
        options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
        files, graphs = self.manifest["files"], self.manifest["graphs"]
        self.sessions = {
            role: _session(checks.confined_file(self.folder, f"files.{role}", name), graphs[role], options)
            for role, name in files.items()
        }
        checks.check_graph_shapes(self.manifest, self.sessions, self.folder)
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
        inputs (encoder-decoders; empty for an LM), one row per step row (beam search repeats each
        source row for its beams) -> logits (B, V) and the new histories."""
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
        ``length_penalty`` and ``early_stopping`` are the model's generation configuration's.  The inputs
        and settings are refused as ``generate`` refuses them (`runner_checks.checked_inputs`,
        `checked_settings`), before anything runs.
        """
        ids, mask = checks.checked_inputs(input_ids, attention_mask, self.manifest["vocab_size"])
        seq2seq = self.manifest["is_encoder_decoder"]
        prompt_length = 1 if seq2seq else ids.shape[1]
        request = dict(max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens, num_beams=num_beams)
        request.update(length_penalty=length_penalty, early_stopping=early_stopping)
        settings = checks.checked_settings(
            request, self.manifest.get("generation", {}), self.manifest["vocab_size"], prompt_length
        )
        num_beams = settings["num_beams"]
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
        lengths = (prompt_length, settings["max_new_tokens"], settings["min_new_tokens"])
        decoding = _Decoding(self, logits, states, source, seen, *lengths)
        if num_beams == 1:
            return np.concatenate([prompt, decoding.greedy()], axis=1)
        return decoding.beam_search(prompt, num_beams, settings["length_penalty"], settings["early_stopping"])


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
        self.source = [np.repeat(source, beams, axis=0) for source in self.source]  # once per request
        eos, start, max_length = self.generator.eos, self.prompt_length, self.prompt_length + self.max_new
        keep = max(2, 1 + len(eos)) * beams
        fill = self.generator.pad if self.generator.pad else (eos[0] if len(eos) else -1)
        running = np.repeat(
            prompt[:, None].astype(np.int64), beams, axis=1
        )  # (batch, beams, length): grows a column a step
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
            top_sequences = np.concatenate(
                [np.take_along_axis(running, source_beam[:, :, None], 1), token[:, :, None]], 2
            )
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
            finished = np.concatenate([finished, np.full((batch, beams, 1), fill, np.int64)], axis=2)
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
