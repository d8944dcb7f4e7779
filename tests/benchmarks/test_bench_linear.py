"""bench_linear.py end to end at tiny sizes: every shape, row count and method is measured and the
ratios are the ones its docstring defines."""

import json
import subprocess
import sys

import pytest

from talk_hf.ops import _extension

from .conftest import BENCHMARKS


def test_the_script_measures_every_shape_and_row_count(tmp_path):
    try:
        _extension.preflight("cpu")
    except _extension.ExtensionUnavailable as error:
        pytest.skip(str(error))
    out = tmp_path / "linear.json"
    subprocess.run(
        [
            sys.executable,
            "bench_linear.py",
            "--d-model",
            "16",
            "--ffn",
            "32",
            "--vocab",
            "40",
            "--rows",
            "1",
            "3",
            "--calls",
            "2",
            "--rounds",
            "1",
            "--megabytes",
            "1",
            "--threads",
            "1",
            "--out",
            str(out),
        ],
        cwd=BENCHMARKS,
        check=True,
        capture_output=True,
    )
    report = json.loads(out.read_text())
    assert report["shapes"] == {
        "mixer input + GLU": [32, 16],
        "mixer output": [16, 16],
        "FFN in": [32, 16],
        "FFN out": [16, 32],
        "output layer": [40, 16],
    }
    for per_rows in report["results"].values():
        assert set(per_rows) == {"1", "3"}
        for figures in per_rows.values():
            assert figures["kernel_speedup"] == pytest.approx(
                figures["few_rows_linear_GBps"] / figures["F.linear_GBps"]
            )
            assert figures["kernel_over_sequential_read"] == pytest.approx(
                figures["few_rows_linear_GBps"] / figures["sequential read_GBps"]
            )
            assert figures["kernel_over_conv1d_layout"] == pytest.approx(
                figures["few_rows_linear_GBps"] / figures["Conv1D layout (addmm)_GBps"]
            )
    assert report["cpu_threads"] == 1
