"""bench_train.py's command line refuses timing settings that time nothing, before any model runs."""

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import bench_train  # noqa: E402


@pytest.mark.parametrize(
    "flags, message",
    [(["--steps", "0"], r"--steps \(0\) must be at least 1"), (["--warmup", "-1"], r"--warmup \(-1\)")],
)
def test_no_timed_step_or_a_negative_warm_up_is_refused(flags, message, capsys):
    with pytest.raises(SystemExit):
        bench_train.parse_args(flags)
    assert re.search(message, capsys.readouterr().err)
