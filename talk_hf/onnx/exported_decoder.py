"""An exported folder's decoder graphs, run on the package's own generation cache.

`ExportedDecoder` takes new tokens and the model's `ConvCache` (the one ``generate`` keeps between
forward calls, so beam search's ``reorder_cache`` and every other cache operation act on it unchanged)
and leaves that cache as the model's own forward would: each layer's window the graph's new state
(the output tensor ONNX Runtime wrote, `BoundGraph`, taken as it is: no copy), the token counts moved
on.  A causal LM's prompt on a new cache runs ``decoder_prompt.onnx`` in one call; every other token
runs ``decoder_step.onnx``, one call per token (an encoder-decoder's first token, a prompt that goes on
from a cache, a folder exported without the prompt graph).  Beam search's reordering of the cache
(`ExportedDecoder.reorder`) gathers the windows into the step buffers the next step reads.
"""

from __future__ import annotations

import weakref

import torch

from ..cache import ConvCache
from ..export.runner import OnnxGenerator
from ..export.runner_checks import PROMPT, STEP_LEADING_INPUTS
from .bound_graph import BoundGraph
from .step_buffers import StepBuffers

# The step inputs new at every step, copied into a binding's buffers: the token ids, then their mask.
STAGED_INPUTS = (STEP_LEADING_INPUTS[0], STEP_LEADING_INPUTS[2])


