"""benchmarks/_device.cpu_family: the CPU family the serving results are kept by, read from cpuinfo."""

import platform
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from _device import cpu_family  # noqa: E402


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
