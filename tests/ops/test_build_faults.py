"""Faults of the compiled CPU extension's build folder, injected for real.

* A library cut short (a full disk, a power loss, a job killed while linking) or overwritten: a
  fresh process, or ``python -m talk_hf.ops.build``, must announce it and build it again, never
  import it (importing a library cut short is a bus error, exit 135, with no message).
* A build folder that cannot be used: ``$TALK_HF_BUILD_DIR`` at a regular file, or a read-only
  folder.  Under "auto" one warning and the PyTorch path; asked for by name, an error naming the
  folder and the variable; a read-only folder holding a finished build is used as it is.

The tests with a build start from a copy of one finished build (:func:`private_cpu_build`): a damaged
library then costs a link, not a compile, since ninja keeps the intact objects.
"""

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
import torch.utils.cpp_extension as cpp_extension

from talk_hf.ops import _extension, build, talk_conv
from talk_hf.ops._build import build_record
from talk_hf.ops._extension import BackendFallbackWarning, ExtensionUnavailable

from .. import processes
from ..models.helpers import CASES, model_inputs

CHECK_AN_OP = """
    import torch
    from talk_hf.ops import talk_conv
    x, offsets = torch.randn(2, 9, 4), 2 * torch.rand(2, 9, 2)
    compiled = talk_conv(x, offsets, offsets, 2, 2, backend="cpu")
    torch.testing.assert_close(compiled, talk_conv(x, offsets, offsets, 2, 2, backend="torch"))
    print("the compiled op matches the PyTorch path")
    """


