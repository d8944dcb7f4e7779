"""Exported checkpoints load with trust_remote_code=True in a process where talk_hf is not importable."""

import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModel
from transformers.dynamic_module_utils import get_class_from_dynamic_module

import talk_hf

from .helpers import CASES, generation_prompt, model_inputs

# One case per generative head of the package.  (The toy family lives in the tests, outside the
# package that export_for_remote_code copies.)
HEADS = [case for case in CASES if case.name != "light_conv-lm" and not case.name.startswith("toy")]

CHILD = textwrap.dedent(
    """
    import importlib.abc, json, sys

    class HideTalkHf(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "talk_hf" or name.startswith("talk_hf."):
                raise ModuleNotFoundError(f"No module named {name!r} (hidden by the test)")
            return None

    sys.meta_path.insert(0, HideTalkHf())
    import torch
    import transformers

    jobs = json.loads(sys.argv[1])
    for job in jobs:
        auto_class = getattr(transformers, job["auto_class"])
        model = auto_class.from_pretrained(job["path"], trust_remote_code=True).eval()
        assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
        inputs = torch.load(job["inputs"])
        prompt = torch.load(job["prompt"])
        with torch.no_grad():
            logits = model(**inputs).logits
        sequences = model.generate(**prompt, max_new_tokens=6, do_sample=False, num_beams=2, pad_token_id=1)
        torch.save({"logits": logits, "sequences": sequences}, job["result"])
    assert not any(name.startswith("talk_hf") for name in sys.modules)
    print("ok")
    """
)


def test_exported_checkpoints_load_without_talk_hf(tmp_path):
    jobs, expected = [], {}
    for case in HEADS:
        folder = tmp_path / case.name
        model = case.model()
        model.save_pretrained(folder)
        auto_map = talk_hf.export_for_remote_code(folder)
        head_auto_class = "AutoModelForSeq2SeqLM" if case.is_seq2seq else "AutoModelForCausalLM"
        assert set(auto_map) == {"AutoConfig", "AutoModel", head_auto_class}
        assert json.loads((folder / "config.json").read_text())["auto_map"] == auto_map
        inputs, prompt = model_inputs(case), generation_prompt(case)
        torch.save(inputs, folder / "inputs.pt")
        torch.save(prompt, folder / "prompt.pt")
        with torch.no_grad():
            expected[case.name] = (
                model(**inputs).logits,
                model.generate(**prompt, max_new_tokens=6, do_sample=False, num_beams=2, pad_token_id=1),
            )
        jobs.append(
            dict(
                path=str(folder),
                auto_class=head_auto_class,
                inputs=str(folder / "inputs.pt"),
                prompt=str(folder / "prompt.pt"),
                result=str(folder / "result.pt"),
                name=case.name,
            )
        )

    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "modules"))
    child = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(jobs)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    for job in jobs:
        result = torch.load(job["result"])
        logits, sequences = expected[job["name"]]
        torch.testing.assert_close(result["logits"], logits, rtol=1e-5, atol=1e-5)
        assert torch.equal(result["sequences"], sequences)


def test_exported_checkpoint_still_loads_the_installed_classes(tmp_path):
    case = HEADS[1]
    case.model().save_pretrained(tmp_path)
    talk_hf.export_for_remote_code(tmp_path)
    assert type(AutoModel.from_pretrained(tmp_path)) is case.base


