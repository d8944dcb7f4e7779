"""Saving and uploading the exported folder of a `talk_hf.onnx` model: `ExportedFolderHubMixin` gives the
models ``save_pretrained`` (`save_folder`: an atomic copy of the folder by `talk_hf.export.folder_writes`'
rules) and ``push_to_hub`` (``create_repo``, then one ``create_commit`` of the folder's files and, into a
repository without a README.md, its model card: `model_card`; ``tags`` join that card's, or the metadata of the
repository's own), as ``PreTrainedModel.push_to_hub`` does.  Both copy or upload the files the folder's manifest
lists, nothing else of it, and refuse a folder changed since the model was loaded; as transformers' do, both write
the model's in-memory ``generation_config`` (which ``generate`` honours), and the manifest's generation settings
restated from it (`restate_generation`), so that the runner of the copy decodes as the model does.
transformers' own ``PushToHubMixin.push_to_hub(model, repo_id)`` works too: it calls ``save_pretrained(..., max_shard_size=...)``,
whose size no graph may exceed (`check_shard_size`).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import huggingface_hub
from huggingface_hub import CommitOperationAdd, ModelCard
from transformers.utils.hub import convert_file_size_to_int

from ..export.folder_writes import check_replaceable, previous_export_files, publish, remove_stale, staging_folder
from ..export.onnx_files import generation_fields, special_tokens, write_generation_config, write_manifest
from ..export.runner_checks import GENERATION_CONFIG_FILE, MANIFEST_NAME, read_manifest
from ..model_card import CARD_NAME, merged_tags
from .exported_folder import check_unchanged
from .hub import refuse_keywords
from .model_card import exported_model_card, tag_list, tagged_card

# save_pretrained(..., push_to_hub=True)'s keywords for push_to_hub.
PUSH_KEYWORDS = ("repo_id", "commit_message", "commit_description", "private", "token", "revision", "create_pr")
DEFAULT_SHARD_SIZE = "50GB"  # transformers' max_shard_size
# The files that save_pretrained and push_to_hub write from the model's in-memory generation_config (restate_generation).
RESTATED = (GENERATION_CONFIG_FILE, MANIFEST_NAME)


class ExportedFolderHubMixin:
    """``save_pretrained`` and ``push_to_hub`` of a model loaded from the exported ``folder``, whose files'
    states at loading ``loaded_files`` holds (`exported_folder.file_states`): both refuse a folder changed
    since (`check_unchanged`) before they write or upload anything."""

    folder: Path
    loaded_files: dict[str, tuple[int, int] | None]
    model_tags: list[str] | None  # PreTrainedModel's (add_model_tags), which push_to_hub's tags follow

    def save_pretrained(
        self,
        save_directory: str | Path,
        push_to_hub: bool = False,
        overwrite: bool = False,
        max_shard_size: int | str = DEFAULT_SHARD_SIZE,
        **kwargs,
    ):
        """Copy the exported folder into ``save_directory`` (`save_folder`: all or nothing, other files kept),
        a folder that ``from_pretrained`` loads, with the model's in-memory ``generation_config``
        (`restate_generation`; a setting the runner cannot apply refused, naming it); with ``push_to_hub``, then
        upload it (`push_to_hub`'s keywords, ``repo_id`` defaulting to the folder's name).  ``overwrite``: replace files of an export's names that no
        export wrote there.  ``max_shard_size``: as transformers', the largest weights file to write; a graph is
        never split, so one larger is refused (`check_shard_size`)."""
        owner = type(self).__name__
        pushed = {name: kwargs.pop(name) for name in PUSH_KEYWORDS if push_to_hub and name in kwargs}
        refuse_keywords(f"{owner}.save_pretrained", kwargs)
        destination = save_folder(self, save_directory, overwrite, max_shard_size)
        if push_to_hub:
            self.push_to_hub(pushed.pop("repo_id", destination.resolve().name), max_shard_size=max_shard_size, **pushed)

    def push_to_hub(
        self,
        repo_id: str,
        commit_message: str | None = None,
        commit_description: str | None = None,
        private: bool | None = None,
        token: str | bool | None = None,
        revision: str | None = None,
        create_pr: bool = False,
        max_shard_size: int | str = DEFAULT_SHARD_SIZE,
        tags: list[str] | str | None = None,
        **kwargs,
    ):
        """Upload the exported folder's files (those its manifest lists) to the Hub repository ``repo_id``,
        created where missing (``private``), on the branch ``revision`` (created where missing) or as a pull
        request (``create_pr``), in one commit, as ``PreTrainedModel.push_to_hub`` does, generation_config.json
        and the manifest those of the model's in-memory ``generation_config`` (`restate_generation`); with them,
        where the repository (at ``revision``) has no README.md, the model card `model_card.exported_model_card`.
        ``tags`` (a string or a list of strings), after the model's ``model_tags`` (``add_model_tags``), as
        transformers merges them: the new card's tags, after its own; a repository's own README.md gains in its
        metadata those it lacks (`model_card.tagged_card`), and is otherwise kept as it is.
        ``max_shard_size``: as for `save_pretrained`.  What ``huggingface_hub.HfApi.create_commit`` returns."""
        owner = type(self).__name__
        refuse_keywords(f"{owner}.push_to_hub", kwargs)
        tags = merged_tags(self.model_tags or [], tag_list(tags))
        names = folder_file_names(self.folder, self.loaded_files, owner)  # before anything reaches the Hub
        check_shard_size(self.folder, max_shard_size, owner)
        with tempfile.TemporaryDirectory(prefix="talk_hf-generation-") as restated:
            manifest = restate_generation(self, Path(restated))  # refused before anything reaches the Hub
            files = [
                CommitOperationAdd(path_in_repo=name, path_or_fileobj=(Path(restated) / name).read_bytes())
                if name in RESTATED
                else CommitOperationAdd(path_in_repo=name, path_or_fileobj=str(self.folder / name))
                for name in names
            ]
        api = huggingface_hub.HfApi(token=token)
        repo_id = api.create_repo(repo_id, private=private, exist_ok=True).repo_id
        if revision is not None and not revision.startswith("refs/pr/"):
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        if not api.file_exists(repo_id, CARD_NAME, revision=revision):
            tasks = getattr(self.config, "task_specific_params", None)
            card = exported_model_card(repo_id, manifest, names, owner, tags, tasks)
        elif tags:
            card = tagged_card(ModelCard.load(api.hf_hub_download(repo_id, CARD_NAME, revision=revision)), tags)
        else:
            card = None
        if card is not None:
            files.append(CommitOperationAdd(path_in_repo=CARD_NAME, path_or_fileobj=str(card).encode()))
        return api.create_commit(
            repo_id,
            files,
            commit_message=commit_message or f"Upload {owner}'s exported folder (talk_hf)",
            commit_description=commit_description,
            revision=revision,
            create_pr=create_pr,
        )


def save_folder(
    model: ExportedFolderHubMixin, destination: str | Path, overwrite: bool, max_shard_size: int | str
) -> Path:
    """Copy ``model``'s exported folder (the files its ``loaded_files`` lists, as they were at loading) into
    ``destination``, generation_config.json and the manifest restated from its in-memory ``generation_config``
    (`restate_generation`), all or nothing, by `talk_hf.export.folder_writes`' rules: a file of the same name
    that no export wrote is refused unless ``overwrite``, an earlier export's files that this one lacks are
    removed, no other file is touched.

    Raises:
        ValueError: ``destination`` is the model's folder; the folder changed since loading (`check_unchanged`); a
            file larger than ``max_shard_size`` (`check_shard_size`); a generation setting that the runner cannot
            apply (`restate_generation`).
        FileNotFoundError: a file of the source is gone.
        FileExistsError, IsADirectoryError, NotADirectoryError: `folder_writes.check_replaceable`.
    """
    source, loaded, owner = model.folder, model.loaded_files, type(model).__name__
    destination = Path(destination)
    if destination.resolve() == source.resolve():
        raise ValueError(
            f"{owner}.save_pretrained({str(destination)!r}) would write the exported folder onto itself: it holds "
            "the model already; save into another folder"
        )
    names = folder_file_names(source, loaded, owner)
    check_shard_size(source, max_shard_size, owner)
    check_replaceable(destination, names, overwrite)
    previous = previous_export_files(destination)
    destination.mkdir(parents=True, exist_ok=True)
    with staging_folder(destination) as staging:
        for name in names:
            if name not in RESTATED:
                shutil.copyfile(source / name, staging / name)  # a link: the file it points to
        restate_generation(model, staging)
        publish(staging, destination, names)
    remove_stale(destination, previous, names)
    return destination


def restate_generation(model: ExportedFolderHubMixin, folder: Path) -> dict:
    """Write into ``folder`` the files of `RESTATED`: ``model``'s in-memory ``generation_config`` as
    generation_config.json (as ``save_pretrained`` writes it) and its exported folder's manifest with the special
    tokens, generation settings, default length and generation_config.json's hash restated from it as the export
    states them (`talk_hf.export.onnx_files.special_tokens`, `generation_fields`), checked as the runner reads it;
    that manifest.

    Raises:
        ValueError: a setting of ``generation_config`` that the runner cannot apply, naming it, before anything is
            written.
    """
    manifest = read_manifest(model.folder)
    owner, vocab_size = type(model).__name__, manifest["vocab_size"]
    manifest["special_tokens"] = special_tokens(model)
    manifest.update(generation_fields(model.generation_config, vocab_size, model.config, owner))
    manifest.update(write_generation_config(model.generation_config, folder))
    write_manifest(manifest, folder, model.folder)
    return manifest


def folder_file_names(folder: Path, loaded: dict, owner: str) -> list[str]:
    """The files of ``folder`` to copy or upload: those ``loaded`` lists (its manifest's, `exported_file_names`),
    checked unchanged since loading and present.  A graph's ONNX external data is not among them: an export
    writes none, and a graph saved so by another tool fails to load from the copy, ONNX Runtime naming the file."""
    check_unchanged(folder, loaded, owner)
    missing = [name for name in loaded if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{folder} lacks {missing}, which its {MANIFEST_NAME} lists as exported: export the model again "
            f"(python -m talk_hf.export MODEL_DIR {folder})"
        )
    return list(loaded)


def check_shard_size(folder: Path, max_shard_size, owner: str) -> None:
    """Refuse ``max_shard_size`` (transformers' keyword: an int of bytes or a size such as ``"5GB"``) where a
    graph of ``folder`` is larger, naming it: an exported graph is one file (ONNX's protobuf limit, 2 GB), which
    cannot be sharded."""
    try:
        if isinstance(max_shard_size, bool) or not isinstance(max_shard_size, (int, str)):
            raise ValueError
        limit = convert_file_size_to_int(max_shard_size)
    except ValueError:
        raise ValueError(
            f"{owner}: max_shard_size must be an int of bytes or a size such as '5GB', got {max_shard_size!r}"
        ) from None
    graphs = read_manifest(folder)["files"].values()
    larger = {name: size for name in graphs if (size := (folder / name).stat().st_size) > limit}
    if larger:
        raise ValueError(
            f"{owner}: max_shard_size={max_shard_size!r} ({limit} bytes), but {folder}'s graphs {larger} (bytes) are "
            "larger, and an exported graph is one file, never sharded: pass a max_shard_size of at least the largest"
        )
