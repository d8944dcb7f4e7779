"""The candidate CUDA kernels that no GPU has verified yet (csrc/cuda_variants.h) and their switches
(talk_hf/ops/_cuda_variants.py).

On the CPU: ``$TALK_HF_CUDA_VARIANTS`` is parsed and checked (a name that is not a candidate is refused,
naming the variable and the candidates), the CUDA extension gets the named candidates switched on when it
loads, and `cuda_variants` switches exactly the given candidates for a block (for bench_ops --variants);
a fake extension module stands in for the CUDA one.  On a GPU (``gpu``): every candidate, switched on,
matches the float64 reference forward and backward at the shapes it takes (each block's channels in one
head), whole and packed rows.  compute-sanitizer runs them too (benchmarks/sanitize_kernels.py).
"""

import pytest

from talk_hf.ops import _cuda_variants, _extension

from .test_cuda_kernels import STREAM_DTYPES, compare_talk_conv_with_reference, talk_inputs_on_cuda
from .test_packed_cuda_kernels import fuzzed_edges


class FakeCudaExtension:
    """The CUDA extension's two switch functions, over two candidates; records what is on."""

    def __init__(self):
        self.on = {"first": False, "second": False}

    def cuda_variant_names(self):
        return list(self.on)

    def set_cuda_variant(self, name, enabled):
        if name not in self.on:
            return False
        self.on[name] = enabled
        return True


@pytest.mark.parametrize(
    "text,expected",
    [(None, []), ("", []), (" , ", []), ("first", ["first"]), (" second , first ", ["second", "first"])],
)
def test_the_variable_lists_candidates_by_name(text, expected):
    assert _cuda_variants.requested_variants(text, ["first", "second"]) == expected


def test_a_name_that_is_no_candidate_is_refused_with_the_candidates():
    with pytest.raises(ValueError, match=r"TALK_HF_CUDA_VARIANTS names \['thrid'\].*\['first', 'second'\]"):
        _cuda_variants.requested_variants("first,thrid", ["first", "second"])
    with pytest.raises(ValueError, match="its candidates are none"):
        _cuda_variants.requested_variants("first", [])


def test_loading_the_cuda_extension_switches_on_the_named_candidates(monkeypatch):
    fake = FakeCudaExtension()
    monkeypatch.setattr(_extension, "_results", {})
    monkeypatch.setattr(_extension, "_build", lambda kind: fake)
    monkeypatch.setenv(_cuda_variants.VARIANTS_ENV, "second")
    assert _extension.load("cuda") is fake
    assert fake.on == {"first": False, "second": True}


def test_a_wrong_name_in_the_variable_fails_every_load_of_the_cuda_extension(monkeypatch):
    fake = FakeCudaExtension()
    monkeypatch.setattr(_extension, "_results", {})
    monkeypatch.setattr(_extension, "_build", lambda kind: fake)
    monkeypatch.setenv(_cuda_variants.VARIANTS_ENV, "third")
    for _ in range(2):  # not remembered as loaded
        with pytest.raises(ValueError, match="TALK_HF_CUDA_VARIANTS names \\['third'\\]"):
            _extension.load("cuda")
    monkeypatch.setenv(_cuda_variants.VARIANTS_ENV, "first")
    assert _extension.load("cuda") is fake and fake.on["first"]


def test_the_cpu_extension_ignores_no_switch_it_could_take(monkeypatch):
    """The CPU extension has no candidates: loading it neither reads nor needs the variable."""
    built = []
    monkeypatch.setattr(_extension, "_results", {})
    monkeypatch.setattr(_extension, "_build", lambda kind: built.append(kind) or object())
    monkeypatch.setenv(_cuda_variants.VARIANTS_ENV, "anything")
    _extension.load("cpu")
    assert built == ["cpu"]


def test_a_block_switches_exactly_its_candidates_and_restores_the_variables(monkeypatch):
    fake = FakeCudaExtension()
    monkeypatch.setenv(_cuda_variants.VARIANTS_ENV, "first")
    _cuda_variants.apply_environment(fake)
    with _cuda_variants.cuda_variants(fake, ["second"]):
        assert fake.on == {"first": False, "second": True}
    assert fake.on == {"first": True, "second": False}
    with pytest.raises(RuntimeError, match="inside"), _cuda_variants.cuda_variants(fake, []):
        assert fake.on == {"first": False, "second": False}
        raise RuntimeError("inside")
    assert fake.on == {"first": True, "second": False}
    with pytest.raises(ValueError, match="names \\['third'\\]"), _cuda_variants.cuda_variants(fake, ["third"]):
        pass
    assert fake.on == {"first": True, "second": False}


# (batch, length, heads, head_size, max_left, max_right, offset top, packed) where each block's channels
# lie in one head (head size a multiple of 32): the shapes the candidate kernels take.
CANDIDATE_TALK_SHAPES = [
    (1, 1, 2, 32, 3, 3, 1.0, False),  # T = 1
    (2, 300, 2, 32, 7, 9, 1.0, False),  # a partial last tile
    (2, 700, 1, 64, 400, 3, 1.0, False),  # reach wider than one shared-memory pass
    (3, 130, 2, 32, 31, 0, 1.0, False),  # causal
    (2, 300, 2, 32, 7, 9, 3.0, False),  # offsets up to 3: windows clamped at the row's ends
    (2, 300, 2, 64, 7, 9, 1.0, True),  # packed rows
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", STREAM_DTYPES)
@pytest.mark.parametrize("batch,length,heads,head_size,max_left,max_right,top,packed", CANDIDATE_TALK_SHAPES)
def test_cuda_candidate_kernels_match_reference(
    dtype, batch, length, heads, head_size, max_left, max_right, top, packed
):
    extension = _extension.load("cuda")
    candidates = extension.cuda_variant_names()
    if not candidates:
        pytest.skip("this build has no candidate CUDA kernels")
    edges = fuzzed_edges(batch, length, max_left + max_right + 1, seed=length) if packed else None
    inputs = talk_inputs_on_cuda(dtype, batch, length, heads, head_size, max_right, top)
    for candidate in candidates:
        with _cuda_variants.cuda_variants(extension, [candidate]):
            compare_talk_conv_with_reference(inputs, head_size, max_left, max_right, top, edges=edges)
