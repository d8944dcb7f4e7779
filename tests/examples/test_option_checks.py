"""The checks of the shared options."""

import pytest
from common import options

from .conftest import load_script


def test_threads_must_be_positive():
    module = load_script("translation/train.py")
    assert module.parse_args(["--output_dir", "x", "--threads", "1"]).threads == 1
    with pytest.raises(SystemExit, match="--threads must be >= 1, not 0"):
        module.parse_args(["--output_dir", "x", "--threads", "0"])
    assert "threads" in options.MAY_CHANGE_ON_RESUME  # how fast, not what, a run trains
