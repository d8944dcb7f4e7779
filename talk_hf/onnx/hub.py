"""Exported folders from the Hugging Face Hub, as `talk_hf.onnx`'s models load them.

`resolve_folder` gives the local folder of a name: an existing path as it is, else a Hub repository id
(as ``huggingface_hub`` recognises one), whose exported folder is downloaded into the Hub cache (or found
there offline): its manifest first, then the files the manifest lists (`exported_folder.exported_file_names`),
nothing else of the repository (no graph is read to find more).  Saving and uploading: `talk_hf.onnx.saving`.
The keywords of ``PreTrainedModel.from_pretrained`` / ``save_pretrained`` / ``push_to_hub`` that mean
nothing for an exported folder are refused by name (`check_loading_keywords`, `refuse_keywords`).
"""

from __future__ import annotations

import glob
from dataclasses import dataclass, replace
from pathlib import Path

import huggingface_hub
import torch
from huggingface_hub import constants
from huggingface_hub.errors import (
    HFValidationError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import validate_repo_id

from ..export.runner_checks import MANIFEST_NAME
from .exported_folder import exported_file_names

EXPORT_ADVICE = "export the PyTorch model first (python -m talk_hf.export MODEL_DIR OUT) and load or upload OUT"
# from_pretrained's keywords that take one value only here: the graphs' dtype, the CPU of ONNX Runtime's sessions.
FIXED_KEYWORDS = {
    "dtype": ("float32", lambda value: value in (torch.float32, "float32", "auto")),
    "torch_dtype": ("float32", lambda value: value in (torch.float32, "float32", "auto")),
    "device_map": (
        "cpu",
        lambda value: _is_cpu(value) or (isinstance(value, dict) and set(value) == {""} and _is_cpu(value[""])),
    ),
    "provider": ("CPUExecutionProvider", lambda value: value == "CPUExecutionProvider"),  # optimum's keyword
}


@dataclass(frozen=True)
class HubOptions:
    """``from_pretrained``'s Hub keywords, as ``huggingface_hub.snapshot_download`` takes them (``subfolder``:
    the exported folder's path in the repository, or in the local folder)."""

    revision: str | None = None
    token: str | bool | None = None
    cache_dir: str | Path | None = None
    local_files_only: bool = False
    force_download: bool = False
    subfolder: str = ""

    def download(self, repo_id: str, names: list[str]) -> Path:
        """The cached snapshot of ``repo_id`` holding (where the Hub or the cache has them) ``names`` of the
        exported folder: the snapshot's folder (``snapshots/<commit>``)."""
        patterns = [glob.escape(f"{self.subfolder}/{name}" if self.subfolder else name) for name in names]
        snapshot = huggingface_hub.snapshot_download(
            repo_id,
            revision=self.revision,
            cache_dir=self.cache_dir,
            token=self.token,
            local_files_only=self.local_files_only,
            force_download=self.force_download,
            allow_patterns=patterns,
        )
        return Path(snapshot)


def check_loading_keywords(owner: str, keywords: dict) -> None:
    """Refuse, by name, ``from_pretrained`` keywords of ``PreTrainedModel`` that mean nothing for an exported
    folder (``quantization_config``, ``config``, ``trust_remote_code``, ...) or take a value it cannot honour
    (``dtype`` / ``torch_dtype`` other than float32, ``device_map`` other than the CPU)."""
    fixed = {name: value for name, value in keywords.items() if name in FIXED_KEYWORDS}
    for name, value in fixed.items():
        expected, accepts = FIXED_KEYWORDS[name]
        if not accepts(value):
            raise ValueError(
                f"{owner}.from_pretrained: {name}={value!r}, but an exported folder runs in ONNX Runtime on the CPU in "
                f"float32 (int8 weights for a folder quantized with --int8): pass {name}={expected!r} or leave it out"
            )
    refuse_keywords(f"{owner}.from_pretrained", {name: keywords[name] for name in set(keywords) - set(fixed)})


def refuse_keywords(method: str, keywords: dict) -> None:
    """TypeError naming ``keywords`` (the ones of transformers' ``method`` that an exported folder has no use
    for), where there are any."""
    if keywords:
        raise TypeError(
            f"{method} does not take {sorted(keywords)}: an exported folder's graphs fix the model's weights, dtype "
            "and device, and its files are loaded, copied and uploaded as they are"
        )


def resolve_folder(name_or_path: str | Path, options: HubOptions) -> str | Path:
    """The local exported folder named by ``name_or_path``: an existing path (a `Path` always is one) joined
    with ``options.subfolder``, given back as it came without one; else a Hub repository id, downloaded.
    ``token``, ``cache_dir``, ``local_files_only`` and ``force_download`` say how to fetch a repository's files
    and have nothing to do for a local folder; a ``revision`` would choose other files, so it is refused there.

    Raises:
        ValueError: a ``revision`` with a local folder.
        FileNotFoundError: the repository (or its revision) is not on the Hub; offline (``HF_HUB_OFFLINE=1``
            or ``local_files_only``) and its files are not in the Hub cache; it holds no exported folder
            (no manifest.json: a PyTorch checkpoint's repository); or it lacks files its manifest lists.
    """
    if isinstance(name_or_path, Path) or Path(name_or_path).exists() or not _is_repo_id(str(name_or_path)):
        if options.revision is not None:
            raise ValueError(
                f"revision={options.revision!r} chooses a version of a Hub repository, but {str(name_or_path)!r} is a "
                "local path (a Path, an existing one, or no repository id): load the folder without revision"
            )
        return Path(name_or_path) / options.subfolder if options.subfolder else name_or_path
    repo = f"{name_or_path}" + (f" (revision {options.revision})" if options.revision else "")
    where = f"{repo}'s folder {options.subfolder!r}" if options.subfolder else repo
    snapshot = _downloading(repo, options, lambda: options.download(name_or_path, [MANIFEST_NAME]))
    folder = snapshot / options.subfolder
    if not (folder / MANIFEST_NAME).is_file():
        raise FileNotFoundError(
            f"{name_or_path} is neither a local folder nor, on the Hugging Face Hub, an exported folder: {where} has no "
            f"{MANIFEST_NAME}{_if_offline(options, ' in the Hub cache')} (a PyTorch checkpoint's repository has "
            f"none): {EXPORT_ADVICE}"
        )
    names = [name for name in exported_file_names(folder) if name != MANIFEST_NAME]
    if not names:  # a manifest that is not a talk_hf-onnx one: read_folder says why
        return folder
    pinned = replace(options, revision=snapshot.name)  # the manifest's commit, even if the branch moves on meanwhile
    _downloading(repo, options, lambda: pinned.download(name_or_path, names))
    _check_downloaded(folder, names, where, options)
    return folder  # its files are links to the repository's blobs, which the runner follows (`confined_file`)


def _is_repo_id(name: str) -> bool:
    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def _is_cpu(value) -> bool:
    try:
        return isinstance(value, (str, torch.device)) and torch.device(value).type == "cpu"
    except RuntimeError:  # a string that names no device
        return False


def _if_offline(options: HubOptions, text: str) -> str:
    return text if options.local_files_only or constants.HF_HUB_OFFLINE else ""


def _downloading(repo: str, options: HubOptions, download) -> Path:
    """``download()``, the Hub's refusals said in the exported folder's words."""
    try:
        return download()
    except RevisionNotFoundError:
        raise FileNotFoundError(f"{repo}: the Hugging Face Hub repository has no such revision") from None
    except RepositoryNotFoundError:
        raise FileNotFoundError(
            f"{repo} is neither a local folder nor a Hugging Face Hub repository that this token can read (a private "
            "or gated one needs token=... or `hf auth login`)"
        ) from None
    except LocalEntryNotFoundError:
        cache = options.cache_dir or constants.HF_HUB_CACHE
        raise FileNotFoundError(
            f"{repo} is not a local folder, and its exported folder is not cached in {cache} while the Hub cannot be "
            "reached (HF_HUB_OFFLINE=1, local_files_only=True, or no connection): load it once online, or pass the "
            "exported folder's local path"
        ) from None


def _check_downloaded(folder: Path, names: list[str], where: str, options: HubOptions) -> None:
    """FileNotFoundError naming the files of ``names`` that the download left out of ``folder``."""
    missing = [name for name in names if not (folder / name).is_file()]
    if missing:
        cause = (
            f"are not in the Hub cache ({options.cache_dir or constants.HF_HUB_CACHE}) and the Hub "
            "cannot be reached: load it once online"
            if _if_offline(options, "offline")
            else "are not in the repository: upload the whole exported folder (push_to_hub)"
        )
        raise FileNotFoundError(
            f"{where}'s exported folder lacks {missing}, which its {MANIFEST_NAME} lists: they {cause}"
        )
