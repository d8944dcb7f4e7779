"""Packed rows (``document_edges``): each document computes what it computes alone, on every backend.

Every op form below runs on a packed row of documents of 1 and 2 tokens, shorter and longer than its
window, and must give each document's outputs and gradients as when the document runs alone; the
float64 packed form passes gradcheck and matches the loop-form definitions; the three forms of
packing give the same edges; edges hold their own values (positions changed in place, through
numpy or ``.data``, reach only edges derived again); bad arguments raise; the compiled forms
(torch.compile, the custom ops) take the edges.
"""

import random
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from talk_hf.ops import DocumentEdges, depthwise_conv, dynamic_conv, light_conv, talk_conv
from talk_hf.ops.depthwise_conv.depthwise_compiled import compiled_depthwise_conv
from talk_hf.ops.depthwise_conv.depthwise_naive import naive_depthwise_conv
from talk_hf.ops.documents import position_ids_from_cu_seqlens, position_ids_from_seq_idx
from talk_hf.ops.documents_naive import naive_document_span
from talk_hf.ops.dynamic_conv.dynamic_compiled import compiled_dynamic_conv, compiled_light_conv
from talk_hf.ops.dynamic_conv.dynamic_naive import naive_dynamic_conv
from talk_hf.ops.talk_conv.talk_compiled import compiled_talk_conv
from talk_hf.ops.talk_conv.talk_naive import naive_talk_conv

from .helpers import TOLERANCES, assert_close_to_reference, offsets_off_the_grid

CHANNELS, HEADS = 4, 2
# Two rows with different packings of 26 tokens: documents of 1 and 2 tokens, of 3 and 4 (shorter
# than all but the narrowest windows below) and of 16 (longer than every window, at most 13).
ROW_LENGTHS = ([2, 1, 4, 16, 3], [16, 3, 1, 2, 4])


def edges_of(position_ids):
    """The ops' ``document_edges`` for (B, T) ``position_ids``, or None (an unpacked call)."""
    return None if position_ids is None else DocumentEdges(position_ids)


@dataclass(frozen=True)
class OpForm:
    """An op with fixed hyperparameters: ``call(position_ids, *inputs)``, which derives the edges of
    ``position_ids`` and runs the op on them, and its loop-form definition ``naive(position_ids,
    *inputs)``; ``inputs(batch, length)`` makes float64 inputs, x first, non-float ones last;
    ``per_token[i]``: input i has time on dim 1 (else every token shares it, like LightConv's weight)."""

    call: Callable
    naive: Callable
    inputs: Callable
    per_token: tuple[bool, ...]


def unit_normal(*shape):
    return torch.randn(shape, dtype=torch.float64)


def talk_form(max_left, max_right):
    def inputs(batch, length):
        shape = (batch, length, HEADS)
        offsets = [offsets_off_the_grid(shape, max_left)] + (
            [offsets_off_the_grid(shape, max_right)] if max_right else []
        )
        return [unit_normal(batch, length, CHANNELS), *offsets]

    def call(position_ids, x, offset_left, offset_right=None):
        return talk_conv(x, offset_left, offset_right, max_left, max_right, document_edges=edges_of(position_ids))

    def naive(position_ids, x, offset_left, offset_right=None):
        return naive_talk_conv(x, offset_left, offset_right, max_left, max_right, position_ids)

    return OpForm(call, naive, inputs, (True, True, True) if max_right else (True, True))


def dynamic_form(taps, padding_l, shared=False):
    def inputs(batch, length):
        return [unit_normal(batch, length, CHANNELS), unit_normal(*(() if shared else (batch, length)), HEADS, taps)]

    op = light_conv if shared else dynamic_conv
    return OpForm(
        lambda position_ids, x, weight: op(x, weight, padding_l, document_edges=edges_of(position_ids)),
        lambda position_ids, x, weight: naive_dynamic_conv(x, weight, padding_l, position_ids),
        inputs,
        (True, not shared),
    )


