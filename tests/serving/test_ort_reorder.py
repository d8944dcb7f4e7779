"""Beam search's reordering of an exported model's generation cache (``ORTModelBase._reorder_cache``):
the windows gathered into the step graph's bound buffers, the state as the PyTorch model's reorder leaves it."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("onnxruntime")

ROWS = torch.tensor([2, 2, 0])  # row 1 dropped, row 2 taken twice


def _steps_around_a_reordering(model, ids, mask, reorder) -> tuple[torch.Tensor, object]:
    """The prompt, a step, ``reorder(cache)``, a step: the last step's (3, 1, V) logits and the cache."""
    cache = model.new_cache()
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask, cache=cache, use_cache=True)
        for token in (7, None, 8):
            if token is None:
                reorder(cache)
                continue
            out = model(input_ids=torch.full((3, 1), token), cache=cache, use_cache=True)
    return out.logits, cache


def test_a_beam_reordering_gathers_the_windows_into_the_step_buffers(lm):
    """The reordered windows lie in the buffers the last step read (no new tensor), and the step after
    gives the PyTorch model's logits, with the cache's positions and windows reordered as its own."""
    expected, reference = _steps_around_a_reordering(lm.model, lm.ids, lm.mask, lambda c: c.reorder_cache(ROWS))
    buffers = []

    def reorder(cache):
        (read,) = [
            held for held in lm.ort.exported._step_buffers[cache].windows if held[0] is not cache.layers[0].window
        ]
        buffers.extend(read)
        assert lm.ort._reorder_cache(cache, ROWS) is cache
        assert all(layer.window is mine for layer, mine in zip(cache.layers, read, strict=True))

    logits, cache = _steps_around_a_reordering(lm.ort, lm.ids, lm.mask, reorder)
    assert len(buffers) == len(cache.layers)
    torch.testing.assert_close(logits, expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(cache.next_positions, reference.next_positions)


def test_a_cache_of_windows_from_elsewhere_reorders_itself(lm):
    """Windows that are not the step buffers' (set from outside) are reordered by the cache, in place."""
    _, cache = _steps_around_a_reordering(lm.ort, lm.ids, lm.mask, lambda c: None)
    for layer in cache.layers:
        layer.window = layer.window.clone()
    windows = [layer.window for layer in cache.layers]
    expected = [window[ROWS] for window in windows]
    lm.ort._reorder_cache(cache, ROWS)
    for layer, window, reordered in zip(cache.layers, windows, expected, strict=True):
        assert layer.window is window
        torch.testing.assert_close(window, reordered)
