"""The tiny models' ONNX exports that the serving tests share: each model is exported once per test
session, on first use, into a folder that no test changes (a test that damages, quantizes or
re-exports a folder works on a `copy` of it).  Exporting (tracing, then writing the graphs) is the
serving tests' largest cost, so every file that decodes with a model asks `SharedExports` for it.  Under
pytest-xdist the workers share one root folder (conftest.py): the first worker to ask for a model exports
it, holding that model's lock, and writes a record (its end token and files); the others read the record.

Each export's model has an end token chosen so that row 0 of its inputs ends early when the length is
free (`end_token`).  Two exports are made as the ORT model tests need them: the talk-lm folder carries
the word tokenizer, and the dynamic-seq2seq export is written over a copy of the talk-lm export, so
that it must remove the files of that earlier export which it does not write (the LM's tokenizer and
prompt graph).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from filelock import FileLock

from talk_hf.export import export_onnx

from ..models import helpers
from ..models.helpers import CASES, PAD, VOCAB, Case, word_tokenizer

# LightConv's encoder-decoder, its decoder's histories 1 and 4 rows long.
LIGHT_CONV_SEQ2SEQ = replace(
    helpers.LIGHT_CONV_SEQ2SEQ,
    config_kwargs={**helpers.LIGHT_CONV_SEQ2SEQ.config_kwargs, "decoder_kernel_sizes": [2, 5]},
)
_BY_NAME = {case.name: case for case in [*CASES, LIGHT_CONV_SEQ2SEQ]}
EXPORTED = {
    name: _BY_NAME[name]
    for name in (
        "talk-seq2seq",
        "talk-lm",
        "dynamic-seq2seq",
        "dynamic-lm",
        "light_conv-seq2seq",
        "light_conv-lm",
        "slicenet",
        "toy-seq2seq",
        "toy-lm",
    )
}
NEW_TOKENS = 8
WITH_TOKENIZER = "talk-lm"
# name -> the export whose folder (a copy of it) the export of ``name`` is written over.
EXPORTED_OVER = {"dynamic-seq2seq": "talk-lm"}


def inputs(case: Case) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, mask), each (3, S): an encoder-decoder's sources of different lengths (S = 7; row 0
    right-padded, row 1 left-padded) or an LM's prompts (S = 5; row 0 left-padded)."""
    ids = torch.randint(3, VOCAB, (3, 7 if case.is_seq2seq else 5), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    paddings = [(0, slice(5, None)), (1, slice(None, 3))] if case.is_seq2seq else [(0, slice(None, 2))]
    for padding in paddings:
        ids[padding], mask[padding] = PAD, 0
    return ids, mask


def end_token(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> int:
    """Row 0's first ordinary token from the third of `NEW_TOKENS` greedy new tokens on, decoded with
    no end token: set as the end token, it ends row 0 early."""
    model.generation_config.eos_token_id = None
    free = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False)
    return int(next(token for token in free[0, -NEW_TOKENS + 2 :] if token > PAD))


def fingerprint(folder: Path) -> dict[str, str]:
    """Every entry under ``folder``, by relative path: a file's SHA-256, a link's target."""
    return {
        str(path.relative_to(folder)): str(path.readlink())
        if path.is_symlink()
        else hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_symlink() or path.is_file()
    }


@dataclass(frozen=True)
class SharedExport:
    """One model's export: its folder (never to be changed; `fingerprint` of it as exported), the end
    token its model was exported with, and the (3, S) inputs of `inputs`."""

    name: str
    folder: Path
    eos: int
    ids: torch.Tensor
    mask: torch.Tensor
    exported_files: dict[str, str]

    def model(self) -> torch.nn.Module:
        """A new copy of the exported model (the case's seeded weights, this export's end token), so
        that no test sees another test's changes to it."""
        model = EXPORTED[self.name].model()
        model.generation_config.eos_token_id = model.config.eos_token_id = self.eos
        return model

    def copy(self, destination: Path) -> Path:
        """A copy of the folder at ``destination`` (links kept as links), for a test to change."""
        return shutil.copytree(self.folder, destination, symlinks=True)


class SharedExports:
    """``exports(name)``: the `SharedExport` of ``name`` (a key of `EXPORTED`), exported under ``root``
    the first time it is asked for."""

    def __init__(self, root: Path):
        self.root = root
        self.done: dict[str, SharedExport] = {}

    def __call__(self, name: str) -> SharedExport:
        if name not in self.done:
            self.done[name] = self._export(name)
        return self.done[name]

    def check_unchanged(self) -> None:
        """AssertionError naming each shared folder whose files a test changed (it should have changed
        a `SharedExport.copy`)."""
        changed = [
            str(export.folder) for export in self.done.values() if fingerprint(export.folder) != export.exported_files
        ]
        assert not changed, f"tests changed the shared exports {changed}: change a SharedExport.copy instead"

    def _export(self, name: str) -> SharedExport:
        """The export of ``name`` under ``root``: read from its record where another session (an xdist
        worker) made it, else made here and recorded; one session at a time per model."""
        ids, mask = inputs(EXPORTED[name])
        folder = self.root / name
        record = self.root / f"{name}.json"
        with FileLock(self.root / f"{name}.lock"):
            if record.exists():
                made = json.loads(record.read_text())
                return SharedExport(name, folder, made["eos"], ids, mask, made["files"])
            model = EXPORTED[name].model()
            eos = end_token(model, ids, mask)
            model.generation_config.eos_token_id = model.config.eos_token_id = eos
            if name in EXPORTED_OVER:
                self(EXPORTED_OVER[name]).copy(folder)
            export_onnx(model, folder, tokenizer=word_tokenizer() if name == WITH_TOKENIZER else None)
            files = fingerprint(folder)
            record.with_suffix(".partial").write_text(json.dumps({"eos": eos, "files": files}))
            os.replace(record.with_suffix(".partial"), record)
        return SharedExport(name, folder, eos, ids, mask, files)
