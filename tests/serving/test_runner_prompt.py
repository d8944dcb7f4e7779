"""The runner reads a causal LM's prompt in one call of its prompt graph: the same logits, histories
and tokens as feeding the prompt token by token through the step graph (left padding included), and
bad prompt arrays are refused naming the argument."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from talk_hf.export import OnnxGenerator  # noqa: E402

from .exported import NEW_TOKENS  # noqa: E402


def _token_by_token(generator: OnnxGenerator) -> OnnxGenerator:
    """``generator`` as over a folder exported without the prompt graph (its step graph per prompt token)."""
    generator._prompt_feed = None
    return generator


@pytest.mark.parametrize("name", ["talk-lm", "dynamic-lm"])
def test_the_prompt_graph_equals_the_prompt_fed_token_by_token(shared_exports, name):
    export = shared_exports(name)
    ids, mask = export.ids.numpy(), export.mask.numpy()
    generator, stepped = OnnxGenerator(export.folder), _token_by_token(OnnxGenerator(export.folder))
    step_calls = []  # calls of the step graph: OnnxGenerator.step, or the bound steps of generate
    step, bind_steps = generator.step, generator.bind_steps
    generator.step = lambda *args: step_calls.append(1) or step(*args)

    def counted_bind_steps(*args):
        steps = bind_steps(*args)
        bound_step = steps.step
        steps.step = lambda *args: step_calls.append(1) or bound_step(*args)
        return steps

    generator.bind_steps = counted_bind_steps

    logits, states = generator.read_prompt(ids, mask)
    assert not step_calls  # the whole prompt in the one prompt-graph call
    expected_logits, expected_states = stepped.read_prompt(ids, mask)
    np.testing.assert_allclose(logits, expected_logits, rtol=1e-4, atol=1e-5)
    for state, expected in zip(states, expected_states, strict=True):
        np.testing.assert_allclose(state, expected, rtol=1e-4, atol=1e-5)
    lengths = {"min_new_tokens": NEW_TOKENS, "max_new_tokens": NEW_TOKENS}
    tokens = generator.generate(ids, mask, **lengths)
    assert len(step_calls) == NEW_TOKENS - 1  # one step per new token after the first
    np.testing.assert_array_equal(tokens, stepped.generate(ids, mask, **lengths))


def test_bad_prompt_arrays_are_refused_by_name(shared_exports):
    export = shared_exports("talk-lm")
    generator, ids, mask = OnnxGenerator(export.folder), export.ids.numpy(), export.mask.numpy()
    with pytest.raises(ValueError, match=r"OnnxGenerator.read_prompt.*input_ids.*int64"):
        generator.read_prompt(ids.astype(np.float32), mask)
    with pytest.raises(ValueError, match=r"OnnxGenerator.read_prompt.*attention_mask"):
        generator.read_prompt(ids, mask[:, :-1])
    with pytest.raises(ValueError, match=r"OnnxGenerator.read_prompt: .* encoder-decoder.*encode it"):
        OnnxGenerator(shared_exports("dynamic-seq2seq").folder).read_prompt(ids, mask)
