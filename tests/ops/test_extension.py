"""The loader of the compiled backends: backend switch, preflight, one fallback warning, build lock."""

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import filelock
import pytest
import torch
import torch.utils.cpp_extension as cpp_extension

from talk_hf.ops import _extension, build, dynamic_conv, light_conv, prepare_backend, talk_conv
from talk_hf.ops._build import build_folder, build_lock, build_record, build_tools
from talk_hf.ops._extension import ExtensionUnavailable
from talk_hf.version import __version__

from .. import processes

x = torch.randn(1, 6, 4)
offsets = torch.rand(1, 6, 2)


def run_python(code: str, timeout: float = 180, **env: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter with extra environment variables."""
    return processes.run([sys.executable, "-c", textwrap.dedent(code)], timeout=timeout, env={**os.environ, **env})


def test_auto_never_builds_cuda_for_cpu_tensors(fresh_loader, monkeypatch):
    built = []
    build = _extension._build
    monkeypatch.setattr(_extension, "_build", lambda kind: built.append(kind) or build(kind))
    talk_conv(x, offsets, offsets, 2, 2, backend="auto")
    dynamic_conv(x, torch.rand(1, 6, 2, 3), 1, backend="auto")
    light_conv(x, torch.rand(2, 3), 1, backend="auto")
    assert built == ["cpu"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("through", ["argument", "environment"])
def test_forcing_cuda_without_cuda_raises_why(through, monkeypatch):
    backend = "cuda" if through == "argument" else None
    if through == "environment":
        monkeypatch.setenv("TALK_HF_BACKEND", "cuda")
    with pytest.raises(
        ExtensionUnavailable, match="cuda extension is unavailable: .*(CPU-only build|no CUDA GPU).*Fix:"
    ):
        talk_conv(x, offsets, offsets, 2, 2, backend=backend)
    with pytest.raises(ExtensionUnavailable, match="cuda extension is unavailable"):
        dynamic_conv(x, torch.rand(1, 6, 2, 3), 1, backend=backend)


def test_backend_argument_wins_over_environment(monkeypatch):
    monkeypatch.setenv("TALK_HF_BACKEND", "cuda")
    out = talk_conv(x, offsets, offsets, 2, 2, backend="torch")
    torch.testing.assert_close(out, talk_conv(x, offsets, offsets, 2, 2, backend="cpu"))


def test_unknown_backend_in_environment_is_named(monkeypatch):
    monkeypatch.setenv("TALK_HF_BACKEND", "gpu")
    with pytest.raises(ValueError, match=r"\$TALK_HF_BACKEND must be one of .*'gpu'"):
        light_conv(x, torch.rand(2, 3), 1)


def test_forced_backend_on_tensors_of_another_device():
    meta = torch.empty(1, 6, 4, device="meta")
    with pytest.raises(ValueError, match="backend 'cpu' runs on cpu tensors, but x is on meta"):
        light_conv(meta, torch.empty(2, 3, device="meta"), 1, backend="cpu")


def test_fallback_warns_once_per_process(tmp_path):
    """Without a C++ compiler, "auto" runs the PyTorch path and says so exactly once."""
    result = run_python(
        """
        import json, warnings, torch
        from talk_hf.ops import dynamic_conv, light_conv, talk_conv
        from talk_hf.ops._extension import BackendFallbackWarning, ExtensionUnavailable
        x, offsets = torch.randn(1, 6, 4), torch.rand(1, 6, 2)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            outs = [talk_conv(x, offsets, offsets, 2, 2) for _ in range(3)]
            dynamic_conv(x, torch.rand(1, 6, 2, 3), 1)
            light_conv(x, torch.rand(2, 3), 1)
        reference = talk_conv(x, offsets, offsets, 2, 2, backend="torch")
        try:
            talk_conv(x, offsets, offsets, 2, 2, backend="cpu")
            forced = None
        except ExtensionUnavailable as error:
            forced = str(error)
        print(json.dumps({
            "messages": [str(w.message) for w in caught if issubclass(w.category, BackendFallbackWarning)],
            "others": [str(w.message) for w in caught if not issubclass(w.category, BackendFallbackWarning)],
            "same": all(torch.equal(out, reference) for out in outs),
            "forced": forced,
        }))
        """,
        CXX="/nonexistent/c++",
        TALK_HF_BUILD_DIR=str(tmp_path),
        TALK_HF_BACKEND="",
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert len(report["messages"]) == 1, report
    assert "no C++ compiler" in report["messages"][0] and "TALK_HF_BACKEND=torch" in report["messages"][0]
    assert report["same"]
    assert "no C++ compiler" in report["forced"] and "Fix:" in report["forced"]
    assert not any(tmp_path.iterdir()), "a failed preflight must not start a build"


def test_stale_locks_of_a_killed_build_do_not_hang(private_cpu_build):
    # A killed build leaves torch's "lock" file and our (unheld) lock file behind, and no record
    # that it finished: the next process builds (links) again.
    (private_cpu_build / build_lock.TORCH_BATON).write_text("")
    (private_cpu_build / build_lock.BUILD_LOCK).write_text("")
    build_record.completion_record("cpu", private_cpu_build).unlink()
    code = """
        import torch
        from talk_hf.ops import talk_conv
        x, offsets = torch.randn(1, 6, 4), torch.rand(1, 6, 2)
        talk_conv(x, offsets, offsets, 2, 2, backend="cpu")
        print("loaded")
        """
    result = run_python(code, timeout=120, TALK_HF_BUILD_DIR=os.environ[_extension.BUILD_DIR_ENV])
    assert result.returncode == 0 and "loaded" in result.stdout, result.stderr
    if not build_lock.TORCH_WAITS_ON_A_BATON:  # torch >= 2.14: the file stays, its OS lock released
        with filelock.FileLock(str(private_cpu_build / build_lock.TORCH_BATON), timeout=0):
            return
    assert not (private_cpu_build / build_lock.TORCH_BATON).exists()

    # Negative control: torch's loader alone waits forever on the same stale baton.
    (private_cpu_build / build_lock.TORCH_BATON).write_text("")
    sources = [str(path) for path in build_folder.source_paths("cpu")]
    with pytest.raises(subprocess.TimeoutExpired):
        run_python(
            f"""
            from torch.utils import cpp_extension
            cpp_extension.load(name="talk_hf_cpu", sources={sources!r}, build_directory={str(private_cpu_build)!r})
            """,
            timeout=8,
        )


def test_a_live_lock_times_out_with_a_clear_error(private_cpu_build):
    build_record.completion_record("cpu", private_cpu_build).unlink()  # not finished: another process builds it
    with filelock.FileLock(str(private_cpu_build / build_lock.BUILD_LOCK)):
        result = run_python(
            """
            import torch
            from talk_hf.ops import talk_conv
            from talk_hf.ops._extension import ExtensionUnavailable
            x, offsets = torch.randn(1, 6, 4), torch.rand(1, 6, 2)
            try:
                talk_conv(x, offsets, offsets, 2, 2, backend="cpu")
            except ExtensionUnavailable as error:
                print(error)
            """,
            timeout=60,
            TALK_HF_BUILD_DIR=os.environ[_extension.BUILD_DIR_ENV],
            TALK_HF_BUILD_LOCK_TIMEOUT="0.5",
        )
    assert "another process held the build lock" in result.stdout, result.stdout + result.stderr
    assert "TALK_HF_BUILD_LOCK_TIMEOUT" in result.stdout


@pytest.fixture
def failing_build(fresh_loader, monkeypatch, tmp_path):
    """A CPU build (in an empty $TALK_HF_BUILD_DIR) whose compiler fails with "error: boom"."""

    def failing_load(**kwargs):
        raise RuntimeError(
            "Error building extension 'talk_hf_cpu':\ntalk_conv_cpu.cpp:7:1: error: boom\nninja: build stopped"
        )

    monkeypatch.setenv(_extension.BUILD_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(cpp_extension, "load", failing_load)


def test_a_failed_build_falls_back_once_and_names_the_compiler_error(failing_build):
    with pytest.warns(_extension.BackendFallbackWarning, match="talk_conv_cpu.cpp:7:1: error: boom") as caught:
        for _ in range(3):
            out = talk_conv(x, offsets, offsets, 2, 2)
    assert len(caught) == 1 and caught[0].filename == __file__  # points at the op's caller
    torch.testing.assert_close(out, talk_conv(x, offsets, offsets, 2, 2, backend="torch"))
    with pytest.raises(ExtensionUnavailable, match="TALK_HF_BUILD_VERBOSE=1"):
        talk_conv(x, offsets, offsets, 2, 2, backend="cpu")


def test_prepare_backend_loads_now_what_the_ops_will_run(fresh_loader, monkeypatch):
    built = []
    build = _extension._build
    monkeypatch.setattr(_extension, "_build", lambda kind: built.append(kind) or build(kind))
    assert prepare_backend("cpu") == "cpu" and built == ["cpu"]
    talk_conv(x, offsets, offsets, 2, 2)
    assert built == ["cpu"]  # the op found the extension loaded
    assert prepare_backend(torch.device("cpu"), backend="torch") == "torch"
    monkeypatch.setenv("TALK_HF_BACKEND", "torch")
    assert prepare_backend("cpu") == "torch"
    assert prepare_backend("meta", backend="auto") == "torch"


def test_prepare_backend_falls_back_with_the_ops_one_warning_or_raises_when_named(failing_build):
    with pytest.warns(_extension.BackendFallbackWarning, match="error: boom") as caught:
        assert prepare_backend("cpu") == "torch"
        talk_conv(x, offsets, offsets, 2, 2)  # no second warning
    assert len(caught) == 1 and caught[0].filename == __file__  # points at prepare_backend's caller
    with pytest.raises(ExtensionUnavailable, match="error: boom"):
        prepare_backend("cpu", backend="cpu")


def test_build_directory_names_versions_architecture_and_sources(monkeypatch):
    name = _extension.build_directory("cpu").name
    torch_version = torch.__version__.replace("+", "_")
    digest = _extension.source_digest("cpu")
    assert (
        len(digest) == 12 and name == f"talk_hf-{__version__}_torch-{torch_version}_cpu_{platform.machine()}_{digest}"
    )
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    cuda_digest = _extension.source_digest("cuda")
    assert cuda_digest != digest
    assert (
        _extension.build_directory("cuda").name
        == f"talk_hf-{__version__}_torch-{torch_version}_cu12.8_sm_90_{cuda_digest}"
    )


@pytest.mark.skipif(platform.system() != "Linux", reason="-march=native builds are Linux-only")
def test_native_builds_are_keyed_by_the_host_cpu_and_can_be_turned_off(monkeypatch):
    """A cache shared by machines with different CPUs keeps one build per CPU; the portable build
    compiles for the architecture's baseline and does not depend on the host."""
    monkeypatch.delenv(_extension.PORTABLE_CPU_ENV, raising=False)
    assert "-march=native" in build_folder.compiler_flags("cpu")["extra_cflags"]
    assert "-march=native" not in build_folder.compiler_flags("cuda")["extra_cflags"]
    native = _extension.source_digest("cpu")
    monkeypatch.setattr(build_folder, "_host_cpu", lambda: "model name: another CPU\nflags: sse2")
    assert _extension.source_digest("cpu") != native
    monkeypatch.setenv(_extension.PORTABLE_CPU_ENV, "1")
    assert "-march=native" not in build_folder.compiler_flags("cpu")["extra_cflags"]
    portable = _extension.source_digest("cpu")
    monkeypatch.setattr(build_folder, "_host_cpu", lambda: "model name: a third CPU")
    assert _extension.source_digest("cpu") == portable != native


def test_clones_with_the_same_sources_share_a_build_and_an_edit_gets_its_own(tmp_path, monkeypatch):
    """The folder is keyed by the sources' content, not by where the clone is."""
    shared = _extension.build_directory("cpu")
    clone = tmp_path / "clone" / "csrc"
    shutil.copytree(build_folder.CSRC, clone)
    monkeypatch.setattr(build_folder, "CSRC", clone)
    assert _extension.build_directory("cpu") == shared
    edited = set()
    for header in (clone / "talk_math.h", clone / "linear" / "linear_cpu.h"):  # shared, and an op's own
        header.write_text(header.read_text() + "\n// an edit\n")
        edited.add(_extension.build_directory("cpu"))
    assert shared not in edited and len(edited) == 2


def test_a_built_library_is_imported_without_ninja(private_cpu_build, fresh_loader, monkeypatch, caplog):
    """A clone at another path finds the shared build and imports it; nothing is compiled or said."""

    def no_build(**kwargs):
        raise AssertionError("cpp_extension.load must not run for a folder that holds the library")

    monkeypatch.setattr(cpp_extension, "load", no_build)
    assert _extension.is_built("cpu")
    with caplog.at_level("WARNING", logger=build_lock.__name__):
        out = talk_conv(x, offsets, offsets, 2, 2, backend="cpu")
    torch.testing.assert_close(out, talk_conv(x, offsets, offsets, 2, 2, backend="torch"))
    assert not caplog.records


def fake_compile(compiled: list):
    """A stand-in for ``cpp_extension.load`` that writes a library, notes its folder in
    ``compiled`` and returns a module-like object (this test module)."""

    def load(**kwargs):
        compiled.append(kwargs["build_directory"])
        build_record.library_path("cpu", Path(kwargs["build_directory"])).write_bytes(b"\x7fELF a whole library")
        return sys.modules[__name__]

    return load


@pytest.mark.parametrize("record", ["none", "of the whole library"])
def test_a_library_that_does_not_match_its_record_is_built_again(record, fresh_loader, monkeypatch, tmp_path, caplog):
    """A build killed while linking leaves a library cut short and no record; a library cut short
    later no longer matches its record.  Either is announced and built again, never imported.
    (test_build_faults.py injects the same faults into a real build.)"""
    compiled = []
    monkeypatch.setenv(_extension.BUILD_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(cpp_extension, "load", fake_compile(compiled))
    monkeypatch.setattr(build_record, "_import_library", lambda kind, library: pytest.fail(f"imported {library}"))
    directory = _extension.build_directory("cpu")
    library = build_record.library_path("cpu", directory)
    directory.mkdir(parents=True)
    library.write_bytes(b"\x7fELF a whole library")
    if record != "none":
        build_record.record_completion("cpu", directory)
    library.write_bytes(b"\x7fELF cut")
    assert not _extension.is_built("cpu")
    with caplog.at_level("WARNING", logger=build_lock.__name__):
        assert _extension.load("cpu") is sys.modules[__name__] and compiled == [str(directory)]
    fault = (
        "has no completion record"
        if record == "none"
        else "does not match its completion record (8 bytes, 20 when built)"
    )
    assert caplog.messages[0].startswith(f"talk_hf: not loading {library}, which {fault}")
    assert caplog.messages[0].endswith("; building it again")
    assert _extension.is_built("cpu")  # the new library has its record


def test_a_compile_is_announced_when_it_starts_and_ends(fresh_loader, monkeypatch, tmp_path, caplog):
    compiled = []
    monkeypatch.setenv(_extension.BUILD_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(cpp_extension, "load", fake_compile(compiled))
    with caplog.at_level("WARNING", logger=build_lock.__name__):
        _extension.load("cpu")
        _extension.load("cpu")  # remembered for the process: built once, said once
    messages = [record.getMessage() for record in caplog.records]
    assert compiled == [str(_extension.build_directory("cpu"))]
    assert len(messages) == 2, messages
    assert messages[0].startswith("talk_hf: compiling the cpu kernels") and str(tmp_path) in messages[0]
    assert messages[1].startswith("talk_hf: the cpu kernels were built in")


def fake_nvcc(tmp_path, release: str) -> str:
    """A CUDA_HOME whose bin/nvcc reports ``release``."""
    nvcc = tmp_path / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {release}, V{release}.0'\n")
    nvcc.chmod(0o755)
    return str(tmp_path)


@pytest.mark.parametrize(
    "torch_cuda,gpu,release,compiler,message",
    [
        (None, False, "13.0", "c++", "CPU-only build"),
        ("13.0", False, "13.0", "c++", "no CUDA GPU is visible"),
        ("12.8", True, "13.0", "c++", "is CUDA 13 but torch was built with CUDA 12.8"),
        ("13.0", True, "13.0", "/nonexistent/c++", r"no C\+\+ compiler"),
        ("13.0", True, "13.0", "c++", None),
    ],
)
def test_cuda_preflight_names_what_is_missing(torch_cuda, gpu, release, compiler, message, tmp_path, monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", torch_cuda)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", fake_nvcc(tmp_path, release))
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    monkeypatch.setenv("CXX", compiler)
    if message is None:
        _extension.preflight("cuda")
    else:
        with pytest.raises(ExtensionUnavailable, match=message):
            _extension.preflight("cuda")


def test_a_missing_ninja_and_a_bad_lock_timeout_are_named(fresh_loader, monkeypatch):
    with monkeypatch.context() as patch:
        patch.setattr(cpp_extension, "is_ninja_available", lambda: False)
        with pytest.raises(ExtensionUnavailable, match="ninja is not installed. Fix: pip install ninja"):
            _extension.preflight("cpu")
    monkeypatch.setenv(_extension.LOCK_TIMEOUT_ENV, "soon")
    with pytest.raises(ValueError, match=r"\$TALK_HF_BUILD_LOCK_TIMEOUT must be a number of seconds, got 'soon'"):
        _extension.load("cpu")


def _missing_sources(kind):
    """The message naming every kernel source of `kind` as missing, as a regular expression."""
    return re.escape(f"the kernel sources {list(build_folder.SOURCES[kind])} are not in")


def test_preflight_without_kernel_sources(tmp_path, monkeypatch):
    """A remote-code copy of the ops has no csrc/ folder: it must say so, not try a build, and
    never run nvcc."""

    def no_nvcc():
        raise AssertionError("nvcc must not run without kernel sources")

    monkeypatch.setattr(build_folder, "CSRC", tmp_path)
    with pytest.raises(ExtensionUnavailable, match=_missing_sources("cpu")):
        _extension.preflight("cpu")
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(build_tools, "_nvcc_major", no_nvcc)
    with pytest.raises(ExtensionUnavailable, match=_missing_sources("cuda")):
        _extension.preflight("cuda")
    with pytest.raises(ExtensionUnavailable, match=_missing_sources("cuda")):  # no folder to name
        _extension.build_directory("cuda")


def run_build_command(*flags: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """``python -m talk_hf.ops.build <flags>`` in a fresh process (this one's $TALK_HF_BUILD_DIR)."""
    command = [sys.executable, "-m", "talk_hf.ops.build", *flags]
    return processes.run(command, timeout=timeout)


def test_build_entry_point(private_cpu_build, fresh_loader, capsys):
    if torch.cuda.is_available():  # without flags the command would build the CUDA kernels too: minutes
        result = run_build_command("--cpu")
        assert result.returncode == 0, result.stderr
        assert f"cpu: reused in {private_cpu_build}" in result.stdout
        return
    assert build.main(["--cpu"]) == 0  # the command's --cpu, in this process
    assert capsys.readouterr().out == f"cpu: reused in {private_cpu_build}\n"
    failed = run_build_command("--cuda", timeout=60)
    assert failed.returncode == 1 and "cuda: FAILED" in failed.stderr and "Fix:" in failed.stderr
    # Without flags: what this machine can build, and what it skipped and why, exit 0
    everything = run_build_command()
    assert everything.returncode == 0, everything.stderr
    assert f"cpu: reused in {private_cpu_build}" in everything.stdout
    assert "cuda: skipped: " in everything.stdout and "(fix: " in everything.stdout
