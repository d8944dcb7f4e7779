"""A model's graphs, traced: `trace_graphs`, and `check_exportable` for a yes or a reason.

Which model exports is not a list of types: a generative head in eval mode exports when its own
forward traces (``torch.export``, non-strict, on the PyTorch path of every op) into the graphs of
`traced_forward` with a dynamic batch and source length.  What does not trace (a core that reads a
tensor's values on the host, say) is refused with the tracer's reason and the graph it was tracing.

The traced programs keep the dynamic sizes as expressions; a size the tracer cannot prove is kept as
a runtime check instead of specialising the graph to the example's sizes
(``prefer_deferred_runtime_asserts_over_guards``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .runner_checks import PROMPT, STEP_LEADING_INPUTS
from .traced_forward import (
    SOURCE_MASK,
    DecodingStepGraph,
    EncoderGraph,
    GraphLayout,
    PromptGraph,
    graph_layout,
)

# Example sizes to trace with: not 0 or 1, which torch.export would fix as constants, and unequal,
# so that the tracer keeps the sources, the step's rows (two per source, as beams: a step's rows are
# sources x n) and the source (or prompt) length apart.
EXAMPLE_ROWS, EXAMPLE_ROWS_PER_SOURCE, EXAMPLE_SOURCE_LENGTH = 3, 2, 5


@dataclass
class TracedGraphs:
    """A model's traced graphs, with the names of their inputs and outputs.

    layout: the `GraphLayout`; encoder: the encoder graph's program (None for a causal LM); step: the
    decoding step's; prompt: a causal LM's prompt graph's (`PromptGraph`; None for an encoder-decoder,
    whose first step is one token); names: per role ("encoder", "decoder_step", "decoder_prompt"),
    ``{"inputs": [...], "outputs": [...]}``; source_axes: per role, each input or output name with a
    source length -> its axis.
    """

    layout: GraphLayout
    encoder: torch.export.ExportedProgram | None
    step: torch.export.ExportedProgram
    prompt: torch.export.ExportedProgram | None
    names: dict[str, dict[str, list[str]]]
    source_axes: dict[str, dict[str, int]]


def check_head(model) -> None:
    """A generative head in eval mode, or a ValueError saying what the model is not."""
    if not (hasattr(model, "generate") and hasattr(model, "new_cache") and hasattr(model, "get_output_embeddings")):
        raise ValueError(
            "the ONNX export supports the heads that generate with a fixed-size cache (a model with generate(), "
            "new_cache() and an LM head, such as ConvForConditionalGeneration, ConvForCausalLM or "
            f"SliceNetForConditionalGeneration), not {type(model).__name__}"
        )
    if model.training:
        raise ValueError(f"export a model in eval mode: call {type(model).__name__}.eval() first (dropout is on)")


def start_token(model) -> int:
    """The first token of an encoder-decoder's target (generation config first, then model config)."""
    start = model.generation_config.decoder_start_token_id
    start = model.config.decoder_start_token_id if start is None else start
    if start is None:
        raise ValueError(f"{type(model).__name__}'s configuration has no decoder_start_token_id: set one to export")
    return start


def _trace(module, args: tuple, dynamic_shapes, role: str, model) -> torch.export.ExportedProgram:
    """``torch.export`` of ``module(*args)``, or a ValueError naming the model, the graph and why."""
    try:
        return torch.export.export(
            module, args, dynamic_shapes=dynamic_shapes, strict=False, prefer_deferred_runtime_asserts_over_guards=True
        )
    except Exception as error:  # the tracer's many error types: one message naming the graph
        reason = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise ValueError(
            f"{type(model).__name__}'s {role} does not trace into one graph, so it cannot be exported: "
            f"{type(error).__name__}: {reason} (the export traces the model's own forward with torch.export; "
            "a forward that reads tensor values on the host or branches on them does not trace)"
        ) from error


