"""Run folders and late failures (issue #57, items 1 and 6): a symlinked best/, an --output_dir that
is a file or overlaps --data_dir, a user's own `.lock.json`, and a --push_to_hub that could never
upload. Each is refused at the start naming the option or the file, or handled without following a
link or leaving debris; none fails after the training. No test touches the network: the Hub calls
are replaced (`huggingface_hub.whoami`, `create_repo`, `upload_folder`).
"""

import json
from pathlib import Path
from types import SimpleNamespace

import huggingface_hub
import pytest
from accelerate import Accelerator
from common import hub, run_folder, run_outputs
from common.atomic_files import replace_dir
from common.data import split_name
from common.folder_saves import save_folder
from huggingface_hub.errors import LocalTokenNotFoundError

from .conftest import load_script
from .test_start_faults import LM_FLAGS, LM_SCRIPT, lm_data, start_error

# --- a symlinked folder of the run ------------------------------------------------------------------------


def save(accelerator, final, text):
    """`save_folder` of a folder holding `weights.txt` with `text`."""
    save_folder(accelerator, final, lambda tmp: (tmp.mkdir(), (tmp / "weights.txt").write_text(text)))


def test_saves_over_a_symlinked_best_replace_the_link_and_leave_its_target(tmp_path, capsys):
    """Saves over a best/ that links elsewhere replace the link itself, every time (no best.old link left
    behind, no NotADirectoryError at the next save), and leave what it links to as it was."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "weights.txt").write_text("the user's")
    run = tmp_path / "run"
    run.mkdir()
    (run / "best").symlink_to(elsewhere, target_is_directory=True)
    accelerator = Accelerator(cpu=True)
    save(accelerator, run / "best", "first")
    assert f"warning: {run / 'best'} is a symbolic link (to {elsewhere})" in capsys.readouterr().err
    for text in ("second", "third"):
        save(accelerator, run / "best", text)
    assert not (run / "best").is_symlink() and (run / "best" / "weights.txt").read_text() == "third"
    assert sorted(p.name for p in run.iterdir()) == ["best"]
    assert (elsewhere / "weights.txt").read_text() == "the user's"


@pytest.mark.parametrize("link", ["best.old", "best.tmp"])
def test_a_leftover_link_beside_the_folder_is_removed_not_written_through(tmp_path, link):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("the user's")
    run = tmp_path / "run"
    (run / "best").mkdir(parents=True)
    (run / link).symlink_to(elsewhere, target_is_directory=True)
    save(Accelerator(cpu=True), run / "best", "new")
    assert sorted(p.name for p in run.iterdir()) == ["best"]
    assert sorted(p.name for p in elsewhere.iterdir()) == ["keep.txt"]


def test_replace_dir_moves_a_file_link_aside_too(tmp_path):
    target = tmp_path / "target.txt"
    target.write_text("kept")
    (tmp_path / "final").symlink_to(target)
    (tmp_path / "tmp").mkdir()
    replace_dir(tmp_path / "tmp", tmp_path / "final")
    assert (tmp_path / "final").is_dir() and not (tmp_path / "final.old").exists() and target.read_text() == "kept"


def test_the_hub_copy_replaces_a_link_without_writing_through_it(tmp_path):
    best, elsewhere = tmp_path / "run" / "best", tmp_path / "elsewhere"
    best.mkdir(parents=True)
    (best / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    elsewhere.mkdir()
    (tmp_path / "run" / "hub").symlink_to(elsewhere, target_is_directory=True)
    folder = hub.hub_folder(tmp_path / "run")
    assert not folder.is_symlink() and (folder / "config.json").is_file() and list(elsewhere.iterdir()) == []


# --- --output_dir -----------------------------------------------------------------------------------------


def parse(*flags):
    return load_script(LM_SCRIPT).parse_args([*map(str, flags)])


def test_an_output_dir_that_is_a_file_or_under_one_is_refused_at_the_start(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit, match=f"^error: --output_dir {tmp_path / 'notes.txt'} is a file, not a folder"):
        parse("--output_dir", tmp_path / "notes.txt")
    under = tmp_path / "notes.txt" / "run"
    pattern = f"^error: --output_dir {under} lies under {tmp_path / 'notes.txt'}, which is a file, not a folder"
    with pytest.raises(SystemExit, match=pattern):
        parse("--output_dir", under)
    assert (tmp_path / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("where", ["same", "inside data", "holding data"])
def test_an_output_dir_that_overlaps_the_data_dir_is_refused_at_the_start(tmp_path, where):
    """Once the same folder trained to the end and then failed reading its own `.lock` as a split."""
    data = lm_data(tmp_path / "data")
    output = {"same": data, "inside data": data / "runs" / "one", "holding data": tmp_path}[where]
    with pytest.raises(SystemExit, match=f"^error: --output_dir {output} and --data_dir {data} overlap: "):
        parse("--data_dir", data, "--output_dir", output)


def test_the_data_reader_takes_no_hidden_file_for_a_split(tmp_path):
    """A run's `.lock` once made a split named '' that `test` matched beside `test_2016_flickr`."""
    for name in ("test_2016_flickr.de.gz", "test_2016_flickr.en.gz", ".lock", ".lock.json", ".DS_Store"):
        (tmp_path / name).write_bytes(b"")
    assert split_name(tmp_path, "test") == "test_2016_flickr"