class ExportedDecoder:
    """The prompt (causal LMs) and step graphs of an exported folder.

    Args:
        generator: the folder's runner (its checked manifest and its ONNX Runtime sessions).
    """

    def __init__(self, generator: OnnxGenerator):
        manifest = generator.manifest
        files, step = manifest["files"], manifest["graphs"]["decoder_step"]
        self.folder = generator.folder
        self.step = BoundGraph(generator.sessions["decoder_step"], files["decoder_step"])
        has_prompt = PROMPT in generator.sessions
        self.prompt = BoundGraph(generator.sessions[PROMPT], files[PROMPT]) if has_prompt else None
        self.state_shapes = [(state["history_size"], state["channels"]) for state in manifest["states"]]
        count = len(STEP_LEADING_INPUTS) + len(self.state_shapes)
        self.state_names = step["inputs"][len(STEP_LEADING_INPUTS) : count]
        self.source_names = step["inputs"][count:]  # an encoder-decoder's: what a step reads of the source
        self.logits_name, *self.window_names = step["outputs"]
        self.vocab_size = manifest["vocab_size"]
        self.history_sizes = [size for size, _ in self.state_shapes]
        self._ones = torch.ones(0, 0, dtype=torch.long)  # the last all-ones token mask made (`_real_tokens`)
        self._step_buffers: weakref.WeakKeyDictionary[ConvCache, StepBuffers] = weakref.WeakKeyDictionary()

    def new_cache_sizes(self) -> list[int]:
        """Each layer's history size: a new `ConvCache` for these graphs is ``ConvCache(new_cache_sizes())``."""
        return list(self.history_sizes)

    def __call__(
        self,
        input_ids: torch.Tensor,
        token_mask: torch.Tensor | None,
        cache: ConvCache,
        source: dict[str, torch.Tensor],
        every_position: bool = False,
    ) -> torch.Tensor:
        """Decode T new tokens per row; the logits of the last one, or of each.

        Args:
            input_ids: (B, T) int64 ids, checked to lie in the vocabulary.
            token_mask: (B, T) int64, 0 at (left) padding, else 1; or None: every token is real.
            cache: the model's `ConvCache`, updated in place as the model's forward updates it.
            source: an encoder-decoder's step inputs of the source by name (``ExportedDecoder.source_names``),
                one row per source, each serving B / sources consecutive step rows (``generate`` hands each
                sentence's source once for its beams: `SourceOncePerSentenceMixin`); empty for a causal LM.
            every_position: give each new token's logits, running the step graph once per token (the
                prompt graph gives the last token's only).

        Returns:
            (B, 1, V) float32 logits of each row's last token; (B, T, V) with ``every_position``.
        """
        has_past = cache.has_past
        self._check_cache(cache, has_past, input_ids.shape[0])
        if not has_past and self.prompt is not None and not every_position:
            return self._run_prompt(input_ids, token_mask, cache)
        if input_ids.shape[1] == 1:  # a decoding step
            return self._run_step(input_ids, token_mask, source, cache)
        logits = []
        for column in range(input_ids.shape[1]):
            new = slice(column, column + 1)
            column_mask = None if token_mask is None else token_mask[:, new]
            logits.append(self._run_step(input_ids[:, new], column_mask, source, cache))
        return torch.cat(logits, dim=1) if every_position else logits[-1]

    def reorder(self, cache: ConvCache, beam_idx: torch.Tensor) -> None:
        """Beam search's reordering of ``cache`` (row i of its state becomes row ``beam_idx[i]``, a (B,) int64
        tensor), as ``cache.reorder_cache`` does it; the windows a decoding step wrote are gathered into
        the step buffers the next step reads (`StepBuffers.reorder`) instead of in place (a gather into a
        new tensor, then a copy back).  Any other cache (windows from elsewhere, recorded rows of assisted
        decoding) reorders itself."""
        buffers = self._step_buffers.get(cache)
        plain = cache.has_past and all(layer.recorded is None for layer in cache.layers)
        windows = None
        if buffers is not None and plain:
            windows = buffers.reorder([layer.window for layer in cache.layers], beam_idx)
        if windows is None:
            cache.reorder_cache(beam_idx)
            return
        for layer, window in zip(cache.layers, windows, strict=True):
            layer.window = window
        cache.reorder_positions(beam_idx)

    def _check_cache(self, cache: ConvCache, has_past: bool, batch: int) -> None:
        """A cache of these graphs' layers (and, once it holds a past, of ``batch`` rows), or a ValueError."""
        sizes = [layer.history_size for layer in cache.layers]
        if sizes != self.history_sizes:
            raise ValueError(
                f"the generation cache has layers of the history sizes {sizes}, but {self.folder}'s graphs "
                f"{self.history_sizes}: pass the cache this model returned (or none)"
            )
        rows = cache.layers[0].window.shape[0] if has_past and cache.layers else batch
        if rows != batch:
            raise ValueError(
                f"the generation cache holds {rows} rows but the input_ids {batch}: pass the cache of these rows"
            )

    def _real_tokens(self, shape: torch.Size) -> torch.Tensor:
        """An all-ones (B, T) int64 token mask: the same tensor while the shape stays (bound once)."""
        ones = self._ones
        if ones.shape != shape:
            ones = self._ones = torch.ones(shape, dtype=torch.long)
        return ones

    def _run_prompt(self, ids: torch.Tensor, token_mask: torch.Tensor | None, cache: ConvCache) -> torch.Tensor:
        """The prompt graph over the (B, T) ``ids`` and their ``token_mask`` (None: all real) on a new cache."""
        batch = ids.shape[0]
        mask = self._real_tokens(ids.shape) if token_mask is None else token_mask
        logits = self._new_logits(batch)
        windows = [torch.empty(batch, size, channels) for size, channels in self.state_shapes]
        outputs = {self.logits_name: logits, **dict(zip(self.window_names, windows, strict=True))}
        self.prompt.run({"input_ids": ids, "attention_mask": mask}, outputs)
        return self._keep(cache, logits, windows, token_mask, ids.shape)

    def _run_step(self, ids: torch.Tensor, token_mask: torch.Tensor | None, source: dict, cache: ConvCache):
        """The step graph over one token per row, (B, 1) ``ids`` and ``token_mask`` (None: all real), on
        the cache's windows and positions and the ``source``.  Its new windows go into the buffers that the
        cache's `StepBuffers` alternate between."""
        batch = ids.shape[0]
        if cache.has_past:
            current = [layer.window for layer in cache.layers]
        else:
            current = [torch.zeros(batch, size, channels) for size, channels in self.state_shapes]
        seen = cache.next_positions if cache.next_positions is not None else torch.zeros(batch, dtype=torch.long)
        buffers = self._step_buffers.get(cache)
        if buffers is None:
            buffers = self._step_buffers[cache] = StepBuffers(self.step)
        binding, windows = buffers.next_step(current)
        mask = self._real_tokens(ids.shape) if token_mask is None else token_mask
        leading = dict(zip(STEP_LEADING_INPUTS, (ids, seen.unsqueeze(1), mask), strict=True))
        inputs = {**leading, **dict(zip(self.state_names, current, strict=True)), **source}
        logits = self._new_logits(batch)
        outputs = {self.logits_name: logits, **dict(zip(self.window_names, windows, strict=True))}
        self.step.run(inputs, outputs, binding, STAGED_INPUTS if token_mask is not None else STAGED_INPUTS[:1])
        return self._keep(cache, logits, windows, token_mask, ids.shape)

    def _new_logits(self, batch: int) -> torch.Tensor:
        """A new (B, 1, V) tensor for a graph's logits."""
        return torch.empty(batch, 1, self.vocab_size, dtype=torch.float32)

    def _keep(self, cache: ConvCache, logits, windows: list[torch.Tensor], token_mask, shape: torch.Size):
        """Hold the graph's new ``windows`` in ``cache`` and count there the (B, T) = ``shape`` new tokens
        of ``token_mask`` (None: all real); the (B, 1, V) logits as they are."""
        batch, length = shape
        cache.count_new_tokens(token_mask, batch, length, logits.device)
        for layer, window in zip(cache.layers, windows, strict=True):
            if not layer.is_initialized:
                layer.lazy_initialization(window)
            layer.window = window  # the graph's output is the new state; beam search reorders it in place
            layer.seen.add_(length)
            layer.has_past = True
        return logits
