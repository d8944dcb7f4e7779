"""`talk_hf.onnx` models and the Hugging Face Hub: ``from_pretrained`` of a repository id (its exported folder
found in a Hub cache built here, offline: nothing is downloaded), ``save_pretrained`` (a copy that loads
token-equal, written by the export's rules for an existing folder) and ``push_to_hub`` (huggingface_hub's
API replaced by a recording stand-in), ours with its model card and transformers' own.  A local folder loads as before; what cannot be loaded, saved or
uploaded says why.  The folders are the session's shared exports (`exported.SharedExports`) or copies.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import torch

pytest.importorskip("onnxruntime")

import huggingface_hub  # noqa: E402
import onnx  # noqa: E402
from huggingface_hub import ModelCard, RepoUrl, constants  # noqa: E402
from huggingface_hub.errors import EntryNotFoundError  # noqa: E402
from transformers.utils import PushToHubMixin  # noqa: E402

from talk_hf.export import OnnxGenerator, quantize_exported  # noqa: E402
from talk_hf.onnx import ORTModelForCausalLM, ORTModelForSeq2SeqLM  # noqa: E402

COMMIT = "0123456789abcdef0123456789abcdef01234567"
REPO = "org/talk-lm-onnx"


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """Every test runs as with HF_HUB_OFFLINE=1: huggingface_hub reaches no server."""
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


@pytest.fixture(scope="module")
def lm_export(shared_exports):
    return shared_exports("talk-lm")


@pytest.fixture(scope="module")
def seq2seq_export(shared_exports):
    return shared_exports("dynamic-seq2seq")


def cache_repo(cache: Path, repo_id: str, files: dict[str, Path], ref: str = "main", commit: str = COMMIT) -> Path:
    """Put ``files`` (path in the repository -> the file to put there) into the Hub cache ``cache`` as
    huggingface_hub leaves a download: the data in blobs/, named by hash, links to them in
    snapshots/<commit>/, the commit in refs/<ref>; the snapshot folder."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / ref).write_text(commit)
    for name, source in files.items():
        data = source.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(exist_ok=True)
        blob.write_bytes(data)
        link = repo / "snapshots" / commit / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    return repo / "snapshots" / commit


def folder_files(folder: Path, prefix: str = "") -> dict[str, Path]:
    return {prefix + path.name: path for path in folder.iterdir() if path.is_file()}


def written(folder: Path) -> set[str]:
    return set(json.loads((folder / "manifest.json").read_text())["written"])


def generated(model, export) -> torch.Tensor:
    return model.generate(input_ids=export.ids, attention_mask=export.mask, max_new_tokens=8, num_beams=2)


def test_a_repo_id_loads_its_exported_folder_from_the_hub_cache(lm_export, tmp_path, monkeypatch):
    """The PyTorch checkpoint's own files beside the export's are never read or copied; no graph is parsed in
    Python to load or save (ONNX Runtime reads each once); the copy holds no README.md (as transformers')."""
    cache = tmp_path / "hub"
    checkpoint = tmp_path / "model.safetensors"
    checkpoint.write_bytes(b"not read")
    snapshot = cache_repo(cache, REPO, {**folder_files(lm_export.folder), "model.safetensors": checkpoint})
    cached = sorted(cache.rglob("*"))
    for name in ("load", "load_model"):
        monkeypatch.setattr(onnx, name, lambda *args, **kwargs: pytest.fail("a graph was parsed by onnx"))
    model = ORTModelForCausalLM.from_pretrained(REPO, threads=1, cache_dir=cache)
    assert model.folder == snapshot  # its files are links into the repository's blobs
    assert sorted(cache.rglob("*")) == cached  # nothing written into the cache (it may be read-only)
    local = ORTModelForCausalLM.from_pretrained(lm_export.folder, threads=1)
    assert torch.equal(generated(model, lm_export), generated(local, lm_export))
    model.save_pretrained(tmp_path / "saved")
    assert {path.name for path in (tmp_path / "saved").iterdir()} == written(lm_export.folder)
    assert not any(path.is_symlink() for path in (tmp_path / "saved").iterdir())  # the files, not the cache's links


