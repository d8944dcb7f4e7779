"""What a resume compares besides the command line, and a precision that would not run.

The mixed precision that ran (Accelerate takes it from `accelerate config` under `accelerate launch`
when --mixed_precision is not given), the training text (replaced between the start and the resume)
and, under `--schedule cosine`, the run's length (the learning rate would jump): each is recorded at
the start and a resume that differs is refused before it trains. fp16 on a CPU, which Accelerate runs
as float32 without a word, is refused before anything is written. A test report on a split that
--max_eval_samples cut says so.
"""

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from accelerate.state import AcceleratorState
from common import run_settings
from common.records import report_test

from .conftest import TINY_MODEL
from .test_run_faults import train
from .test_start_faults import LM_FLAGS, LM_SCRIPT, LM_TEXT, lm_data, start_error, write_lines

BF16 = {"ACCELERATE_MIXED_PRECISION": "bf16"}  # what `accelerate launch` sets from `accelerate config`


@pytest.fixture(autouse=True)
def fresh_accelerate_state(monkeypatch):
    """Each run in this process makes its Accelerator anew: Accelerate keeps the first one's mixed
    precision for the whole process otherwise. No GPU: the precision checks are a CPU run's."""
    monkeypatch.setenv("ACCELERATE_USE_CPU", "1")
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def lm_args(data):
    """A tiny LM run on `data` of 2 optimizer steps under the cosine schedule, no test split."""
    return [
        *("--data_dir", data, *TINY_MODEL, *LM_FLAGS, "--schedule", "cosine", "--warmup_steps", "1"),
        *"--max_steps 2 --eval_every 2 --save_every 2 --threads 1".split(),
        *("--test_split", ""),
    ]


def resume(folder, *flags, env=None):
    """`--resume` of the run in `folder` (on `bf16_run`'s data) with `flags`, its environment `env` added."""
    AcceleratorState._reset_state(reset_partial_state=True)
    with pytest.MonkeyPatch.context() as patch:
        for name, value in (env or {}).items():
            patch.setenv(name, value)
        train(folder, "--resume", *flags, script=LM_SCRIPT, args=lm_args(DATA[0]))


DATA = []  # the data folder of `bf16_run`, which every resume reads (another --data_dir is another setting)


@pytest.fixture(scope="module")
def bf16_run(tmp_path_factory):
    """A finished run started as `accelerate launch` with bf16 in `accelerate config` starts it."""
    root = tmp_path_factory.mktemp("bf16")
    DATA[:] = [lm_data(root / "data")]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ACCELERATE_USE_CPU", "1")
        patch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
        AcceleratorState._reset_state(reset_partial_state=True)
        train(root / "run", script=LM_SCRIPT, args=lm_args(DATA[0]))
    AcceleratorState._reset_state(reset_partial_state=True)
    return root / "run"


@pytest.fixture
def run_copy(bf16_run, tmp_path):
    """A copy of `bf16_run`."""
    return Path(shutil.copytree(bf16_run, tmp_path / "run"))


@pytest.fixture
def replaced_text(bf16_run):
    """`bf16_run`'s training text with one line replaced by other text (as many lines); put back afterwards."""
    path = DATA[0] / "train.txt"
    original = path.read_text()
    replaced = list(LM_TEXT)
    replaced[1] = " the cat sat on the dog . "
    write_lines(path, replaced)
    yield
    path.write_text(original)


def resumes(folder):
    path = folder / "resumes.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_the_precision_that_ran_is_recorded_and_a_resume_under_another_is_refused(run_copy):
    assert json.loads((run_copy / "args.json").read_text())["mixed_precision_used"] == "bf16"
    assert json.loads((run_copy / "environment.json").read_text())["mixed_precision"] == "bf16"
    pattern = r"the mixed precision that ran \(--mixed_precision, else .*\) \"bf16\" then, \"no\" now"
    with pytest.raises(SystemExit, match=pattern + ".* add --allow_changed_args"):
        resume(run_copy)  # plain python: no accelerate config, so fp32
    assert resumes(run_copy) == []
    resume(run_copy, env=BF16)  # the same precision: resumes
    assert [record["changed"].keys() for record in resumes(run_copy)] == [{"output_dir"}]  # a copy


def test_a_resume_on_replaced_training_text_is_refused(run_copy, replaced_text):
    saved = json.loads((run_copy / "args.json").read_text())["train_data"]
    assert saved["records"] == len(LM_TEXT)
    pattern = r"the training split's text \(its records and their SHA-256\) \{\"records\": 16, \"sha256\": "
    with pytest.raises(SystemExit, match=pattern):
        resume(run_copy, env=BF16)
    assert resumes(run_copy) == []
    resume(run_copy, "--allow_changed_args", env=BF16)  # on purpose: recorded
    changed = resumes(run_copy)[-1]["changed"]["train_data"]
    assert changed["start"] == saved and changed["now"]["sha256"] != saved["sha256"]


