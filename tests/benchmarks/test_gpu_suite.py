"""benchmarks/gpu_suite.sh's running order on a short lease, with a stand-in Python (no GPU needed):
a stage that outruns DEADLINE is stopped with what it started, later stages are skipped, the
archive PACK holds every stage's log after each one, and a failed build skips the stages that run
the kernels."""

import os
import shutil
import tarfile
from pathlib import Path

import pytest

from .. import processes

SUITE = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_suite.sh"
# Quick for every stage but the build, which outlives any deadline (or fails at once where
# $BUILD_FAILS is set); writes its pid for the check that a stopped stage leaves nothing running.
STAND_IN_PYTHON = """#!/usr/bin/env bash
case "$*" in
    *talk_hf.ops.build*) [ -n "${BUILD_FAILS:-}" ] && exit 1; echo $$ >"$PIDS/build"; exec sleep 120 ;;
    *) echo "ran $*" ;;
esac
"""


@pytest.mark.skipif(
    shutil.which("timeout") is None or not Path("/proc/self/stat").exists(), reason="needs timeout and /proc"
)
def test_a_stage_past_the_deadline_is_stopped_and_the_archive_keeps_what_finished(tmp_path):
    python = tmp_path / "python"
    python.write_text(STAND_IN_PYTHON)
    python.chmod(0o755)
    pids, archive = tmp_path / "pids", tmp_path / "gpu.tgz"
    pids.mkdir()
    # A 2 s lease with no time kept for the archive and stages of 1 s or more: the build (the third
    # stage) starts with 1 or 2 s left and outlives them; trainspeed then has none left.
    deadline = {"DEADLINE": "2", "DEADLINE_RESERVE": "0", "DEADLINE_MIN_STAGE": "1"}
    settings = {"PYTHON": str(python), "PIDS": str(pids), "PACK": str(archive), **deadline}
    result = processes.run(
        ["bash", str(SUITE), str(tmp_path / "results"), "generate", "nosuch", "build", "trainspeed"],
        env={**os.environ, **settings},
        timeout=60,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "=== generate passed" in output and "gpu_suite: unknown stage nosuch" in output
    assert "=== build STOPPED at DEADLINE=2 s after" in output
    assert "=== trainspeed skipped:" in output and "ran benchmarks/bench_train.py" not in output
    assert "gpu_suite: failed stages: nosuch build trainspeed" in output
    with tarfile.open(archive) as packed:
        names = sorted(Path(name).name for name in packed.getnames())
        generate_log = packed.extractfile("./generate.log").read().decode()
    assert names == ["build.log", "generate.log"] and "ran benchmarks/bench_generate.py --device cuda" in generate_log
    assert not running(int((pids / "build").read_text())), "the stopped stage left its process running"


def test_a_failed_build_skips_the_stages_that_run_the_kernels(tmp_path):
    python = tmp_path / "python"
    python.write_text(STAND_IN_PYTHON)
    python.chmod(0o755)
    result = processes.run(
        ["bash", str(SUITE), str(tmp_path / "results"), "build", "checks", "bench", "pack"],
        env={**os.environ, "PYTHON": str(python), "BUILD_FAILS": "1"},
        timeout=60,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "=== build FAILED" in output
    assert "=== checks skipped: the build failed" in output and "=== bench skipped: the build failed" in output
    assert "ran benchmarks/bench_ops.py" not in output and "=== pack passed" in output
    assert "gpu_suite: failed stages: build checks bench" in output


def running(pid):
    """Whether process `pid` exists and has not ended (an ended one may linger unreaped, as a zombie,
    where the container's first process reaps no orphans)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"
