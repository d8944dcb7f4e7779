"""The benchmark scripts' folder (and the examples', whose model builders `_models` shares) on sys.path,
so that the tests import the scripts and their helper modules (``bench_serving``, ``_timing``, ...) by name,
as the scripts import each other when run from benchmarks/."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
for folder in (ROOT / "examples", BENCHMARKS):  # benchmarks/ first
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
