"""Helpers for the example tests: the shared `common` package on sys.path, script runners, tiny sizes."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from .. import processes

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
DATA = Path(os.environ.get("TALK_HF_TEST_DATA") or ROOT.parent / "shared" / "data")  # the data pack (README there)
MULTI30K = DATA / "multi30k"
WIKITEXT = DATA / "wikitext-2"
sys.path.insert(0, str(EXAMPLES))

# A model small enough that a step takes milliseconds: what the tests check is the plumbing.
TINY_MODEL = "--d_model 32 --ffn_dim 64 --heads 2 --decoder_layers 1".split()
TRANSLATION = [
    *("--data_dir", str(MULTI30K), *TINY_MODEL, "--encoder_layers", "1"),
    *"--max_train_samples 200 --max_eval_samples 8 --vocab_size 300 --max_tokens 300 --num_beams 2".split(),
    *"--warmup_steps 2 --log_every 1".split(),
]


def without_options(args: list[str], *names: str) -> list[str]:
    """``args`` without the options ``names`` and their values."""
    kept, skip = [], False
    for arg in args:
        if arg in names:
            skip = True
        elif skip:
            skip = False
        else:
            kept.append(arg)
    return kept


# SliceNet has no feed-forward blocks and one attention head: the script rejects those flags.
SLICENET_TRANSLATION = without_options(TRANSLATION, "--ffn_dim", "--heads")
LANGUAGE_MODELING = [
    *("--data_dir", str(WIKITEXT), *TINY_MODEL),
    *"--max_train_samples 120 --max_eval_samples 40 --block_size 32 --max_tokens 128".split(),
    *"--warmup_steps 2 --log_every 1".split(),
]


requires_data = pytest.mark.skipif(not MULTI30K.is_dir() or not WIKITEXT.is_dir(), reason=f"no data pack at {DATA}")


def run(script, *args, launcher=(), env=None, timeout=300):
    """Run an example script (`examples/<script>`) in a fresh offline process; fail with its output
    (after `timeout` seconds, with every process it started killed)."""
    environment = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        # These tests check the training plumbing; the compiled kernels have their own tests, and a
        # first (or, after a source change, renewed) kernel build would dominate their run time.
        "TALK_HF_BACKEND": "torch",
    }
    command = [*launcher, str(EXAMPLES / script), *map(str, args)]
    if not launcher:
        command.insert(0, sys.executable)
    try:
        result = processes.run(command, timeout=timeout, cwd=ROOT, env={**environment, **(env or {})})
    except subprocess.TimeoutExpired as stopped:  # every process it started (a launcher's ranks too) is gone
        pytest.fail(f"{' '.join(command)} timed out after {timeout} s:\n{tails(stopped.stdout, stopped.stderr)}")
    assert result.returncode == 0, f"{' '.join(command)} failed:\n{tails(result.stdout, result.stderr)}"
    return result.stdout + result.stderr


def tails(stdout: str, stderr: str) -> str:
    """The ends of a script's stdout and stderr, for a failure message."""
    return f"{stdout[-3000:]}\n{stderr[-6000:]}"


def read_log(output_dir):
    """The records of `output_dir/log.jsonl`: (training steps, evaluations)."""
    records = [json.loads(line) for line in (Path(output_dir) / "log.jsonl").read_text().splitlines()]
    return [r for r in records if "loss" in r], [r for r in records if "valid_loss" in r]


def load_script(name):
    """The example script `examples/<name>` as a module (its `main` does not run)."""
    spec = importlib.util.spec_from_file_location(name.replace("/", "_").replace("-", "_")[:-3], EXAMPLES / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Vocabulary(SimpleNamespace):
    """What `build_model` reads of a tokenizer: its length (50) and special ids, given as keywords."""

    def __len__(self):
        return 50
