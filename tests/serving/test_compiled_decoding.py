"""Compiled decoding: ``generate(..., compile_config=CompileConfig(fullgraph=True))`` compiles one
decoding step of every model type, whose fixed-size state is updated in place, and decodes the same
tokens as eager ``generate``.  transformers' beam search never calls the compiled step; there the
recipe is ``model.forward = torch.compile(model.forward, fullgraph=True)`` (the prompt's pass is
then compiled too: one graph more).

Most tests compile with dynamo's ``eager`` backend: it captures the whole step (``fullgraph=True``
fails on any graph break) and runs the captured graph with the same kernels, so tokens must match
bit for bit in greedy, beam and sampling.  One test runs inductor's generated code (the backend a
user gets by default) for greedy decoding.
"""

import pytest
import torch
from torch._dynamo.utils import counters
from transformers import CompileConfig

from talk_hf.cache import ConvHistoryLayer
from talk_hf.transformers_internals import CACHE_NAME

from ..models.helpers import CASE_IDS, CASES, EOS, PAD, VOCAB, random_tokens, returned_cache

NEW_TOKENS = 12
# Every step has the same shapes and reads no Python number that changes (the cache counts tokens in
# tensors; a step gets only its new tokens' mask column), so dynamo compiles the step once, without
# dynamic shapes (``dynamic=False`` would recompile on any size or int that changed: one graph per
# step), and CUDA graphs can replay it.  A compiled forward (beam search) adds the prompt's pass.
GRAPHS = {"compile_config": 1, "forward": 2}