# --- the lock's files -------------------------------------------------------------------------------------


def test_a_users_lock_json_is_refused_and_kept_unless_overwrite_is_given(tmp_path, capsys):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / ".lock.json").write_text('{"my": "settings"}')
    with pytest.raises(SystemExit, match=f"--output_dir {folder} holds .lock.json, which no run of these scripts"):
        run_folder.take_lock(folder)
    assert (folder / ".lock.json").read_text() == '{"my": "settings"}'
    run_folder.take_lock(folder, overwrite=True).release()
    assert f"--overwrite_output_dir: replacing {folder / '.lock.json'}" in capsys.readouterr().out
    assert set(json.loads((folder / ".lock.json").read_text())) == {"pid", "host", "started", "command"}
    run_folder.take_lock(folder).release()  # a run's own lock files, as a killed run leaves them: no refusal


def test_a_runs_own_damaged_lock_json_is_written_again(tmp_path, capsys):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / ".lock.json").write_text('{"pid": 12')  # cut short, in a folder that a run's manifest records
    (folder / run_outputs.MANIFEST).write_text(json.dumps({"outputs": ["args.json", "state"]}))
    run_folder.take_lock(folder).release()
    assert "replacing" not in capsys.readouterr().out
    assert set(json.loads((folder / ".lock.json").read_text())) == {"pid", "host", "started", "command"}
    (folder / ".lock.json").unlink()
    (folder / ".lock.json").symlink_to(folder / run_outputs.MANIFEST)  # a link is never a run's record
    with pytest.raises(SystemExit, match="holds .lock.json, which no run"):
        run_folder.take_lock(folder)


def test_a_users_lock_file_is_not_truncated_and_a_linked_one_not_followed(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / ".lock").write_text("my notes")
    with pytest.raises(SystemExit, match="holds .lock, which no run"):
        run_folder.take_lock(folder)
    assert (folder / ".lock").read_text() == "my notes"
    (folder / ".lock").unlink()
    target = tmp_path / "empty.txt"
    target.write_text("")
    (folder / ".lock").symlink_to(target)
    with pytest.raises(SystemExit, match="holds .lock, which no run"):
        run_folder.take_lock(folder)
    run_folder.take_lock(folder, overwrite=True).release()
    assert not (folder / ".lock").is_symlink() and target.read_text() == ""


def test_a_fresh_run_in_a_folder_with_a_users_lock_json_stops_before_writing(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / ".lock.json").write_text("[1, 2]")
    args = parse("--output_dir", folder, "--data_dir", lm_data(tmp_path / "data"))
    with pytest.raises(SystemExit, match="holds .lock.json, which no run of these scripts wrote"):
        run_folder.open_run(Accelerator(cpu=True), args)
    assert sorted(p.name for p in folder.iterdir()) == [".lock.json"]


