"""benchmarks/_device.cpu_family: the CPU family the serving results are kept by, read from cpuinfo."""

import platform
import sys

import pytest
from _device import cpu_family


@pytest.mark.parametrize(
    "vendor,family",
    [("GenuineIntel", "intel"), ("AuthenticAMD", "amd"), (None, platform.machine().lower())],
    ids=["intel", "amd", "neither"],
)
def test_cpu_family_reads_the_vendor(tmp_path, vendor, family):
    cpuinfo = tmp_path / "cpuinfo"
    lines = ["processor\t: 0", "model name\t: Some CPU", "flags\t\t: fpu sse avx512f"]
    if vendor is not None:
        lines.insert(1, f"vendor_id\t: {vendor}")
    cpuinfo.write_text("\n".join(lines) + "\n")
    assert cpu_family(cpuinfo) == family


def test_cpu_family_without_cpuinfo(tmp_path):
    assert cpu_family(tmp_path / "missing") == platform.machine().lower()


@pytest.mark.parametrize(
    ("script", "never_reached"),
    [
        ("bench_generate", "build_models"),
        ("bench_speculative", "next_token_table"),
        ("bench_ops", "measure_references"),
    ],
)
def test_every_script_with_a_device_option_stops_on_a_device_that_cannot_run(script, never_reached, monkeypatch):
    """--device cuda on a torch built without CUDA stops at the start with check_device_runs' message
    (torch's raw AssertionError came from the first .to(device)), before anything is built or measured."""
    import importlib

    import torch

    module = importlib.import_module(script)
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: False)
    monkeypatch.setattr(module, never_reached, pytest.fail)
    monkeypatch.setattr(sys, "argv", [f"{script}.py", "--device", "cuda"])
    with pytest.raises(
        SystemExit, match=r"--device cuda: this torch \(.*\) is built without CUDA.*; or pass --device cpu"
    ):
        module.main()