def test_export_rejects_a_folder_of_another_model(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bart"}))
    with pytest.raises(ValueError, match="not a talk_hf model type"):
        talk_hf.export_for_remote_code(tmp_path)


def test_export_names_a_folder_without_a_config(tmp_path):
    with pytest.raises(FileNotFoundError, match="has no config.json"):
        talk_hf.export_for_remote_code(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_flattening_rewrites_every_relative_import_form(tmp_path, monkeypatch):
    """``from ..m import x``, ``from .. import (a as b, c)``: the flat copies import and run."""
    from talk_hf import hub

    package = tmp_path / "src" / "fakepkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "helper.py").write_text("X = 1\n")
    (package / "other.py").write_text("Y = 2\n")
    (package / "sub" / "mod.py").write_text(
        "from .. import (\n    helper as h,\n    other,\n)\nfrom ..helper import X\nZ = h.X + other.Y + X\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    modules = hub._collect(["fakepkg.sub.mod"])
    assert sorted(modules) == ["fakepkg.helper", "fakepkg.other", "fakepkg.sub.mod"]
    flat = tmp_path / "flat" / "flatpkg"
    flat.mkdir(parents=True)
    (flat / "__init__.py").write_text("")
    for name in modules:
        (flat / f"{hub._flat_name(name)}.py").write_text(hub._flattened_source(name))
    monkeypatch.syspath_prepend(str(tmp_path / "flat"))
    import importlib

    assert importlib.import_module("flatpkg.mod").Z == 4


def test_export_refuses_to_replace_a_users_files_naming_them(tmp_path):
    """A user's cache.py and version.py, beside the checkpoint, were replaced by the module copies."""
    case = HEADS[1]
    case.model().save_pretrained(tmp_path)
    config_before = (tmp_path / "config.json").read_text()
    for name in ("cache.py", "version.py"):
        (tmp_path / name).write_text(f"# the user's own {name}\n")
    with pytest.raises(FileExistsError, match=r"holds cache\.py, version\.py, which export_for_remote_code did not"):
        talk_hf.export_for_remote_code(tmp_path)
    # Nothing written: the user's files, the configuration, and no module copy.
    assert (tmp_path / "cache.py").read_text() == "# the user's own cache.py\n"
    assert (tmp_path / "config.json").read_text() == config_before
    assert sorted(path.name for path in tmp_path.glob("*.py")) == ["cache.py", "version.py"]
    talk_hf.export_for_remote_code(tmp_path, overwrite=True)
    assert (tmp_path / "cache.py").read_text().startswith(talk_hf.hub.COPY_MARKER)


def test_export_replaces_its_own_copies(tmp_path):
    case = HEADS[0]
    case.model().save_pretrained(tmp_path)
    talk_hf.export_for_remote_code(tmp_path)
    (tmp_path / "version.py").write_text((tmp_path / "version.py").read_text() + "STALE = True\n")
    talk_hf.export_for_remote_code(tmp_path)  # a copy of an earlier export: replaced without a word
    assert "STALE" not in (tmp_path / "version.py").read_text()


def test_saving_into_an_exported_folder_exports_it_again(tmp_path):
    """transformers' save_pretrained wrote config.json without the auto_map while the copies stayed:
    trust_remote_code loading stopped working without a word."""
    case = HEADS[0]
    case.model().save_pretrained(tmp_path)
    auto_map = talk_hf.export_for_remote_code(tmp_path)
    (tmp_path / "version.py").write_text((tmp_path / "version.py").read_text() + "STALE = True\n")
    case.model(init_std=0.1).save_pretrained(tmp_path)  # e.g. after more training
    assert json.loads((tmp_path / "config.json").read_text())["auto_map"] == auto_map
    assert "STALE" not in (tmp_path / "version.py").read_text()  # the copies are the current talk_hf's
    remote_class = get_class_from_dynamic_module(auto_map["AutoModelForSeq2SeqLM"], str(tmp_path))
    assert remote_class.__module__.startswith("transformers_modules.")


def test_a_model_loaded_from_an_exported_folder_saves_a_folder_that_loads_its_remote_code(tmp_path):
    """Its configuration keeps the auto_map: the new folder got a config.json naming code files it lacked."""
    case = HEADS[0]
    case.model().save_pretrained(tmp_path / "exported")
    auto_map = talk_hf.export_for_remote_code(tmp_path / "exported")
    case.head.from_pretrained(tmp_path / "exported").save_pretrained(tmp_path / "copy")
    assert json.loads((tmp_path / "copy" / "config.json").read_text())["auto_map"] == auto_map
    remote_class = get_class_from_dynamic_module(auto_map["AutoModelForSeq2SeqLM"], str(tmp_path / "copy"))
    assert remote_class.__module__.startswith("transformers_modules.")


def test_saving_into_a_folder_without_copies_writes_none(tmp_path):
    case = HEADS[0]
    case.model().save_pretrained(tmp_path)
    case.model().save_pretrained(tmp_path)
    assert not list(tmp_path.glob("*.py")) and "auto_map" not in json.loads((tmp_path / "config.json").read_text())


def test_a_copy_without_kernel_sources_says_how_to_install_talk_hf(tmp_path, monkeypatch):
    """The remote-code fallback named `pip install talk_hf`, which is not on the package index."""
    from talk_hf.ops._build import build_folder
    from talk_hf.ops._build.unavailable import ExtensionUnavailable

    monkeypatch.setattr(build_folder, "CSRC", tmp_path)  # a remote-code copy carries no csrc/
    with pytest.raises(ExtensionUnavailable) as raised:
        build_folder.check_sources("cpu")
    assert "install talk_hf from its source" in str(raised.value)
    assert "pip install -e <path to a clone of the talk_hf repository>" in str(raised.value)
    assert "pip install talk_hf" not in str(raised.value)


def _warnings_of(call) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return caught


def test_a_copy_imported_beside_talk_hf_keeps_its_custom_ops_apart(tmp_path):
    """A remote-code copy imported in a process that has talk_hf registers its custom ops under a namespace
    of its own, so talk_hf's ops (``talk_hf::linear``, the op a compiled decoding step runs) stay talk_hf's.
    torch lets a later registration of a name replace the earlier one without a word: before, the copy's
    ``talk_hf::linear`` replaced talk_hf's, and a compiled step of talk_hf's models ran the copy's PyTorch
    path, warning (with a warning class of the copy) that the copy has no kernels."""
    case = next(case for case in HEADS if case.name == "talk-lm")
    case.model().save_pretrained(tmp_path)
    talk_hf.export_for_remote_code(tmp_path)
    copy_class = get_class_from_dynamic_module("modeling_talk.TaLKForCausalLM", str(tmp_path))
    copy_ops = sys.modules[copy_class.__module__.rsplit(".", 1)[0] + "._compiled_op"]
    assert talk_hf.ops._compiled_op.OP_NAMESPACE == "talk_hf" != copy_ops.OP_NAMESPACE
    rows, weight = torch.randn(1, 8), torch.randn(4, 8)
    caught = _warnings_of(
        lambda: torch.testing.assert_close(torch.ops.talk_hf.linear(rows, weight, None), rows @ weight.T)
    )
    assert not [w for w in caught if type(w.message).__module__.startswith("transformers_modules")], caught
    copy_linear = getattr(torch.ops, copy_ops.OP_NAMESPACE).linear  # the copy's own op works too
    _warnings_of(lambda: torch.testing.assert_close(copy_linear(rows, weight, None), F.linear(rows, weight)))