# --- --push_to_hub ----------------------------------------------------------------------------------------


@pytest.fixture
def online(monkeypatch):
    """The Hub as reachable with a write token: `whoami` answers (and counts its calls)."""
    calls = []
    monkeypatch.setattr(huggingface_hub, "is_offline_mode", lambda: False)

    def whoami(*args, **kwargs):
        calls.append(args)
        return {"name": "someone", "auth": {"accessToken": {"role": "write"}}}

    monkeypatch.setattr(huggingface_hub, "whoami", whoami)
    return calls


def push_args(hub_model_id="someone/talk-small"):
    return SimpleNamespace(push_to_hub=True, hub_model_id=hub_model_id)


def test_an_upload_that_can_work_passes_the_start_check(online):
    hub.check_upload(push_args())
    hub.check_upload(SimpleNamespace(push_to_hub=False, hub_model_id=None))  # nothing to check, nothing asked
    assert len(online) == 1


def test_an_invalid_hub_model_id_is_refused_at_the_start_of_the_script(tmp_path, online):
    data = lm_data(tmp_path / "data")
    message = start_error(
        LM_SCRIPT, data, tmp_path / "run", *LM_FLAGS, "--push_to_hub", "--hub_model_id", "bad id/../x"
    )
    assert message.startswith("error: --hub_model_id 'bad id/../x' is no Hub repository id (")
    assert online == []  # refused before asking the Hub


def test_push_to_hub_offline_is_refused_at_the_start(monkeypatch):
    monkeypatch.setattr(huggingface_hub, "is_offline_mode", lambda: True)
    monkeypatch.setattr(huggingface_hub, "whoami", lambda *a, **k: pytest.fail("asked the Hub while offline"))
    with pytest.raises(SystemExit, match="^error: --push_to_hub uploads at the end of the run, but HF_HUB_OFFLINE"):
        hub.check_upload(push_args())


@pytest.mark.parametrize(
    "error, shown",
    [
        (LocalTokenNotFoundError("Token is required (`token=True`), but no token found."), "LocalTokenNotFoundError"),
        (ConnectionError("[Errno -3] Temporary failure in name resolution"), "ConnectionError: [Errno -3]"),
    ],
)
def test_no_token_or_no_network_is_refused_at_the_start(monkeypatch, online, error, shown):
    def whoami(*args, **kwargs):
        raise error

    monkeypatch.setattr(huggingface_hub, "whoami", whoami)
    with pytest.raises(SystemExit, match=r"^error: --push_to_hub: the Hub does not answer") as stop:
        hub.check_upload(push_args())
    assert shown in str(stop.value.code) and "hf auth login" in str(stop.value.code)


def test_a_read_only_token_is_refused_at_the_start(monkeypatch, online):
    monkeypatch.setattr(
        huggingface_hub, "whoami", lambda *a, **k: {"name": "someone", "auth": {"accessToken": {"role": "read"}}}
    )
    with pytest.raises(SystemExit, match="the token of someone may only read"):
        hub.check_upload(push_args())


def test_an_upload_that_fails_at_the_end_names_the_ready_folder_and_the_command(tmp_path, monkeypatch):
    best = tmp_path / "best"
    best.mkdir()
    (best / "config.json").write_text(json.dumps({"model_type": "gpt2"}))

    def create_repo(*args, **kwargs):
        raise ConnectionError("[Errno 101] Network is unreachable")

    monkeypatch.setattr(huggingface_hub, "create_repo", create_repo)
    args = SimpleNamespace(**vars(push_args()), output_dir=str(tmp_path))
    with pytest.raises(SystemExit) as stop:
        hub.upload(Accelerator(cpu=True), args)
    message = str(stop.value.code)
    assert "ConnectionError: [Errno 101] Network is unreachable" in message
    assert f"`hf upload someone/talk-small {tmp_path / 'hub'}`" in message and Path(tmp_path / "hub").is_dir()