def test_a_new_length_under_the_cosine_schedule_is_refused_or_warned_about(run_copy, capsys):
    with pytest.raises(SystemExit, match=r"--max_steps 2 then, 4 now\. --schedule cosine .* the learning rate jumps"):
        resume(run_copy, "--max_steps", 4, env=BF16)
    assert resumes(run_copy) == []
    resume(run_copy, "--max_steps", 3, "--allow_changed_args", env=BF16)
    assert "warning: --allow_changed_args: --max_steps 2 then, 3 now." in capsys.readouterr().err


@pytest.mark.parametrize(
    "given, env", [(["--mixed_precision", "fp16"], {}), ([], {"ACCELERATE_MIXED_PRECISION": "fp16"})]
)
def test_fp16_on_a_cpu_is_refused_before_anything_is_written(tmp_path, monkeypatch, given, env):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    data = lm_data(tmp_path / "data")
    message = start_error(LM_SCRIPT, data, tmp_path / "run", *LM_FLAGS, *given, "--threads", "1")
    assert "--mixed_precision fp16" in message and "on device cpu" in message and "bf16" in message
    assert ("accelerate config" in message) == (not given)


# --- what the comparison makes of the records ----------------------------------------------------------


def settings(**changes):
    """Recorded settings of a run under `--schedule`, with `changes`."""
    base = {"schedule": "cosine", "max_steps": None, "epochs": 10, "max_train_samples": None, "lr": 1e-3}
    return {**base, "train_data": {"records": 3, "sha256": "a"}, **changes}


def check(tmp_path, saved, given, allow_changed=False):
    (tmp_path / "args.json").write_text(json.dumps(saved))
    return run_settings.check_settings(tmp_path, given, allow_changed=allow_changed)


def test_other_text_asked_for_is_named_by_its_option_not_again_as_changed_text(tmp_path):
    given = settings(max_train_samples=60, train_data={"records": 60, "sha256": "b"})
    assert run_settings.changed_settings(settings(), given) == {"max_train_samples": (None, 60)}
    assert run_settings.changed_settings(settings(), settings(train_data={"records": 3, "sha256": "b"})).keys() == {
        "train_data"
    }


@pytest.mark.parametrize(
    "given, refused",
    [
        (settings(epochs=12), True),  # the epochs set the length
        (settings(max_steps=40, epochs=12), True),
        (settings(schedule="inverse_sqrt", epochs=12), False),  # no length in that schedule (schedule: refused)
    ],
)
def test_the_cosine_length_compares_what_sets_it(tmp_path, given, refused):
    saved = settings() if given["schedule"] == "cosine" else settings(schedule="inverse_sqrt")
    if refused:
        with pytest.raises(SystemExit, match="the learning rate jumps"):
            check(tmp_path, saved, given)
    else:
        assert check(tmp_path, saved, given) == {"epochs": (10, 12)}


def test_epochs_that_no_longer_set_the_length_may_change(tmp_path):
    saved = settings(max_steps=40)
    assert check(tmp_path, saved, settings(max_steps=40, epochs=3)) == {"epochs": (10, 3)}


def test_a_run_that_recorded_no_precision_or_text_resumes_as_before(tmp_path):
    saved = {name: value for name, value in settings().items() if name != "train_data"}
    assert check(tmp_path, saved, settings(mixed_precision_used="no")) == {}


def test_the_fingerprint_sees_a_changed_text_and_a_moved_column_value():
    one = run_settings.data_fingerprint({"source": ["a b", "c"], "target": ["x", "y"]})
    assert one["records"] == 2
    assert one != run_settings.data_fingerprint({"source": ["a", "b c"], "target": ["x", "y"]})
    assert one != run_settings.data_fingerprint({"source": ["a b", "c"], "target": ["y", "x"]})


# --- the test report of a cut split ----------------------------------------------------------------------


@pytest.mark.parametrize("max_eval_samples, records, whole", [(8, 8, False), (8, 5, True), (None, 40, True)])
def test_a_test_report_on_a_cut_split_says_so(tmp_path, max_eval_samples, records, whole):
    printed = []
    accelerator = SimpleNamespace(print=printed.append, is_main_process=True)
    args = SimpleNamespace(output_dir=tmp_path, max_eval_samples=max_eval_samples)
    report_test(accelerator, args, tmp_path / "best", {"valid_loss": 2.0}, "test", records)
    result = json.loads((tmp_path / "test_results.json").read_text())
    assert result["records"] == records and result["whole_split"] is whole and result["test_loss"] == 2.0
    cut = f", on its first {records} records only (--max_eval_samples {max_eval_samples})"
    assert printed[0].endswith(cut) != whole and printed[0].startswith("test (test) with")