def test_revision_subfolder_and_the_default_cache(lm_export, tmp_path, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    cache_repo(tmp_path / "hub", REPO, folder_files(lm_export.folder, "onnx/"), ref="v1")
    for revision in ("v1", COMMIT):
        model = ORTModelForCausalLM.from_pretrained(REPO, threads=1, revision=revision, subfolder="onnx")
        snapshot = tmp_path / "hub" / "models--org--talk-lm-onnx" / "snapshots" / COMMIT
        assert model.folder == snapshot / "onnx"
    with pytest.raises(FileNotFoundError, match=f"{REPO} .revision main. is not a local folder.*not cached in"):
        ORTModelForCausalLM.from_pretrained(REPO, revision="main", subfolder="onnx")


def test_the_files_come_from_the_manifests_commit_while_the_branch_moves_on(
    lm_export, seq2seq_export, tmp_path, monkeypatch
):
    """main moves to another export's commit after the manifest was fetched: the graphs are still the manifest's."""
    snapshot = cache_repo(tmp_path, REPO, folder_files(lm_export.folder))
    cache_repo(tmp_path, REPO, folder_files(seq2seq_export.folder), commit="f" * 40)
    (tmp_path / "models--org--talk-lm-onnx" / "refs" / "main").write_text(COMMIT)
    download, revisions = huggingface_hub.snapshot_download, []

    def moving_on(repo_id, **options):
        revisions.append(options["revision"])
        snapshot = download(repo_id, **options)
        (tmp_path / "models--org--talk-lm-onnx" / "refs" / "main").write_text("f" * 40)
        return snapshot

    monkeypatch.setattr(huggingface_hub, "snapshot_download", moving_on)
    assert ORTModelForCausalLM.from_pretrained(REPO, threads=1, cache_dir=tmp_path).folder == snapshot
    assert revisions == [None, COMMIT]


def test_local_files_only_reads_the_cache_without_offline_mode(lm_export, tmp_path, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    cache_repo(tmp_path, REPO, folder_files(lm_export.folder))
    assert ORTModelForCausalLM.from_pretrained(REPO, threads=1, cache_dir=tmp_path, local_files_only=True).folder


def test_a_repo_that_is_not_cached_is_named(tmp_path):
    with pytest.raises(
        FileNotFoundError,
        match=f"^org/absent is not a local folder, and its exported folder is not cached in {tmp_path}",
    ):
        ORTModelForSeq2SeqLM.from_pretrained("org/absent", cache_dir=tmp_path)


def test_a_pytorch_checkpoints_repo_is_not_an_exported_folder(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    cache_repo(tmp_path / "hub", "org/talk", {"config.json": tmp_path / "config.json"})
    with pytest.raises(
        FileNotFoundError, match=r"org/talk is neither .* has no manifest.json in the Hub cache.*talk_hf.export"
    ):
        ORTModelForSeq2SeqLM.from_pretrained("org/talk", cache_dir=tmp_path / "hub")


def test_files_the_manifest_lists_but_the_cache_lacks_are_named(lm_export, tmp_path):
    files = folder_files(lm_export.folder)
    del files["decoder_step.onnx"], files["tokenizer.json"]
    cache_repo(tmp_path, REPO, files)
    with pytest.raises(
        FileNotFoundError, match=r"lacks \['decoder_step.onnx', 'tokenizer.json'\].*not in the Hub cache"
    ):
        ORTModelForCausalLM.from_pretrained(REPO, cache_dir=tmp_path)


def test_the_torch_free_runner_reads_a_snapshot_but_no_link_out_of_its_repository(lm_export, tmp_path):
    """A snapshot's files link into its repository's blobs, which the runner follows (a host with only
    onnxruntime and numpy runs ``snapshot_download``'s folder); a link anywhere else is still refused."""
    snapshot = cache_repo(tmp_path, REPO, folder_files(lm_export.folder))
    runner = OnnxGenerator(snapshot, threads=1)
    assert runner.generate(lm_export.ids.numpy(), lm_export.mask.numpy(), max_new_tokens=4).shape[0] == 3
    outside = tmp_path / "decoder_step.onnx"  # outside the repository's blobs
    outside.write_bytes((snapshot / "decoder_step.onnx").read_bytes())
    (snapshot / "decoder_step.onnx").unlink()
    (snapshot / "decoder_step.onnx").symlink_to(outside)
    with pytest.raises(
        ValueError, match=r"field files.decoder_step must be a file inside the exported folder, not a symlink"
    ):
        OnnxGenerator(snapshot, threads=1)


def test_a_written_name_outside_the_folder_is_refused(lm_export, tmp_path):
    folder = lm_export.copy(tmp_path / "export")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["written"].append("../victim")
    (folder / "manifest.json").write_text(json.dumps(manifest))
    (tmp_path / "hub" / "models--org--talk-lm-onnx" / "victim").parent.mkdir(parents=True)
    (tmp_path / "hub" / "models--org--talk-lm-onnx" / "victim").write_text("not to be read")
    cache_repo(tmp_path / "hub", REPO, folder_files(folder))
    with pytest.raises(
        ValueError, match=r"field written lists \['../victim'\], which are not file names of the folder"
    ):
        ORTModelForCausalLM.from_pretrained(REPO, cache_dir=tmp_path / "hub")


def test_a_local_folders_subfolder(lm_export, tmp_path):
    lm_export.copy(tmp_path / "repo" / "onnx")
    model = ORTModelForCausalLM.from_pretrained(str(tmp_path / "repo"), threads=1, subfolder="onnx")
    assert model.folder == tmp_path / "repo" / "onnx"


def test_local_folders_load_and_fail_as_local_folders(lm_export, tmp_path, monkeypatch):
    """An existing path shaped like a repository id is a folder; a missing `Path` or path that is no repository
    id gets the local error."""
    monkeypatch.chdir(tmp_path)
    lm_export.copy(tmp_path / "org" / "name")
    assert ORTModelForCausalLM.from_pretrained("org/name", threads=1).folder == Path("org/name")
    for missing in (Path("org/other"), "./other", str(tmp_path / "other")):
        with pytest.raises(FileNotFoundError, match="manifest.json does not exist: export the model first"):
            ORTModelForCausalLM.from_pretrained(missing)
    with pytest.raises(
        ValueError, match="revision='v1' chooses a version of a Hub repository, but 'org/name' is a local"
    ):
        ORTModelForCausalLM.from_pretrained("org/name", revision="v1")


@pytest.mark.parametrize(
    "keywords, error, match",
    [
        ({"quantization_config": {}}, TypeError, r"from_pretrained does not take \['quantization_config'\]"),
        ({"config": None, "trust_remote_code": True}, TypeError, r"\['config', 'trust_remote_code'\]"),
        ({"dtype": torch.float16}, ValueError, "dtype=torch.float16, but an exported folder runs .* in float32"),
        ({"torch_dtype": "bfloat16"}, ValueError, "torch_dtype='bfloat16'"),
        ({"device_map": "cuda"}, ValueError, "device_map='cuda'.*pass device_map='cpu'"),
        ({"device_map": {"": 0}}, ValueError, "device_map=.'': 0."),
        ({"device_map": "nowhere"}, ValueError, "device_map='nowhere'"),
        ({"provider": "CUDAExecutionProvider"}, ValueError, "provider='CUDAExecutionProvider', but .* on the CPU"),
    ],
)
def test_keywords_without_meaning_are_refused_by_name(lm_export, keywords, error, match):
    with pytest.raises(error, match=match):
        ORTModelForCausalLM.from_pretrained(lm_export.folder, **keywords)


def test_float32_and_the_cpu_are_accepted(lm_export):
    accepted = [
        {"dtype": "auto", "device_map": "cpu"},
        {"torch_dtype": torch.float32, "device_map": {"": "cpu"}, "provider": "CPUExecutionProvider"},
    ]
    for keywords in accepted:
        assert ORTModelForCausalLM.from_pretrained(lm_export.folder, threads=1, **keywords).dtype == torch.float32


def test_sizes_of_torch_parameters_are_refused_naming_where_the_weights_are(lm_export):
    """PreTrainedModel's counts of torch parameters would say 0 for weights held by ONNX Runtime."""
    model = ORTModelForCausalLM.from_pretrained(lm_export.folder, threads=1)
    for size in (model.num_parameters, model.get_memory_footprint):
        with pytest.raises(ValueError, match="holds its weights in ONNX Runtime's sessions, not as torch parameters"):
            size()


def test_save_pretrained_writes_a_folder_that_loads_token_equal(seq2seq_export, lm_export, tmp_path):
    """Saved over a copy of another export, beside a user's file: the other export's files that this one does
    not write go, the user's file stays."""
    destination = lm_export.copy(tmp_path / "saved")
    (destination / "notes.txt").write_text("mine")
    model = ORTModelForSeq2SeqLM.from_pretrained(seq2seq_export.folder, threads=1)
    model.save_pretrained(destination)
    assert {path.name for path in destination.iterdir()} == written(seq2seq_export.folder) | {"notes.txt"}
    saved = ORTModelForSeq2SeqLM.from_pretrained(destination, threads=1)
    assert torch.equal(generated(saved, seq2seq_export), generated(model, seq2seq_export))


def test_save_pretrained_keeps_a_users_file_of_an_exports_name(lm_export, tmp_path):
    model = ORTModelForCausalLM.from_pretrained(lm_export.folder, threads=1)
    (tmp_path / "config.json").write_text("mine")
    with pytest.raises(FileExistsError, match=r"holds \['config.json'\], which the export would replace"):
        model.save_pretrained(tmp_path)
    assert [path.name for path in tmp_path.iterdir()] == ["config.json"]
    model.save_pretrained(tmp_path, overwrite=True)
    assert ORTModelForCausalLM.from_pretrained(tmp_path, threads=1).folder == tmp_path


def test_save_pretrained_refuses_the_source_folder(lm_export, tmp_path):
    model = ORTModelForCausalLM.from_pretrained(lm_export.copy(tmp_path / "export"), threads=1)
    (tmp_path / "link").symlink_to(tmp_path / "export")
    for destination in (tmp_path / "export", tmp_path / "link"):
        with pytest.raises(ValueError, match="would write the exported folder onto itself"):
            model.save_pretrained(destination)


def test_a_folder_rewritten_after_loading_is_neither_saved_nor_pushed(lm_export, tmp_path, hub):
    folder = lm_export.copy(tmp_path / "export")
    model = ORTModelForCausalLM.from_pretrained(folder, threads=1)
    quantize_exported(folder)
    with pytest.raises(ValueError, match=r"files \['decoder_prompt.onnx', 'decoder_step.onnx', 'manifest.json'\] "):
        model.save_pretrained(tmp_path / "saved")
    with pytest.raises(ValueError, match="changed since this ORTModelForCausalLM was loaded from it"):
        model.push_to_hub("user/tiny")
    assert not (tmp_path / "saved").exists() and hub == []


def test_a_listed_file_missing_at_loading_is_named_when_saving(lm_export, tmp_path):
    folder = lm_export.copy(tmp_path / "export")
    (folder / "tokenizer.json").unlink()
    model = ORTModelForCausalLM.from_pretrained(folder, threads=1)
    with pytest.raises(FileNotFoundError, match=r"lacks \['tokenizer.json'\], which its manifest.json lists"):
        model.save_pretrained(tmp_path / "saved")


def test_save_pretrained_refuses_its_weights_keywords(lm_export, tmp_path):
    model = ORTModelForCausalLM.from_pretrained(lm_export.folder, threads=1)
    with pytest.raises(TypeError, match=r"save_pretrained does not take \['safe_serialization'\]"):
        model.save_pretrained(tmp_path, safe_serialization=True, max_shard_size="1GB")
    for size in ("big", 2.5, None):
        with pytest.raises(ValueError, match=f"max_shard_size must be an int of bytes .* got {size!r}"):
            model.save_pretrained(tmp_path, max_shard_size=size)
    assert list(tmp_path.iterdir()) == []


def external_step_data(folder: Path, location: str) -> Path:
    """``folder``'s step graph saved with its weights (tensors over 1 kB) in the external-data file ``location``."""
    graph = onnx.load(folder / "decoder_step.onnx")
    onnx.save_model(graph, folder / "decoder_step.onnx", save_as_external_data=True, location=location)
    return folder / location


def test_external_data_is_not_the_folders_and_its_absence_is_named(lm_export, tmp_path):
    """A graph that another tool saved with external data runs where the file lies beside it; the folder is what
    its manifest lists, so a copy (or a download) lacks the file, and loading it names the graph and the file."""
    folder = lm_export.copy(tmp_path / "export")
    external_step_data(folder, "decoder_step.onnx.data")
    model = ORTModelForCausalLM.from_pretrained(folder, threads=1)
    assert torch.equal(
        generated(model, lm_export),
        generated(ORTModelForCausalLM.from_pretrained(lm_export.folder, threads=1), lm_export),
    )
    model.save_pretrained(tmp_path / "saved")
    assert not (tmp_path / "saved" / "decoder_step.onnx.data").exists()
    cache_repo(
        tmp_path / "hub", REPO, {name: path for name, path in folder_files(folder).items() if name in written(folder)}
    )
    for source, options in ((tmp_path / "saved", {}), (REPO, {"cache_dir": tmp_path / "hub"})):
        with pytest.raises(
            ValueError, match=r"decoder_step.onnx, named by .* missing its external data.*decoder_step.onnx.data"
        ):
            ORTModelForCausalLM.from_pretrained(source, threads=1, **options)


@pytest.fixture
def hub(monkeypatch, tmp_path) -> list[dict]:
    """What would be sent to the Hub: each create_repo, create_branch, file_exists, hf_hub_download and
    create_commit call's arguments (a commit's files by their names in the repository; ``card``: its README.md);
    the repository has no README.md unless a test appends ``{"readme": text}`` (the last such text is the one
    downloaded); any other upload fails the test."""
    calls = []

    def readmes() -> list[str]:
        return [call["readme"] for call in calls if "readme" in call]

    def create_repo(self, repo_id, private=None, exist_ok=False, **kwargs):
        calls.append({"call": "create_repo", "repo_id": repo_id, "private": private, "token": self.token})
        return RepoUrl(f"https://huggingface.co/{repo_id if '/' in repo_id else f'user/{repo_id}'}")

    def create_branch(self, repo_id, branch, exist_ok=False, **kwargs):
        calls.append({"call": "create_branch", "repo_id": repo_id, "branch": branch})

    def file_exists(self, repo_id, filename, revision=None, **kwargs):
        calls.append({"call": "file_exists", "repo_id": repo_id, "filename": filename, "revision": revision})
        return filename == "README.md" and bool(readmes())

    def hf_hub_download(self, repo_id, filename, revision=None, **kwargs):
        calls.append({"call": "hf_hub_download", "repo_id": repo_id, "filename": filename, "revision": revision})
        assert filename == "README.md" and readmes(), "only an existing README.md is downloaded"
        downloaded = tmp_path / "downloaded" / filename
        downloaded.parent.mkdir(exist_ok=True)
        downloaded.write_text(readmes()[-1])
        return str(downloaded)

    def create_commit(self, repo_id, operations, **kwargs):
        files = {operation.path_in_repo: operation.path_or_fileobj for operation in operations}
        card = files.get("README.md")
        card = card if isinstance(card, (bytes, type(None))) else Path(card).read_bytes()  # transformers' path
        names = sorted(files)
        calls.append({"call": "create_commit", "repo_id": repo_id, "files": names, "token": self.token, **kwargs})
        calls[-1]["card"] = card and ModelCard(card.decode())
        return "commit"

    def refused(*args, **kwargs):
        pytest.fail("an upload other than create_commit was reached")

    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", create_repo)
    monkeypatch.setattr(huggingface_hub.HfApi, "create_branch", create_branch)
    monkeypatch.setattr(huggingface_hub.HfApi, "file_exists", file_exists)
    monkeypatch.setattr(huggingface_hub.HfApi, "hf_hub_download", hf_hub_download)
    monkeypatch.setattr(huggingface_hub.HfApi, "create_commit", create_commit)
    for name in ("upload_folder", "upload_file", "preupload_lfs_files"):
        monkeypatch.setattr(huggingface_hub.HfApi, name, refused)
    return calls


def test_push_to_hub_uploads_the_exported_files_and_a_model_card(lm_export, tmp_path, hub):
    folder = lm_export.copy(tmp_path / "export")
    (folder / "notes.txt").write_text("not uploaded")
    model = ORTModelForCausalLM.from_pretrained(folder, threads=1)
    assert model.push_to_hub("user/tiny", private=True, token="secret", commit_message="tiny LM") == "commit"
    card = hub[-1].pop("card")
    assert hub == [
        {"call": "create_repo", "repo_id": "user/tiny", "private": True, "token": "secret"},
        {"call": "file_exists", "repo_id": "user/tiny", "filename": "README.md", "revision": None},
        {
            "call": "create_commit",
            "repo_id": "user/tiny",
            "files": sorted(written(folder) | {"README.md"}),
            "token": "secret",
            "commit_message": "tiny LM",
            "commit_description": None,
            "revision": None,
            "create_pr": False,
        },
    ]
    assert card.data.to_dict() == {
        "library_name": "talk_hf",
        "pipeline_tag": "text-generation",
        "tags": ["onnx", "talk_hf", "talk_lm"],
    }
    assert 'ORTModelForCausalLM.from_pretrained("user/tiny")' in card.text
    assert 'AutoTokenizer.from_pretrained("user/tiny")' in card.text and "{" not in card.text


OWN_CARD = "---\nlicense: mit\ntags:\n- mine\n---\n\n# My model\n\nTrained by me.\n"


def test_a_repos_own_model_card_is_kept_and_a_seq2seqs_card(seq2seq_export, tmp_path, hub):
    """An encoder-decoder exported without its tokenizer, whose configuration names no task (as the training
    scripts' do not): a text2text-generation model, run from token ids.  A repository's own card is not even
    downloaded without tags."""
    model = ORTModelForSeq2SeqLM.from_pretrained(seq2seq_export.folder, threads=1)
    model.push_to_hub("user/tiny", revision="v1")
    card = hub[-1]["card"]
    assert card.data.pipeline_tag == "text2text-generation" and card.data.tags == ["onnx", "talk_hf", "dynamic_conv"]
    assert 'ORTModelForSeq2SeqLM.from_pretrained("user/tiny")' in card.text and "AutoTokenizer" not in card.text
    hub.append({"readme": OWN_CARD})
    model.push_to_hub("user/tiny", revision="v1")
    assert hub[-2] == {"call": "file_exists", "repo_id": "user/tiny", "filename": "README.md", "revision": "v1"}
    assert hub[-1]["files"] == sorted(written(seq2seq_export.folder)) and hub[-1]["card"] is None


def test_tags_join_the_new_card_after_its_own_and_the_models(lm_export, hub):
    """As ``PreTrainedModel.push_to_hub``: the model's ``model_tags`` first, then ``tags`` (a list or one string),
    each once, in order; the model's tags stay as they were."""
    model = ORTModelForCausalLM.from_pretrained(lm_export.folder, threads=1)
    model.add_model_tags(["mine", "onnx"])
    model.push_to_hub("user/tiny", tags=["de-en", "talk_hf", "mine", "wmt"])
    assert hub[-1]["card"].data.tags == ["onnx", "talk_hf", "talk_lm", "mine", "de-en", "wmt"]
    assert model.model_tags == ["mine", "onnx"]
    model.push_to_hub("user/tiny", tags="de-en")
    assert hub[-1]["card"].data.tags == ["onnx", "talk_hf", "talk_lm", "mine", "de-en"]


def test_tags_join_a_repos_own_card(lm_export, hub):
    """A repository's own card (at the pushed revision) gains the tags it lacks in its metadata, its text and other
    metadata kept, as transformers' ``create_and_tag_model_card`` does; it is not uploaded again when it has them."""
    hub.append({"readme": OWN_CARD})
    model = ORTModelForCausalLM.from_pretrained(lm_export.folder, threads=1)
    model.push_to_hub("user/tiny", revision="v1", tags=["wmt", "mine", "wmt"])
    assert hub[-2] == {"call": "hf_hub_download", "repo_id": "user/tiny", "filename": "README.md", "revision": "v1"}
    card = hub[-1]["card"]
    assert card.data.to_dict() == {"license": "mit", "tags": ["mine", "wmt"]} and card.text == ModelCard(OWN_CARD).text
    assert hub[-1]["files"] == sorted(written(lm_export.folder) | {"README.md"})
    model.push_to_hub("user/tiny", tags="mine")
    assert hub[-1]["files"] == sorted(written(lm_export.folder)) and hub[-1]["card"] is None


@pytest.mark.parametrize("tags", [3, ["wmt", 3], {"wmt"}, b"wmt"])
def test_tags_that_are_no_strings_are_refused_before_the_hub(lm_export, hub, tags):
    model = ORTModelForCausalLM.from_pretrained(lm_export.folder, threads=1)
    with pytest.raises(TypeError, match=r"push_to_hub: tags must be a string or a list of strings .*, got "):
        model.push_to_hub("user/tiny", tags=tags)
    assert hub == []


@pytest.mark.parametrize(
    "tasks, pipeline_tag",
    [
        ({"summarization": {"num_beams": 4, "no_repeat_ngram_size": 3}}, "summarization"),
        ({"translation_en_to_de": {}, "translation_en_to_fr": {}}, "translation"),
        ({"translation": {}}, "translation"),
        ({"summarization": {}, "translation_en_to_de": {}}, "text2text-generation"),  # T5's: both
        ({"summarizations": {}}, "text2text-generation"),
        (None, "text2text-generation"),
    ],
)
def test_an_encoder_decoders_pipeline_tag_is_the_task_its_configuration_names(
    seq2seq_export, tmp_path, hub, tasks, pipeline_tag
):
    """Read from the config.json of the exported folder (``task_specific_params``, transformers' record of a
    checkpoint's tasks)."""
    folder = seq2seq_export.copy(tmp_path / "export")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "task_specific_params": tasks}))
    ORTModelForSeq2SeqLM.from_pretrained(folder, threads=1).push_to_hub("user/tiny")
    assert hub[-1]["card"].data.pipeline_tag == pipeline_tag