def run(arguments: list[str], build_root: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``python <arguments>`` in a fresh process with ``$TALK_HF_BUILD_DIR=build_root``."""
    return processes.run(
        [sys.executable, *arguments], timeout=timeout, env={**os.environ, _extension.BUILD_DIR_ENV: str(build_root)}
    )


def outcome(result: subprocess.CompletedProcess) -> str:
    """What a failed process did, for assertion messages (a bus error shows as signal SIGBUS)."""
    died = f" (signal {signal.Signals(-result.returncode).name})" if result.returncode < 0 else ""
    return f"exit {result.returncode}{died}\n{result.stdout}\n{result.stderr}"


def damage(library: Path, how: str) -> None:
    """Damage a finished build's library as a fault would leave it."""
    size = library.stat().st_size
    if how == "cut short while linking":  # and killed before its completion record was written
        os.truncate(library, size // 2)
        build_record.completion_record("cpu", library.parent).unlink()
    elif how == "cut short later":  # e.g. a copy of the cache onto a full disk
        os.truncate(library, size // 2)
    elif how == "garbage":
        library.write_bytes(os.urandom(size))
    else:  # zeros: space allocated, never written (a power loss on some file systems)
        library.write_bytes(bytes(size))


def test_importing_a_library_cut_short_kills_the_process(private_cpu_build):
    """The fault is real: without the completion check, the process dies by a signal (a bus error
    on Linux), with no message."""
    library = build_record.library_path("cpu", private_cpu_build)
    damage(library, "cut short while linking")
    code = f"""
        import importlib.util, torch
        spec = importlib.util.spec_from_file_location("talk_hf_cpu", {str(library)!r})
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
        """
    result = run(["-c", textwrap.dedent(code)], private_cpu_build.parent, timeout=120)
    assert result.returncode < 0, outcome(result)


@pytest.mark.parametrize(
    "how,entry",
    [
        ("cut short while linking", "first use"),
        ("cut short while linking", "build command"),
        ("cut short later", "first use"),
        ("garbage", "build command"),
        ("zeros", "first use"),
    ],
)
def test_a_damaged_library_is_announced_and_built_again(
    how, entry, private_cpu_build, fresh_loader, monkeypatch, capsys
):
    library = build_record.library_path("cpu", private_cpu_build)
    damage(library, how)
    assert not _extension.is_built("cpu")
    if entry == "first use":
        result = run(["-c", textwrap.dedent(CHECK_AN_OP)], private_cpu_build.parent)
    else:
        result = run(["-m", "talk_hf.ops.build", "--cpu"], private_cpu_build.parent)
    assert result.returncode == 0, outcome(result)
    assert result.stderr.count(f"talk_hf: not loading {library}, which ") == 1, result.stderr
    assert "; building it again" in result.stderr and "the cpu kernels were built in" in result.stderr
    assert _extension.is_built("cpu")
    if entry == "build command":
        assert f"cpu: built in {private_cpu_build}" in result.stdout
        assert_used_as_it_is(private_cpu_build, monkeypatch, capsys)  # in this process, as a fresh one loads it
    else:
        assert "the compiled op matches the PyTorch path" in result.stdout


@pytest.mark.slow  # three fresh processes importing torch at once: ~30 s on 2 cores
def test_processes_finding_a_damaged_library_at_once_build_it_once(private_cpu_build):
    damage(build_record.library_path("cpu", private_cpu_build), "cut short while linking")
    command = [sys.executable, "-c", textwrap.dedent(CHECK_AN_OP)]
    environment = {**os.environ, _extension.BUILD_DIR_ENV: str(private_cpu_build.parent)}
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda _: processes.run(command, timeout=300, env=environment), range(3)))
    for result in results:
        assert result.returncode == 0 and "matches the PyTorch path" in result.stdout, outcome(result)
    said = "".join(result.stderr for result in results)
    assert said.count("talk_hf: not loading ") == 1 and said.count("the cpu kernels were built in") == 1, said


@pytest.fixture
def read_only():
    """Makes a folder and everything in it read-only for real, until the test ends.

    Write permission is taken away; root ignores it, so where the folder is still writable the
    files are also made immutable (``chattr +i``: refused even to root, unlike mode bits, and the
    nearest real fault to a read-only mount, which a test cannot make without privileges).  Skips
    where neither works.
    """
    undo = []

    def make_read_only(folder: Path) -> Path:
        paths = [folder, *folder.rglob("*")]
        for path in paths:
            path.chmod(path.stat().st_mode & ~0o222)
        undo.append(lambda: [path.chmod(path.stat().st_mode | 0o200) for path in paths])
        if writable(folder) and shutil.which("chattr"):
            if subprocess.run(["chattr", "-R", "+i", str(folder)], capture_output=True).returncode == 0:
                undo.append(lambda: subprocess.run(["chattr", "-R", "-i", str(folder)], check=True))
        if writable(folder):
            pytest.skip(f"cannot make {folder} read-only here (root without chattr +i)")
        return folder

    yield make_read_only
    for step in reversed(undo):
        step()


def writable(folder: Path) -> bool:
    """Whether a file can be created in ``folder``."""
    probe = folder / "probe"
    try:
        probe.touch()
    except OSError:
        return False
    probe.unlink()
    return True


@pytest.fixture(params=["a regular file", "a read-only folder"])
def unusable_root(request, tmp_path, monkeypatch, fresh_loader, read_only):
    """$TALK_HF_BUILD_DIR where nothing can be built: a regular file, or an empty read-only folder."""
    root = tmp_path / "cache"
    if request.param == "a regular file":
        root.write_text("not a folder")
    else:
        root.mkdir()
        read_only(root)
    monkeypatch.setenv(_extension.BUILD_DIR_ENV, str(root))
    return root


def test_auto_falls_back_with_one_warning_naming_the_folder(unusable_root, monkeypatch):
    monkeypatch.setenv("TALK_HF_BACKEND", "auto")
    case = next(case for case in CASES if case.name == "talk-lm")
    model, inputs = case.model(), model_inputs(case)
    with pytest.warns(BackendFallbackWarning) as caught, torch.no_grad():
        logits = [model(**inputs).logits for _ in range(2)]
    assert len(caught) == 1, [str(warning.message) for warning in caught]
    message = str(caught[0].message)
    assert f"its build folder {_extension.build_directory('cpu')} cannot be created or written (" in message
    assert f"Fix: point ${_extension.BUILD_DIR_ENV} (now {unusable_root}) at a writable folder" in message
    assert message.count("TALK_HF_BACKEND=torch") == 1  # the warning's own way to silence it
    monkeypatch.setenv("TALK_HF_BACKEND", "torch")
    with torch.no_grad():
        torch.testing.assert_close(logits[1], model(**inputs).logits)


def test_a_named_backend_is_an_error_naming_the_folder_and_variable(unusable_root, capsys):
    with pytest.raises(ExtensionUnavailable) as caught:
        _extension.load("cpu")
    assert not isinstance(caught.value, OSError)
    assert "cannot be created or written" in str(caught.value) and str(unusable_root) in str(caught.value)
    assert f"${_extension.BUILD_DIR_ENV}" in str(caught.value)
    assert build.main(["--cpu"]) == 1
    assert capsys.readouterr().err.startswith(f"cpu: FAILED: {caught.value}")


def assert_used_as_it_is(build_folder, monkeypatch, capsys):
    """The CPU op runs on the finished build in `build_folder`, and the build command reuses it:
    nothing is compiled."""
    monkeypatch.setattr(cpp_extension, "load", lambda **kwargs: pytest.fail("built again"))
    x, offsets = torch.randn(2, 9, 4), 2 * torch.rand(2, 9, 2)
    torch.testing.assert_close(
        talk_conv(x, offsets, offsets, 2, 2, backend="cpu"), talk_conv(x, offsets, offsets, 2, 2, backend="torch")
    )
    assert build.main(["--cpu"]) == 0
    assert capsys.readouterr().out == f"cpu: reused in {build_folder}\n"


def test_a_read_only_folder_with_a_private_cpu_build_is_used(
    private_cpu_build, fresh_loader, read_only, monkeypatch, capsys
):
    """Loading a finished build takes no lock and writes nothing."""
    read_only(private_cpu_build.parent)
    assert_used_as_it_is(private_cpu_build, monkeypatch, capsys)


def test_a_finished_build_loads_without_the_build_tools(private_cpu_build, fresh_loader, monkeypatch, capsys):
    """A compiler and ninja are needed to build, not to load a finished build (an image that ships
    a built cache, a compiler removed after the build); a build that is needed still names them."""
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    monkeypatch.setattr(cpp_extension, "is_ninja_available", lambda: False)
    assert_used_as_it_is(private_cpu_build, monkeypatch, capsys)
    build_record.completion_record("cpu", private_cpu_build).unlink()  # unfinished: a build is needed
    monkeypatch.setattr(_extension, "_results", {})
    with pytest.raises(ExtensionUnavailable, match=r"no C\+\+ compiler: '/nonexistent/c\+\+'"):
        _extension.load("cpu")


def test_a_read_only_folder_with_a_damaged_build_says_both(private_cpu_build, fresh_loader, read_only):
    damage(build_record.library_path("cpu", private_cpu_build), "garbage")
    read_only(private_cpu_build.parent)
    with pytest.raises(
        ExtensionUnavailable,
        match="cannot be created or written .*, and a build is needed there: "
        "the library does not match its completion record",
    ):
        _extension.load("cpu")
