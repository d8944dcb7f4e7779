"""Whether the files of a run folder read back whole, checked without running anything they hold.

A pickle can run any code when it is loaded, so no file of a run folder is ever unpickled with
`weights_only=False`: torch files (`.bin`, `.pkl`, `.pt`, zip archives) are checked by the CRC of
each archive member and then loaded with torch's `weights_only=True` unpickler, which builds
tensors, numbers, strings and containers only (and, through Accelerate's allow-list, the numpy
arrays of the random-number states), and refuses anything else without calling it; the `.metadata`
pickles of `torch.distributed.checkpoint` folders (FSDP) are unpickled with an allow-list of their
data classes (`CheckpointMetadataUnpickler`). The folders that
`save_pretrained` writes (`last/`, `best/`) record the SHA-256 of each file (`recorded_hashes`), so
damage that leaves a file readable (tensor bytes changed in place) is found too.
"""

import hashlib
import json
import pickle
import zipfile
from pathlib import Path

import safetensors
import torch
from accelerate.utils import load as accelerate_load

from .messages import first_line

TORCH_SUFFIXES = (".bin", ".pkl", ".pt")
# What `save_pretrained` of our tokenizers (all fast ones) writes, and a reload needs.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
# Where `save_model` records the hashes of the files of last/ and best/.
HASHES_FILE, HASHES_KEY = "training_state.json", "sha256"


def file_problem(path):
    """Why the file `path` does not load, or None: JSON must parse, safetensors must hold all the
    data their header promises, torch files must be whole zip archives of plain data. Other files pass."""
    path = Path(path)
    try:
        if path.suffix == ".json":
            json.loads(path.read_text())
        elif path.suffix == ".safetensors":
            with safetensors.safe_open(str(path), "pt") as f:
                f.keys()
        elif path.suffix in TORCH_SUFFIXES:
            return torch_file_problem(path)
        elif path.name.endswith(".metadata"):
            return checkpoint_metadata_problem(path)
    except Exception as error:  # each reader raises its own kinds
        return first_line(error)
    return None


def archive_problem(path):
    """Why the `torch.save` file `path` is no whole zip archive, or None: `torch.load` itself
    checks no CRC, so a changed byte in a tensor would load as another number."""
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()  # reads every member and checks its CRC
    except (zipfile.BadZipFile, OSError) as error:
        return f"not a whole torch.save archive: {first_line(error)}"
    return None if damaged is None else f"its member {damaged} is damaged (CRC mismatch)"


def torch_file_problem(path):
    """Why the `torch.save` file `path` does not load, or None, found without running its pickle."""
    problem = archive_problem(path)
    if problem is not None:
        return problem
    try:
        accelerate_load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        unsupported = [line.strip() for line in str(error).splitlines() if "Unsupported" in line]
        return (
            "it holds objects other than tensors and plain data, which these scripts never load since a pickle "
            f"can run code ({unsupported[0] if unsupported else first_line(error)})"
        )
    except Exception as error:  # torch raises many kinds
        return first_line(error)
    return None


class CheckpointMetadataUnpickler(pickle.Unpickler):
    """Unpickles the `.metadata` of a `torch.distributed.checkpoint` folder (what Accelerate saves
    under FSDP's SHARDED_STATE_DICT, and torch reads with a plain `pickle.load`) from the data
    classes it is made of, and refuses any other global before importing or calling it."""

    PLAIN = {("torch", "Size"), ("torch.serialization", "_get_layout"), ("collections", "OrderedDict")}
    PLAIN |= {("pathlib", name) for name in ("Path", "PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath")}

    def find_class(self, module, name):
        checkpoint_class = module.startswith("torch.distributed.checkpoint.")
        dtype = module == "torch" and isinstance(getattr(torch, name, None), torch.dtype)
        if not (checkpoint_class or dtype or (module, name) in self.PLAIN):
            raise pickle.UnpicklingError(f"Unsupported global: {module}.{name}")
        found = super().find_class(module, name)
        if checkpoint_class and not isinstance(found, type):
            raise pickle.UnpicklingError(f"Unsupported global: {module}.{name} is no class")
        return found


def checkpoint_metadata_problem(path):
    """Why the `torch.distributed.checkpoint` metadata file `path` does not load, or None, found
    without running anything but the constructors of its data classes."""
    try:
        with open(path, "rb") as f:
            CheckpointMetadataUnpickler(f).load()
    except pickle.UnpicklingError as error:
        return f"it holds objects other than checkpoint metadata, which a pickle can make run code ({error})"
    except Exception as error:  # a damaged pickle raises many kinds
        return first_line(error)
    return None


def damaged_file(folder):
    """'<file> does not load (<why>)' for the first file of `folder` that does not (`file_problem`), or None."""
    for path in sorted(Path(folder).iterdir()):
        problem = file_problem(path) if path.is_file() else None
        if problem is not None:
            return f"{path} does not load ({problem})"
    return None


def missing_file(folder, names):
    """'<file> is missing' for the first of the files `names` that `folder` lacks, or None."""
    for name in names:
        if not (Path(folder) / name).is_file():
            return f"{Path(folder) / name} is missing"
    return None


def sha256(path):
    """The SHA-256 of the bytes of the file `path`, in hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def file_hashes(folder):
    """{name: sha256} of every file directly in `folder`."""
    return {path.name: sha256(path) for path in sorted(Path(folder).iterdir()) if path.is_file()}


def hash_problem(folder):
    """What the hashes that `folder`'s `training_state.json` records say is wrong with its files: a
    file that is missing or whose bytes changed since the save; None when all match."""
    record = Path(folder) / HASHES_FILE
    saved = json.loads(record.read_text()) if record.is_file() else None
    hashes = saved.get(HASHES_KEY) if isinstance(saved, dict) else None
    if not isinstance(hashes, dict) or not hashes:
        return f"{record} records no {HASHES_KEY} of the folder's files, so they cannot be checked"
    for name, expected in sorted(hashes.items()):
        path = Path(folder) / name
        if path.name != name:
            return f"{record} records a hash of {name}, which is no file of {folder}"
        if not path.is_file():
            return f"{path} is missing"
        if sha256(path) != expected:
            return f"{path} does not match the SHA-256 that {record} recorded when it was saved (its bytes changed)"
    return None


def saved_model_problem(folder):
    """What is wrong with the `save_pretrained` folder of a model and its tokenizer
    (`checkpoints.save_model`): a file that does not load, one it cannot do without, or one whose
    bytes differ from the hash recorded at the save; None when it is whole."""
    folder = Path(folder)
    problem = damaged_file(folder)
    if problem is not None:
        return problem
    index = folder / "model.safetensors.index.json"  # a sharded checkpoint lists its shards
    listing = json.loads(index.read_text()) if index.is_file() else {"weight_map": {}}
    weight_map = listing.get("weight_map") if isinstance(listing, dict) else None
    if not isinstance(weight_map, dict):
        return f"{index} holds no weight_map of the shards"
    weights = sorted(set(weight_map.values()))
    needed = ["config.json", *(weights or ["model.safetensors"]), *TOKENIZER_FILES, HASHES_FILE]
    return missing_file(folder, needed) or hash_problem(folder)
