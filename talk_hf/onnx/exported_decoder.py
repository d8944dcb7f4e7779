"""An exported folder's decoder graphs, run on the package's own generation cache.

`ExportedDecoder` takes new tokens and the model's `ConvCache` (the one ``generate`` keeps between
forward calls, so beam search's ``reorder_cache`` and every other cache operation act on it unchanged)
and leaves that cache as the model's own forward would: each layer's window the graph's new state
(the output tensor ONNX Runtime wrote, `BoundGraph`, taken as it is: no copy), the token counts moved
on.  A causal LM's prompt on a new cache runs ``decoder_prompt.onnx`` in one call; every other token
runs ``decoder_step.onnx``, one call per token (an encoder-decoder's first token, a prompt that goes on
from a cache, a folder exported without the prompt graph).
"""

from __future__ import annotations

import torch

from ..cache import ConvCache
from ..export.runner import OnnxGenerator
from ..export.runner_checks import PROMPT, STEP_LEADING_INPUTS
from .bound_graph import BoundGraph


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

    def new_cache_sizes(self) -> list[int]:
        """Each layer's history size: a new `ConvCache` for these graphs is ``ConvCache(new_cache_sizes())``."""
        return [size for size, _ in self.state_shapes]

    def __call__(
        self, input_ids: torch.Tensor, token_mask: torch.Tensor, cache: ConvCache, source: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """Decode T new tokens per row; the logits of the last one.

        Args:
            input_ids: (B, T) int64 ids, checked to lie in the vocabulary.
            token_mask: (B, T) int64, 0 at (left) padding, else 1.
            cache: the model's `ConvCache`, updated in place as the model's forward updates it.
            source: an encoder-decoder's step inputs of the source by name (``ExportedDecoder.source_names``),
                one row per step row; empty for a causal LM.

        Returns:
            (B, 1, V) float32 logits of each row's last token.
        """
        self._check_cache(cache, input_ids.shape[0])
        if not cache.has_past and self.prompt is not None:
            return self._run(self.prompt, {"input_ids": input_ids, "attention_mask": token_mask}, cache, token_mask)
        for column in range(input_ids.shape[1]):
            new = slice(column, column + 1)
            logits = self._run(
                self.step,
                self._step_inputs(input_ids[:, new], token_mask[:, new], cache, source),
                cache,
                token_mask[:, new],
            )
        return logits

    def _check_cache(self, cache: ConvCache, batch: int) -> None:
        """A cache of these graphs' layers (and, once it holds a past, of ``batch`` rows), or a ValueError."""
        sizes = [layer.history_size for layer in cache.layers]
        if sizes != self.new_cache_sizes():
            raise ValueError(
                f"the generation cache has layers of the history sizes {sizes}, but {self.folder}'s graphs "
                f"{self.new_cache_sizes()}: pass the cache this model returned (or none)"
            )
        rows = cache.layers[0].window.shape[0] if cache.has_past and cache.layers else batch
        if rows != batch:
            raise ValueError(
                f"the generation cache holds {rows} rows but the input_ids {batch}: pass the cache of these rows"
            )

    def _step_inputs(self, ids, token_mask, cache: ConvCache, source: dict) -> dict[str, torch.Tensor]:
        """The step graph's inputs for one token per row: its windows (zeros on a new cache) and position."""
        batch = ids.shape[0]
        if cache.has_past:
            windows = [layer.window for layer in cache.layers]
        else:
            windows = [torch.zeros(batch, size, channels, dtype=torch.float32) for size, channels in self.state_shapes]
        seen = cache.next_positions if cache.next_positions is not None else torch.zeros(batch, dtype=torch.long)
        leading = dict(zip(STEP_LEADING_INPUTS, (ids, seen.unsqueeze(1), token_mask), strict=True))
        return {**leading, **dict(zip(self.state_names, windows, strict=True)), **source}

    def _run(self, graph: BoundGraph, inputs: dict, cache: ConvCache, token_mask: torch.Tensor) -> torch.Tensor:
        """Run ``graph`` on ``inputs``; keep its new windows in ``cache`` and count the T tokens of
        ``token_mask`` (B, T) there; return its logits (B, 1, V): the graph's own output, or a view of the
        (B, V) that a graph exported by an older talk_hf gives (told apart by the output's rank)."""
        batch, length = token_mask.shape
        windows = [torch.empty(batch, size, channels, dtype=torch.float32) for size, channels in self.state_shapes]
        per_row = (1, self.vocab_size) if graph.output_ranks[self.logits_name] == 3 else (self.vocab_size,)
        logits = torch.empty(batch, *per_row, dtype=torch.float32)
        graph.run(inputs, {self.logits_name: logits, **dict(zip(self.window_names, windows, strict=True))})
        cache.count_new_tokens(token_mask, batch, length, token_mask.device)
        for layer, window in zip(cache.layers, windows, strict=True):
            if not layer.is_initialized:
                layer.lazy_initialization(window)
            layer.window = window  # the graph's output is the new state; beam search reorders it in place
            layer.seen.add_(length)
            layer.has_past = True
        return logits.view(batch, 1, self.vocab_size)