def trace_graphs(model) -> TracedGraphs:
    """Trace ``model``'s encoder (encoder-decoders) or prompt (causal LMs), and its decoding step
    (`traced_forward`).

    Raises:
        ValueError: the model is not a generative head, is in training mode, has no decoder start
            token (encoder-decoders), or a graph does not trace (the tracer's reason).
    """
    check_head(model)
    device, seq2seq = model.device, model.config.is_encoder_decoder
    token = model.config.bos_token_id or 0
    source = torch.full((EXAMPLE_ROWS, EXAMPLE_SOURCE_LENGTH), token, device=device)
    layout = graph_layout(model, source, start_token(model) if seq2seq else token)
    batch, length = torch.export.Dim("batch", min=1), torch.export.Dim("source_length", min=1)
    sources = torch.export.Dim("sources", min=1)  # the step's source inputs: one row per n step rows
    states = [f"state_{i}" for i in range(len(layout.state_shapes))]
    names = {
        "decoder_step": {
            "inputs": [*STEP_LEADING_INPUTS, *states, *layout.source_inputs],
            "outputs": ["logits", *(f"new_{name}" for name in states)],
        }
    }
    source_axes = {"decoder_step": dict(layout.source_inputs)}
    step_rows = EXAMPLE_ROWS * EXAMPLE_ROWS_PER_SOURCE if seq2seq else EXAMPLE_ROWS
    ids = torch.full((step_rows, 1), token, device=device)
    step_args = [ids, ids * 0, torch.ones_like(ids)]
    step_args += [torch.zeros(step_rows, size, channels, device=device) for size, channels in layout.state_shapes]
    encoder_program = prompt_program = None
    with torch.no_grad():
        if seq2seq:
            encoder = EncoderGraph(model, layout)
            mask = torch.ones_like(source)
            names["encoder"] = {"inputs": ["input_ids", "attention_mask"], "outputs": [*layout.encoder_outputs]}
            source_axes["encoder"] = {"input_ids": 1, "attention_mask": 1, **layout.encoder_outputs}
            shapes = ({0: batch, 1: length}, {0: batch, 1: length})
            encoder_program = _trace(encoder, (source, mask), shapes, "encoder", model)
            produced = {**dict(zip(layout.encoder_outputs, encoder(source, mask), strict=True)), SOURCE_MASK: mask}
            step_args += [produced[name] for name in layout.source_inputs]
        per_input = [{0: batch} for _ in names["decoder_step"]["inputs"]]
        for index, name in enumerate(names["decoder_step"]["inputs"]):
            if name in layout.source_inputs:
                per_input[index] = {0: sources, layout.source_inputs[name]: length}
        shapes = (*per_input[:3], tuple(per_input[3:]))  # forward(input_ids, positions, token_mask, *rest)
        step_program = _trace(DecodingStepGraph(model, layout), tuple(step_args), shapes, "decoding step", model)
        if not seq2seq:
            names[PROMPT] = {"inputs": ["input_ids", "attention_mask"], "outputs": names["decoder_step"]["outputs"]}
            prompt_program = _trace_prompt(model, layout, source, batch)
    return TracedGraphs(layout, encoder_program, step_program, prompt_program, names, source_axes)


def _trace_prompt(model, layout: GraphLayout, example: torch.Tensor, batch) -> torch.export.ExportedProgram:
    """A causal LM's `PromptGraph`, traced on ``example`` (B, T) ids with the dynamic ``batch`` and a prompt
    length dynamic from 2 tokens (the tracer would fix a length of 1 as a constant; ONNX Runtime runs 1)."""
    shapes = ({0: batch, 1: torch.export.Dim("prompt_length", min=2)},) * 2
    return _trace(PromptGraph(model, layout), (example, torch.ones_like(example)), shapes, "prompt", model)


def check_exportable(model) -> None:
    """Raise the ValueError of `trace_graphs` when ``model`` cannot be exported; return None when it can
    (it traces the graphs: seconds for a large model)."""
    trace_graphs(model)