def _prompt(batch: int = 2) -> dict:
    """A left-padded batch of prompts (row 0 has two padding tokens)."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(3, VOCAB, (batch, 5), generator=generator)
    mask = torch.ones_like(ids)
    ids[0, :2], mask[0, :2] = PAD, 0
    return {"input_ids": ids, "attention_mask": mask}


def _compile_switch(settings: dict) -> str:
    """How a user compiles decoding for these generate settings (see the module docstring)."""
    return "forward" if settings.get("num_beams", 1) > 1 else "compile_config"


def _generate(model, compile_backend: str | None, seed: int = 0, **settings) -> torch.Tensor:
    """Tokens of ``generate`` with a fixed output length, compiled with ``compile_backend`` or eager."""
    if compile_backend is not None and _compile_switch(settings) == "compile_config":
        settings["compile_config"] = CompileConfig(fullgraph=True, dynamic=False, backend=compile_backend)
    elif compile_backend is not None:
        model.forward = torch.compile(model.forward, fullgraph=True, dynamic=False, backend=compile_backend)
    torch.manual_seed(seed)
    return model.generate(
        **_prompt(), max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, pad_token_id=PAD, **settings
    )


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.parametrize(
    "settings",
    [{"do_sample": False}, {"do_sample": False, "num_beams": 3}, {"do_sample": True, "top_k": 5}],
    ids=["greedy", "beam3", "sampling"],
)
def test_a_compiled_step_is_one_static_graph_and_decodes_the_eager_tokens(case, settings):
    model = case.model()
    expected = _generate(model, None, **settings)
    torch._dynamo.reset()
    counters.clear()
    tokens = _generate(model, "eager", **settings)
    assert torch.equal(tokens, expected), f"{case.name}: compiled decoding chose other tokens"
    graphs, expected_graphs = counters["stats"]["unique_graphs"], GRAPHS[_compile_switch(settings)]
    assert graphs == expected_graphs, f"{case.name}: {graphs} graphs for {NEW_TOKENS} steps (recompiled per step)"


@pytest.mark.slow
@pytest.mark.parametrize(
    "case",
    [next(case for case in CASES if not case.is_seq2seq), next(case for case in CASES if case.is_seq2seq)],
    ids=lambda case: case.name,
)
def test_inductor_compiled_greedy_decoding_equals_eager(case):
    """inductor generates its own code around the kernels; float32 greedy tokens stay the same."""
    model = case.model()
    expected = _generate(model, None)
    torch._dynamo.reset()
    assert torch.equal(_generate(model, "inductor"), expected)


def test_decoding_compiles_only_when_a_compile_config_asks():
    """No compile_config: eager decoding on every device (transformers would otherwise compile every
    generate on a GPU, as the cache is compileable); with one, the step compiles on the CPU too."""
    model = CASES[0].model()
    cache = model.new_cache()
    assert cache.is_compileable
    generation_config = model.generation_config
    assert not model._valid_auto_compile_criteria({"cache": cache}, generation_config)
    asked = type(generation_config)(compile_config=CompileConfig(fullgraph=True))
    assert model._valid_auto_compile_criteria({"cache": cache, "past_key_values": cache}, asked)
    assert asked.compile_config._compile_all_devices is None  # the user's configuration is left as it was


def test_the_window_keeps_its_storage_through_steps_and_beam_reordering():
    """A compiled step (and a CUDA graph) reads the state at a fixed address: decoding steps and
    beam reordering write into the window; only a new batch size allocates another one."""
    layer = ConvHistoryLayer(3)
    layer.extend(torch.randn(4, 7, 8))
    address, shape = layer.window.data_ptr(), layer.window.shape
    for _ in range(5):
        before = layer.window.clone()
        context = layer.extend(torch.randn(4, 1, 8))
        assert torch.equal(context[:, :3], before)
        layer.reorder_cache(torch.tensor([3, 1, 0, 2]))
        assert torch.equal(layer.window, torch.cat([before[:, 1:], context[:, 3:]], dim=1)[[3, 1, 0, 2]])
    assert layer.window.data_ptr() == address and layer.window.shape == shape
    layer.batch_select_indices(torch.tensor([0, 2]))
    assert layer.window.shape == (2, 3, 8)


def _decoder_pass(model, case, ids, mask, cache=None):
    """Logits (B, T, V) and cache of one decoder pass over ``ids`` (B, T) with the decoder mask ``mask``."""
    if case.is_seq2seq:
        source = random_tokens(ids.shape[0], 6, seed=5)
        inputs = {"input_ids": source, "decoder_input_ids": ids, "decoder_attention_mask": mask}
    else:
        inputs = {"input_ids": ids, "attention_mask": mask}
    outputs = model(**inputs, use_cache=True, **({CACHE_NAME: cache} if cache is not None else {}))
    return outputs.logits, returned_cache(outputs)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_a_step_given_only_its_new_mask_column_equals_one_given_the_whole_mask(case):
    """The cache counts each row's real tokens, so a step needs only the new tokens' mask (B, T) (what
    ``generate`` passes, a fixed shape); the whole mask (B, past + T) gives the same logits.  The counts
    follow beam reordering in place."""
    model = case.model().eval()
    prompt = random_tokens(3, 5, seed=4)
    mask = torch.ones_like(prompt)
    mask[0, :2] = mask[2, :1] = 0
    steps = random_tokens(3, 3, seed=6)
    _, by_whole_mask = _decoder_pass(model, case, prompt, mask)
    _, by_new_column = _decoder_pass(model, case, prompt, mask)
    counts = (by_new_column.self_attention_cache if case.is_seq2seq else by_new_column).next_positions
    address = counts.data_ptr()
    assert counts.tolist() == [3, 5, 4]
    whole_mask = mask
    for step in range(steps.shape[1]):
        token, new_column = steps[:, step : step + 1], torch.ones(3, 1, dtype=mask.dtype)
        whole_mask = torch.cat([whole_mask, new_column], dim=1)
        expected, _ = _decoder_pass(model, case, token, whole_mask, by_whole_mask)
        logits, _ = _decoder_pass(model, case, token, new_column, by_new_column)
        torch.testing.assert_close(logits, expected, rtol=0, atol=0)
    assert counts.tolist() == [6, 8, 7]
    by_new_column.reorder_cache(torch.tensor([2, 2, 0]))
    assert counts.tolist() == [7, 7, 6] and counts.data_ptr() == address


@pytest.mark.parametrize("case", [case for case in CASES if case.is_seq2seq][:1], ids=lambda c: c.name)
def test_compiled_decoding_stops_at_eos_like_eager(case):
    """Rows that finish early (eos) are padded as in eager decoding."""
    model = case.model()
    settings = {"max_new_tokens": NEW_TOKENS, "eos_token_id": EOS, "pad_token_id": PAD}
    expected = model.generate(**_prompt(), **settings)
    torch._dynamo.reset()
    compiled = model.generate(**_prompt(), **settings, compile_config=CompileConfig(fullgraph=True, backend="eager"))
    assert torch.equal(compiled, expected)


@pytest.mark.parametrize("rows", [1, 3, 20])
def test_a_compiled_inference_step_keeps_the_few_rows_linear_kernel(rows, monkeypatch):
    """Traced without autograd, `linear` is the opaque custom op ``talk_hf::linear`` (the kernel for a
    few rows, ``F.linear`` above `MAX_ROWS`), equal to ``F.linear`` to rounding; with autograd it is
    ``F.linear`` (inductor's own product, which trains)."""
    from talk_hf.ops import _extension
    from talk_hf.ops.linear import linear

    try:
        _extension.preflight("cpu")
    except _extension.ExtensionUnavailable as error:
        pytest.skip(str(error))
    monkeypatch.setenv("TALK_HF_BACKEND", "auto")
    traced_targets = []

    def recording_backend(graph_module, example_inputs):
        traced_targets.extend(str(node.target) for node in graph_module.graph.nodes)
        return graph_module

    weight, bias = torch.randn(24, 16), torch.randn(24)
    inputs = torch.randn(rows, 16)
    torch._dynamo.reset()
    with torch.no_grad():
        result = torch.compile(linear, fullgraph=True, backend=recording_backend)(inputs, weight, bias)
    torch.testing.assert_close(result, torch.nn.functional.linear(inputs, weight, bias), rtol=1e-5, atol=1e-5)
    assert "talk_hf.linear.default" in traced_targets
    traced_targets.clear()
    torch._dynamo.reset()
    torch.compile(linear, fullgraph=True, backend=recording_backend)(inputs, weight.requires_grad_(), bias)
    assert "talk_hf.linear.default" not in traced_targets and traced_targets


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
@pytest.mark.parametrize(
    "case",
    [next(case for case in CASES if not case.is_seq2seq), next(case for case in CASES if case.is_seq2seq)],
    ids=lambda case: case.name,
)
def test_cuda_compiled_decoding_equals_eager(case, mode):
    """On a GPU: inductor's code, and with ``reduce-overhead`` CUDA graphs (none skipped), decode the
    eager tokens from one static graph (no re-recording per step)."""
    model = case.model().cuda()
    prompt = {name: tensor.cuda() for name, tensor in _prompt().items()}
    settings = {"max_new_tokens": NEW_TOKENS, "min_new_tokens": NEW_TOKENS, "pad_token_id": PAD}
    expected = model.generate(**prompt, **settings)
    torch._dynamo.reset()
    counters.clear()
    config = CompileConfig(fullgraph=True, dynamic=False, mode=mode)
    compiled = model.generate(**prompt, **settings, compile_config=config)
    assert torch.equal(compiled, expected)
    assert counters["stats"]["unique_graphs"] == GRAPHS["compile_config"]
    assert counters["inductor"]["cudagraph_skips"] == 0