def depthwise_form(taps, dilation, padding, gated=False):
    left = (taps - 1 if padding == "causal" else taps // 2) * dilation

    def inputs(batch, length):
        mask = [torch.rand(batch, length) > 0.2] if gated else []
        return [unit_normal(batch, length, CHANNELS), unit_normal(CHANNELS, taps), *mask]

    def call(position_ids, x, weight, input_mask=None):
        return depthwise_conv(
            x,
            weight,
            dilation=dilation,
            padding=padding,
            relu_input=gated,
            input_mask=input_mask,
            document_edges=edges_of(position_ids),
        )

    def naive(position_ids, x, weight, input_mask=None):
        gated_x = x if input_mask is None else torch.relu(x) * input_mask.unsqueeze(-1)
        return naive_depthwise_conv(gated_x, weight, dilation, left, position_ids)

    return OpForm(call, naive, inputs, (True, False, True) if gated else (True, False))


FORMS = {
    "talk_narrow": talk_form(2, 1),
    "talk_wide": talk_form(7, 5),
    "talk_causal_narrow": talk_form(3, 0),
    "talk_causal_wide": talk_form(9, 0),
    "dynamic_centred_3": dynamic_form(3, 1),
    "dynamic_centred_7": dynamic_form(7, 3),
    "dynamic_causal_8": dynamic_form(8, 7),
    "light_causal_3": dynamic_form(3, 2, shared=True),
    "light_centred_7": dynamic_form(7, 3, shared=True),
    "depthwise_causal_3": depthwise_form(3, 1, "causal"),
    "depthwise_centred_5_gated": depthwise_form(5, 1, "centred", gated=True),
    "depthwise_causal_dilated": depthwise_form(3, 3, "causal"),
}


def packed_position_ids(*row_lengths):
    """(B, T) positions of rows packed from documents of these lengths."""
    return torch.stack([torch.cat([torch.arange(n) for n in lengths]) for lengths in row_lengths])


def outputs_and_gradients(form, position_ids, inputs, grad_out):
    """The output and the gradients of every float input."""
    inputs = [tensor.detach().requires_grad_() if tensor.is_floating_point() else tensor for tensor in inputs]
    out = form.call(position_ids, *inputs)
    gradients = torch.autograd.grad(out, [tensor for tensor in inputs if tensor.requires_grad], grad_out)
    return out, list(gradients)


@pytest.mark.usefixtures("each_backend")
@pytest.mark.parametrize("name", sorted(FORMS))
def test_packed_documents_compute_what_they_compute_alone(name):
    form = FORMS[name]
    position_ids = packed_position_ids(*ROW_LENGTHS)
    batch, length = position_ids.shape
    inputs = [tensor.float() if tensor.is_floating_point() else tensor for tensor in form.inputs(batch, length)]
    grad_out = torch.randn(batch, length, CHANNELS)
    out, gradients = outputs_and_gradients(form, position_ids, inputs, grad_out)

    float_per_token = [
        per_token for tensor, per_token in zip(inputs, form.per_token, strict=True) if tensor.is_floating_point()
    ]
    shared_sums = [torch.zeros_like(gradient) for gradient in gradients]
    atol, rtol = TOLERANCES[torch.float32]
    for b, lengths in enumerate(ROW_LENGTHS):
        start = 0
        for n in lengths:
            document = slice(start, start + n)
            alone = [
                tensor[b : b + 1, document] if per_token else tensor
                for tensor, per_token in zip(inputs, form.per_token, strict=True)
            ]
            alone_out, alone_gradients = outputs_and_gradients(form, None, alone, grad_out[b : b + 1, document])
            torch.testing.assert_close(out[b : b + 1, document], alone_out, atol=atol, rtol=rtol)
            for gradient, alone_gradient, per_token, shared_sum in zip(
                gradients, alone_gradients, float_per_token, shared_sums, strict=True
            ):
                if per_token:
                    torch.testing.assert_close(gradient[b : b + 1, document], alone_gradient, atol=atol, rtol=rtol)
                else:
                    shared_sum += alone_gradient
            start += n
    for gradient, per_token, shared_sum in zip(gradients, float_per_token, shared_sums, strict=True):
        if not per_token:
            torch.testing.assert_close(gradient, shared_sum, atol=4 * atol, rtol=rtol)


@pytest.mark.usefixtures("each_backend")
@pytest.mark.parametrize("name", sorted(FORMS))
def test_gradcheck_of_the_packed_form(name):
    form = FORMS[name]
    position_ids = packed_position_ids([1, 2, 5], [5, 1, 2])
    inputs = form.inputs(*position_ids.shape)
    float_inputs = [tensor.requires_grad_() for tensor in inputs if tensor.is_floating_point()]
    others = inputs[len(float_inputs) :]  # the depthwise mask comes last

    def op(*floats):
        return form.call(position_ids, *floats, *others)

    assert torch.autograd.gradcheck(op, float_inputs, eps=1e-6, atol=1e-7)


@pytest.mark.usefixtures("each_backend")
@pytest.mark.parametrize("seed", range(3))
def test_random_packings_match_the_definitions(seed):
    """Forward of every form on rows cut at random into documents of 1 to 12 tokens, some rows
    left-padded (pads at position 1, as transformers fills them), against the loop-form definitions."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    length = 24
    rows = []
    for _ in range(2):
        cuts = sorted(rng.sample(range(1, length), rng.randint(0, 6)))
        positions = torch.cat([torch.arange(n) for n in torch.tensor([0, *cuts, length]).diff().tolist()])
        if rng.random() < 0.5:  # left padding before the row's first document
            positions[: cuts[0] if cuts else 0] = 1
        rows.append(positions)
    position_ids = torch.stack(rows)
    for form in FORMS.values():
        inputs = form.inputs(2, length)
        assert_close_to_reference(form.call(position_ids, *inputs), form.naive(position_ids, *inputs), torch.float64)


@pytest.mark.usefixtures("each_backend")
@pytest.mark.parametrize("name", sorted(FORMS))
def test_without_document_edges_the_op_is_unpacked(name):
    """document_edges=None runs the unpacked code, and a row that is one document computes the same
    within rounding (the packed forms may sum in another order: the PyTorch path's LightConv and
    depthwise forms, the compiler's choices in the kernels)."""
    form = FORMS[name]
    inputs = [tensor.float() if tensor.is_floating_point() else tensor for tensor in form.inputs(2, 13)]
    grad_out = torch.randn(2, 13, CHANNELS)
    packed = outputs_and_gradients(form, torch.arange(13).expand(2, 13), inputs, grad_out)
    unpacked = outputs_and_gradients(form, None, inputs, grad_out)
    for actual, expected in zip([packed[0], *packed[1]], [unpacked[0], *unpacked[1]], strict=True):
        torch.testing.assert_close(actual, expected, atol=1e-6, rtol=1e-6)


def test_the_three_forms_of_packing_give_the_same_edges():
    lengths = [3, 1, 6, 2]
    position_ids = packed_position_ids(lengths)
    cu_seqlens = torch.tensor([0, 3, 4, 4, 10, 12], dtype=torch.int32)  # with an empty document
    seq_idx = torch.repeat_interleave(torch.arange(4), torch.tensor(lengths)).unsqueeze(0)
    edges = DocumentEdges(position_ids).tensor
    assert edges.dtype == torch.int32 and edges.shape == (1, 12, 2)
    torch.testing.assert_close(position_ids_from_cu_seqlens(cu_seqlens, 12), position_ids)
    torch.testing.assert_close(position_ids_from_seq_idx(seq_idx), position_ids)
    expected = [naive_document_span(position_ids, 0, t, 12) for t in range(12)]
    assert edges[0].tolist() == [list(span) for span in expected]

    # Batches of rows; only the zeros are read: left padding's positions of 1 join the pads into one
    # document before the row's first, and positions that do not count up change nothing.
    rows = torch.tensor([[1, 1, 1, 0, 1, 2, 0, 1], [0, 5, 9, 0, 0, 3, 3, 7]])
    edges = DocumentEdges(rows).tensor
    assert edges[0].tolist() == [[0, 2]] * 3 + [[3, 5]] * 3 + [[6, 7]] * 2
    assert edges[1].tolist() == [[0, 2]] * 3 + [[3, 3]] + [[4, 7]] * 4
    seq_idx = torch.tensor([[0, 0, 0, 1, 1, 1, 2, 2], [4, 4, 4, 5, 6, 6, 6, 6]])
    assert DocumentEdges(position_ids_from_seq_idx(seq_idx)).tensor.tolist() == edges.tolist()


# Forms whose loop-form definition takes the op's inputs as they are (no input gate).
UNGATED_FORMS = ["talk_wide", "talk_causal_narrow", "dynamic_causal_8", "light_centred_7", "depthwise_causal_dilated"]


@pytest.mark.usefixtures("each_backend")
@pytest.mark.parametrize("edit", ["numpy", "data"])
@pytest.mark.parametrize("name", UNGATED_FORMS)
def test_positions_changed_in_place_reach_the_next_call(name, edit):
    """position_ids changed in place where the tensor's version counter does not see it (through the
    numpy array it shares, or through ``.data``) to start a second document at token 6: the next
    call's edges see two documents, and edges derived before the change keep their one document."""
    form = FORMS[name]
    array = np.arange(12)[None].copy()
    position_ids = torch.from_numpy(array)
    inputs = form.inputs(1, 12)
    before = DocumentEdges(position_ids)
    one_document = form.call(position_ids, *inputs)
    assert_close_to_reference(one_document, form.naive(torch.arange(12)[None], *inputs), torch.float64)
    if edit == "numpy":
        array[0, 6:] = np.arange(6)
    else:
        position_ids.data[0, 6:] = torch.arange(6)
    two_documents = form.call(position_ids, *inputs)
    assert_close_to_reference(two_documents, form.naive(packed_position_ids([6, 6]), *inputs), torch.float64)
    assert not torch.allclose(two_documents, one_document)
    assert before.tensor.tolist() == [[[0, 11]] * 12]


X = torch.zeros(2, 5, 4)
OP_CALLS = {
    "talk": lambda **edges: talk_conv(X, torch.zeros(2, 5, 2), None, 3, 0, **edges),
    "dynamic": lambda **edges: dynamic_conv(X, torch.zeros(2, 5, 2, 3), 1, **edges),
    "light": lambda **edges: light_conv(X, torch.zeros(2, 3), 1, **edges),
    "depthwise": lambda **edges: depthwise_conv(X, torch.zeros(4, 3), **edges),
}


@pytest.mark.parametrize(
    "position_ids,error,match",
    [
        ([[0, 1, 2, 3, 4]] * 2, TypeError, r"position_ids must be a torch.Tensor of shape \(B, T\), got list"),
        (torch.arange(5), ValueError, r"position_ids must have shape \(B, T\) \(2 dims\), got shape \(5,\)"),
        (torch.zeros(2, 5), ValueError, "position_ids must have an integer dtype, got torch.float32"),
        (torch.zeros(2, 5, dtype=torch.bool), ValueError, "position_ids must have an integer dtype"),
        (torch.tensor([[0, 1, 2, -1, 0]] * 2), ValueError, "position_ids must be >= 0"),
    ],
)
def test_bad_position_ids_raise(position_ids, error, match):
    with pytest.raises(error, match=match):
        DocumentEdges(position_ids)


@pytest.mark.parametrize(
    "document_edges,error,match",
    [
        (DocumentEdges(torch.zeros(2, 5, dtype=torch.long)).tensor, TypeError, "got Tensor: derive it from the"),
        (torch.zeros(2, 5, dtype=torch.long), TypeError, "must be a talk_hf.ops.DocumentEdges or None, got Tensor"),
        (
            DocumentEdges(torch.zeros(2, 4, dtype=torch.long)),
            ValueError,
            r"document_edges were derived for \(B, T\) = \(2, 4\) but x has \(B, T\) = \(2, 5\)",
        ),
        (
            DocumentEdges(torch.zeros(2, 5, dtype=torch.long, device="meta")),
            ValueError,
            "document_edges are on meta but x is on cpu",
        ),
    ],
)
@pytest.mark.parametrize("op", sorted(OP_CALLS))
def test_bad_document_edges_raise(op, document_edges, error, match):
    with pytest.raises(error, match=match):
        OP_CALLS[op](document_edges=document_edges)


@pytest.mark.parametrize("op", sorted(OP_CALLS))
def test_the_ops_take_no_position_ids(op):
    """The edges are derived by the caller, once per batch: positions given to an op are refused."""
    with pytest.raises(TypeError, match="position_ids"):
        OP_CALLS[op](position_ids=torch.zeros(2, 5, dtype=torch.long))


@pytest.mark.parametrize(
    "cu_seqlens,match",
    [
        (torch.tensor([1, 3, 5]), "cu_seqlens must start at 0"),
        (torch.tensor([0, 4, 3, 5]), "cu_seqlens must be non-decreasing"),
        (torch.tensor([0, 3, 4]), "cu_seqlens must end at the row's length total_length=5"),
        (torch.tensor([0.0, 5.0]), "cu_seqlens must have an integer dtype"),
        (torch.tensor([[0, 5]]), r"cu_seqlens must be a 1-dim tensor"),
    ],
)
def test_bad_cu_seqlens_raise(cu_seqlens, match):
    with pytest.raises(ValueError, match=match):
        position_ids_from_cu_seqlens(cu_seqlens, 5)


@pytest.mark.parametrize(
    "seq_idx,match", [(torch.tensor([0, 0, 1]), "seq_idx must be a \\(B, T\\) tensor"), (torch.zeros(1, 3), "integer")]
)
def test_bad_seq_idx_raise(seq_idx, match):
    with pytest.raises(ValueError, match=match):
        position_ids_from_seq_idx(seq_idx)


COMPILED_FORMS = ["talk_wide", "talk_causal_narrow", "dynamic_causal_8", "light_centred_7", "depthwise_centred_5_gated"]


def test_torch_compile_fullgraph_derives_and_takes_document_edges(each_backend):
    """The edges' derivation traces into one graph, and so do the ops with them, every form on both
    paths: the C++ kernels (each one custom op) and the PyTorch path (no host read: TaLK's offset
    check does not run while tracing)."""
    names = COMPILED_FORMS
    position_ids = packed_position_ids(*ROW_LENGTHS)
    inputs = [
        [
            tensor.float().requires_grad_() if tensor.is_floating_point() else tensor
            for tensor in FORMS[name].inputs(2, 26)
        ]
        for name in names
    ]
    floats = [tensor for tensors in inputs for tensor in tensors if tensor.requires_grad]

    def mix(position_ids, inputs):
        return sum(FORMS[name].call(position_ids, *tensors) for name, tensors in zip(names, inputs, strict=True))

    compiled = torch.compile(mix, backend="aot_eager", fullgraph=True)
    out = compiled(position_ids, inputs)
    expected = mix(position_ids, inputs)
    torch.testing.assert_close(out, expected)
    for gradient, reference in zip(
        torch.autograd.grad(out.sum(), floats), torch.autograd.grad(expected.sum(), floats), strict=True
    ):
        torch.testing.assert_close(gradient, reference)


def test_custom_ops_with_document_edges_pass_opcheck():
    """Schema, fake kernels and autograd of the custom ops hold with document edges."""
    position_ids = packed_position_ids([2, 1, 6], [6, 3])
    x = torch.randn(2, 9, 4, dtype=torch.float64, requires_grad=True)
    edges = DocumentEdges(position_ids).tensor
    offsets = torch.rand(2, 9, 2, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(2, 9, 2, 4, dtype=torch.float64, requires_grad=True)
    shared = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    channel_weight = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    mask = torch.rand(2, 9) > 0.3
    for custom_op, args in [
        (compiled_talk_conv.custom_op, (x, offsets, offsets.detach().flip(1).requires_grad_(), 3, 2, edges)),
        (compiled_talk_conv.custom_op, (x, offsets, None, 5, 0, edges)),
        (compiled_dynamic_conv.custom_op, (x, weight, 2, edges)),
        (compiled_light_conv.custom_op, (x, shared, 3, edges)),
        (compiled_depthwise_conv.custom_op, (x, channel_weight, mask, 2, 2, True, edges)),
    ]:
        torch.library.opcheck(custom_op, args)


@pytest.mark.gpu
@pytest.mark.parametrize("name", COMPILED_FORMS)
def test_packed_calls_on_cuda_match_the_cpu(name, monkeypatch):
    """Under "auto", packed calls on CUDA tensors (which run the CUDA kernels:
    test_packed_cuda_kernels.py) give the PyTorch path's results on the CPU."""
    monkeypatch.setenv("TALK_HF_BACKEND", "torch")
    form = FORMS[name]
    position_ids = packed_position_ids(*ROW_LENGTHS)
    inputs = form.inputs(*position_ids.shape)
    expected = form.call(position_ids, *inputs)
    monkeypatch.setenv("TALK_HF_BACKEND", "auto")
    actual = form.call(position_ids.cuda(), *[tensor.cuda() for tensor in inputs])
    assert_close_to_reference(actual.cpu(), expected, torch.float64)
