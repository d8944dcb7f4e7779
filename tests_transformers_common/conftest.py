"""Setup of the run of transformers' ``ModelTesterMixin`` against talk_hf's models.

These tests need transformers' ``tests/test_modeling_common.py``, which only its source
distribution ships: run them through ``python .ci/transformers_common_tests.py``, which unpacks it
and names the folder in ``TRANSFORMERS_COMMON_TESTS``.  That is also why they live outside
``tests/``: the README's ``python -m pytest -q`` must not need the sdist.
"""

from __future__ import annotations

import os
import re
import sys

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

if not os.environ.get("TRANSFORMERS_COMMON_TESTS"):
    raise pytest.UsageError(
        "run these tests with `python .ci/transformers_common_tests.py`: they need "
        "transformers' tests/test_modeling_common.py from its source distribution"
    )
sys.path.insert(0, os.environ["TRANSFORMERS_COMMON_TESTS"])

# ModelTesterMixin tests that do not apply to talk_hf's models, by name (a parameterized test's
# variants, ``<name>_<index>...``, included), with the reason.  The tests that check hidden states
# and attention weights together keep running: ``has_attentions = False`` (the mixin's switch for
# attention-free models, set in the test module) leaves the weights out of them.
NO_ATTENTION_WEIGHTS = "the mixers are convolutions: there are no self-attention weights to return"
ONE_ATTENTION_KERNEL = (
    "the attention to the source has one implementation (scaled_dot_product_attention; "
    "SliceNet's, plain matmuls): no eager, flash or flex one to dispatch to or compare with"
)
NOT_APPLICABLE = {
    "test_generation_tester_mixin_inheritance": "GenerationTesterMixin is left out: tests/models/test_generation.py "
    "covers generate()",
    "test_attention_outputs": NO_ATTENTION_WEIGHTS,
    "test_sliding_window_mask": "no sliding-window attention: the mixers' windows are the convolutions' own",
    "test_eager_matches_sdpa_inference": ONE_ATTENTION_KERNEL,
    "test_sdpa_can_dispatch_non_composite_models": ONE_ATTENTION_KERNEL,
    "test_sdpa_can_dispatch_composite_models": ONE_ATTENTION_KERNEL,
    "test_sdpa_can_dispatch_on_flash": ONE_ATTENTION_KERNEL,
    "test_sdpa_can_compile_dynamic": ONE_ATTENTION_KERNEL,
    "test_attn_implementation_composite_models": ONE_ATTENTION_KERNEL,
    "test_can_set_attention_dynamically_composite_model": ONE_ATTENTION_KERNEL,
    "test_flex_attention_with_grads": ONE_ATTENTION_KERNEL,
    "test_flash_attn_kernels_inference_equivalence": ONE_ATTENTION_KERNEL,
    "test_flash_attn_kernels_mps_inference_equivalence": ONE_ATTENTION_KERNEL,
    "test_flash_attn_2_can_compile_with_attention_mask_None_without_graph_break": ONE_ATTENTION_KERNEL,
    "test_flash_attn_2_fp32_ln": ONE_ATTENTION_KERNEL,
    **{
        f"test_flash_attn_{version}_{test}": ONE_ATTENTION_KERNEL
        for version in (2, 3, 4)
        for test in (
            "can_dispatch_composite_models",
            "from_config",
            "inference_equivalence",
            "inference_equivalence_right_padding",
        )
    },
}


def _not_applicable(item) -> str | None:
    """The test's entry of ``NOT_APPLICABLE`` (its name, or the name it was parameterized from)."""
    name = item.originalname
    return next((listed for listed in NOT_APPLICABLE if name == listed or re.match(rf"{listed}_\d", name)), None)


def pytest_collection_modifyitems(config, items):
    """Deselect the tests of ``NOT_APPLICABLE``."""
    deselected = [item for item in items if _not_applicable(item)]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if not _not_applicable(item)]


def pytest_terminal_summary(terminalreporter):
    """List the deselected tests that this transformers release has, by reason."""
    present = {_not_applicable(item) for item in terminalreporter.stats.get("deselected", [])} - {None}
    if present:
        terminalreporter.section("ModelTesterMixin tests that do not apply (deselected)")
        for reason in dict.fromkeys(NOT_APPLICABLE.values()):
            names = [name for name in NOT_APPLICABLE if name in present and NOT_APPLICABLE[name] == reason]
            if names:
                terminalreporter.write_line(f"{reason}: {', '.join(names)}")
