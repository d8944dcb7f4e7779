"""Saving and uploading the exported folder of a `talk_hf.onnx` model: `ExportedFolderHubMixin` gives the
models ``save_pretrained`` (`save_folder`: an atomic copy of the folder by `talk_hf.export.folder_writes`'
rules) and ``push_to_hub`` (``create_repo`` and ``upload_folder`` of the folder's files, as
``PreTrainedModel.push_to_hub`` does).  Both copy or upload the files the folder's manifest lists and its
graphs' external data, nothing else of it, and refuse a folder changed since the model was loaded.
"""

from __future__ import annotations

import glob
import shutil
from pathlib import Path

import huggingface_hub

from ..export.folder_writes import check_replaceable, previous_export_files, publish, remove_stale, staging_folder
from ..export.runner_checks import MANIFEST_NAME, read_manifest
from .exported_folder import check_unchanged, external_data_files
from .hub import refuse_keywords

# save_pretrained(..., push_to_hub=True)'s keywords for push_to_hub.
PUSH_KEYWORDS = ("repo_id", "commit_message", "commit_description", "private", "token", "revision", "create_pr")


class ExportedFolderHubMixin:
    """``save_pretrained`` and ``push_to_hub`` of a model loaded from the exported ``folder``, whose files'
    states at loading ``loaded_files`` holds (`exported_folder.file_states`): both refuse a folder changed
    since (`check_unchanged`) before they write or upload anything."""

    folder: Path
    loaded_files: dict[str, tuple[int, int] | None]

    def save_pretrained(self, save_directory: str | Path, push_to_hub: bool = False, overwrite: bool = False, **kwargs):
        """Copy the exported folder into ``save_directory`` (`save_folder`: all or nothing, other files kept),
        a folder that ``from_pretrained`` loads; with ``push_to_hub``, then upload it (`push_to_hub`'s keywords,
        ``repo_id`` defaulting to the folder's name).  ``overwrite``: replace files of an export's names that no
        export wrote there."""
        owner = type(self).__name__
        pushed = {name: kwargs.pop(name) for name in PUSH_KEYWORDS if push_to_hub and name in kwargs}
        refuse_keywords(f"{owner}.save_pretrained", kwargs)
        destination = save_folder(self.folder, save_directory, self.loaded_files, overwrite, owner)
        if push_to_hub:
            self.push_to_hub(pushed.pop("repo_id", destination.resolve().name), **pushed)

    def push_to_hub(
        self,
        repo_id: str,
        commit_message: str | None = None,
        commit_description: str | None = None,
        private: bool | None = None,
        token: str | bool | None = None,
        revision: str | None = None,
        create_pr: bool = False,
        **kwargs,
    ):
        """Upload the exported folder's files (those its manifest lists, and the graphs' external data) to the Hub
        repository ``repo_id``, created where missing (``private``), on the branch ``revision`` (created where
        missing) or as a pull request (``create_pr``), as ``PreTrainedModel.push_to_hub`` does; what
        ``huggingface_hub.upload_folder`` returns."""
        owner = type(self).__name__
        refuse_keywords(f"{owner}.push_to_hub", kwargs)
        names = folder_file_names(self.folder, self.loaded_files, owner)  # before anything reaches the Hub
        api = huggingface_hub.HfApi(token=token)
        repo_id = api.create_repo(repo_id, private=private, exist_ok=True).repo_id
        if revision is not None and not revision.startswith("refs/pr/"):
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        return api.upload_folder(
            repo_id=repo_id,
            folder_path=self.folder,
            allow_patterns=[glob.escape(name) for name in names],
            commit_message=commit_message or f"Upload {owner}'s exported folder (talk_hf)",
            commit_description=commit_description,
            revision=revision,
            create_pr=create_pr,
        )


def save_folder(source: Path, destination: str | Path, loaded: dict, overwrite: bool, owner: str) -> Path:
    """Copy the exported ``source`` folder (the files ``loaded`` lists, as they were at loading, and the
    graphs' external data) into ``destination``, all or nothing, by `talk_hf.export.folder_writes`' rules: a
    file of the same name that no export wrote is refused unless ``overwrite``, an earlier export's files
    that this one lacks are removed, no other file is touched.

    Raises:
        ValueError: ``destination`` is ``source``; the source changed since loading (`check_unchanged`).
        FileNotFoundError: a file of the source is gone.
        FileExistsError, IsADirectoryError, NotADirectoryError: `folder_writes.check_replaceable`.
    """
    destination = Path(destination)
    if destination.resolve() == source.resolve():
        raise ValueError(
            f"{owner}.save_pretrained({str(destination)!r}) would write the exported folder onto itself: it holds "
            "the model already; save into another folder"
        )
    names = folder_file_names(source, loaded, owner)
    check_replaceable(destination, names, overwrite)
    previous = previous_export_files(destination)
    destination.mkdir(parents=True, exist_ok=True)
    with staging_folder(destination) as staging:
        for name in names:
            shutil.copyfile(source / name, staging / name)  # a link: the file it points to
        publish(staging, destination, names)
    remove_stale(destination, previous, names)
    return destination


def folder_file_names(folder: Path, loaded: dict, owner: str) -> list[str]:
    """The files of ``folder`` to copy or upload: those ``loaded`` lists (checked unchanged since loading and
    present), then the graphs' external data."""
    check_unchanged(folder, loaded, owner)
    missing = [name for name in loaded if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{folder} lacks {missing}, which its {MANIFEST_NAME} lists as exported: export the model again "
            f"(python -m talk_hf.export MODEL_DIR {folder})"
        )
    graphs = read_manifest(folder)["files"].values()
    return [*loaded, *(name for name in external_data_files(folder, graphs) if name not in loaded)]
