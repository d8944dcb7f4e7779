"""``import talk_hf`` prints nothing, with torchao installed (the ``serving`` extra) or not:
transformers imports torchao, whose import logs missing CUDA kernel libraries and torch's pytree
deprecations (`talk_hf.quiet_imports`).  Only those records are dropped."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from talk_hf import quiet_imports

TRAINER_SCRIPTS = [("translation", "run_translation.py"), ("language-modeling", "run_clm.py")]
STANDARD_LIBRARY = sys.stdlib_module_names | {"__future__"}


def _printed(code: str) -> str:
    """stdout and stderr of a fresh Python running ``code``."""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    return result.stdout + result.stderr


def test_import_prints_nothing():
    assert _printed("import talk_hf") == ""


def test_weight_only_int8_prints_nothing():
    """The int8 path that imports torchao's quantization API itself."""
    pytest.importorskip("torchao")
    code = (
        "import torch, talk_hf; talk_hf.quantize_int8(torch.nn.Sequential(torch.nn.Linear(4, 4)), method='weight_only')"
    )
    assert _printed(code) == ""


def test_command_line_entry_prints_only_its_help():
    printed = _printed(
        "import runpy, sys; sys.argv = ['build', '--help']; runpy.run_module('talk_hf.ops.build', run_name='__main__')"
    )
    assert "Failed to load" not in printed and "_pytree" not in printed
    assert printed.startswith("usage:")


def test_the_trainer_scripts_import_talk_hf_before_transformers():
    """The scripts that import transformers themselves import talk_hf first (its quiet import)."""
    scripts = [Path(__file__).parents[1] / "examples" / folder / name for folder, name in TRAINER_SCRIPTS]
    for script in scripts:
        imports = [line for line in script.read_text().splitlines() if line.startswith(("import ", "from "))]
        third_party = [line for line in imports if line.split()[1].split(".")[0] not in STANDARD_LIBRARY]
        assert third_party[0].startswith("import talk_hf"), (script, third_party[:2])
    printed = _printed(
        f"import runpy, sys; sys.argv = ['run', '--help']; runpy.run_path({str(scripts[0])!r}, run_name='__main__')"
    )
    assert "Failed to load" not in printed and "_pytree" not in printed and "usage:" in printed


def test_transformers_alone_prints_what_is_dropped():
    """The fault the tests above guard against, where this machine shows it: transformers' own import
    prints torchao's lines (not on a machine where torchao's kernels load)."""
    pytest.importorskip("torchao")
    printed = _printed("import transformers.modeling_utils")
    if "Failed to load" not in printed:
        pytest.skip("torchao's kernel libraries load here: nothing to drop")
    assert "torchao" in printed


def _record(logger_name: str, msg: str, *args) -> logging.LogRecord:
    return logging.LogRecord(logger_name, logging.WARNING, __file__, 1, msg, args, None)


class TorchaoEnum:
    __module__ = "torchao.quantization.quantize_.common.kernel_preference"


class OtherEnum:
    __module__ = "someone_else"


@pytest.mark.parametrize(
    ("record", "dropped"),
    [
        (_record("torchao", "Failed to load /venv/torchao/_C_mxfp8.cpython-310-x86_64-linux-gnu.so: no"), True),
        (_record("torchao", "Failed to load /venv/torchao/_C_cutlass_90a.abi3.so: Could not load"), True),
        (_record("torchao", "Failed to load /venv/elsewhere/_C_mine.so: no"), False),
        (_record("torchao", "Skipping import of cpp extensions due to incompatible torch version"), False),
    ],
)
def test_only_torchao_kernel_library_lines_are_dropped(record, dropped):
    assert quiet_imports._is_torchao_kernel_library_warning(record) is dropped


def test_only_torchao_enum_deprecations_are_dropped():
    template = (
        quiet_imports._ENUM_CONSTANT_DEPRECATED + ". Calling register_constant() on Enum subclasses is deprecated"
    )
    assert quiet_imports._is_torchao_enum_deprecation(_record("torch.utils._pytree", template, TorchaoEnum))
    assert not quiet_imports._is_torchao_enum_deprecation(_record("torch.utils._pytree", template, OtherEnum))
    assert not quiet_imports._is_torchao_enum_deprecation(
        _record("torch.utils._pytree", "%s is not a pytree", TorchaoEnum)
    )


def test_the_filters_are_removed_after_the_import():
    for logger_name in quiet_imports._DROPPED:
        assert logging.getLogger(logger_name).filters == []