def test_a_causal_lms_pipeline_tag_is_text_generation_whatever_its_configuration_says(lm_export, hub):
    model = ORTModelForCausalLM.from_pretrained(lm_export.folder, threads=1)
    model.config.task_specific_params = {"summarization": {}}
    model.push_to_hub("user/tiny")
    assert hub[-1]["card"].data.pipeline_tag == "text-generation"


def test_transformers_own_push_to_hub_uploads_the_exported_folder(lm_export, hub, monkeypatch):
    """``PushToHubMixin.push_to_hub(model, ...)`` saves with max_shard_size and uploads what that saved, with
    transformers' own model card; a max_shard_size smaller than a graph is refused by the save, after
    transformers created the repository."""

    def no_card(repo_id, **kwargs):
        raise EntryNotFoundError(f"{repo_id} has no README.md")

    monkeypatch.setattr(ModelCard, "load", no_card)
    model = ORTModelForCausalLM.from_pretrained(lm_export.folder, threads=1)
    PushToHubMixin.push_to_hub(model, "user/tiny")
    assert hub[-1]["files"] == sorted(written(lm_export.folder) | {"README.md"})
    assert hub[-1]["card"].data.library_name == "transformers"
    with pytest.raises(
        ValueError,
        match=r"max_shard_size='1KB' \(1000 bytes\), but .* graphs \{'decoder_step.onnx': \d+, 'decoder_prompt.onnx'",
    ):
        PushToHubMixin.push_to_hub(model, "user/tiny", max_shard_size="1KB")
    assert hub[-1]["call"] == "create_repo"


def test_save_pretrained_pushes_to_a_branch(lm_export, tmp_path, hub):
    model = ORTModelForCausalLM.from_pretrained(lm_export.folder, threads=1)
    model.save_pretrained(tmp_path / "tiny", push_to_hub=True, revision="v1", create_pr=True)
    assert [call["call"] for call in hub] == ["create_repo", "create_branch", "file_exists", "create_commit"]
    assert hub[1] == {"call": "create_branch", "repo_id": "user/tiny", "branch": "v1"}  # the saved folder's name
    assert hub[3]["revision"] == "v1" and hub[3]["create_pr"] is True and hub[3]["commit_message"]
    with pytest.raises(TypeError, match=r"save_pretrained does not take \['tags'\]"):  # nor does transformers'
        model.save_pretrained(tmp_path / "tiny", push_to_hub=True, tags=["onnx"])
