"""The export's lowering of ``aten.scaled_dot_product_attention`` (`talk_hf.export.attention_lowering`)
computes what PyTorch computes, in each of its forms (a query whose mask allows no key attends to
nothing: zeros, as torch's kernels give), and leaves the source's keys unmoved in a step."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402

from talk_hf.export.attention_lowering import TRANSLATIONS  # noqa: E402


class Attention(torch.nn.Module):
    """``F.scaled_dot_product_attention`` with the mask given as an input (or none), and fixed options."""

    def __init__(self, **options):
        super().__init__()
        self.options = options

    def forward(self, query, key, value, mask=None):
        return torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask, **self.options)


def _exported(module, inputs: tuple, path) -> tuple[ort.InferenceSession, onnx.ModelProto]:
    names = ["query", "key", "value", "mask"][: len(inputs)]
    batch, source = torch.export.Dim("batch", min=1), torch.export.Dim("source", min=2)
    shapes = [{0: batch}, {0: batch, 2: source}, {0: batch, 2: source}, {0: batch, 3: source}][: len(inputs)]
    program = torch.export.export(module, inputs, dynamic_shapes=tuple(shapes), strict=False)
    torch.onnx.export(
        program, (), str(path), input_names=names, opset_version=18, dynamo=True, custom_translation_table=TRANSLATIONS
    )
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]), onnx.load(str(path))


def _inputs(queries: int, mask: str):
    generator = torch.Generator().manual_seed(0)
    query = torch.randn(3, 2, queries, 8, generator=generator)
    key, value = torch.randn(3, 2, 5, 8, generator=generator), torch.randn(3, 2, 5, 6, generator=generator)
    if mask == "none":
        return (query, key, value)
    allowed = torch.rand(3, 1, queries, 5, generator=generator) > 0.4
    allowed[..., 0] = True  # every query sees a key
    if mask == "bool, a blind query":
        allowed[1, :, 0] = False  # ... but row 1's first: it attends to nothing (zeros)
        return (query, key, value, allowed)
    return (query, key, value, allowed if mask == "bool" else torch.where(allowed, 0.0, -5.0))


CASES = {
    "step, no mask": (1, "none", {}),
    "step, bool mask": (1, "bool", {}),
    "step, float mask": (1, "float", {}),
    "step, bool mask allowing no key": (1, "bool, a blind query", {}),
    "several queries, one allowed no key": (4, "bool, a blind query", {}),
    "step, scale": (1, "bool", {"scale": 0.3}),
    "several queries, bool mask": (4, "bool", {}),
    "several queries, float mask, scale": (4, "float", {"scale": 0.3}),
    "causal (the exporter's own lowering)": (4, "none", {"is_causal": True}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_lowering_equals_pytorch(tmp_path, case):
    queries, mask, options = CASES[case]
    module, inputs = Attention(**options), _inputs(queries, mask)
    session, model = _exported(module, inputs, tmp_path / "attention.onnx")
    feed = {name: value.numpy() for name, value in zip(["query", "key", "value", "mask"], inputs, strict=False)}
    (got,) = session.run(None, feed)
    np.testing.assert_allclose(got, module(*inputs).numpy(), rtol=1e-5, atol=1e-6)
    if mask == "bool, a blind query":
        assert np.all(got[1, :, 0] == 0)
    # a batch and a source length other than the traced ones
    wider = {name: np.concatenate([array, array[:1]]) for name, array in feed.items()}
    wider["key"], wider["value"] = (
        np.concatenate([wider[name], wider[name][:, :, :2]], axis=2) for name in ("key", "value")
    )
    if "mask" in wider:
        wider["mask"] = np.concatenate([wider["mask"], wider["mask"][..., :2]], axis=3)
    (got,) = session.run(None, wider)
    expected = module(*(torch.from_numpy(wider[name]) for name in feed)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    if queries == 1:  # a step reads the keys where they lie: no Transpose, Reshape or Mul of them
        assert [node.op_type for node in model.graph.node if "key" in node.input] == ["MatMul"]
