"""The export's id (`runner_checks.EXPORT_ID`): written into the manifest and every graph's metadata, so that a
graph copied into a folder from another export of the same shapes is refused by name when the folder loads; a
folder exported before the id (no ``export_id`` in its manifest) loads as it did."""

from __future__ import annotations

import json
import shutil

import pytest

pytest.importorskip("onnxruntime")

import onnx  # noqa: E402

from talk_hf.export import OnnxGenerator  # noqa: E402
from talk_hf.export.runner_checks import EXPORT_ID, read_manifest  # noqa: E402


def export_id(folder) -> str:
    return json.loads((folder / "manifest.json").read_text())[EXPORT_ID]


def test_every_graph_carries_its_exports_id(shared_exports):
    lm, seq2seq = shared_exports("talk-lm"), shared_exports("dynamic-seq2seq")
    assert export_id(lm.folder) != export_id(seq2seq.folder) and len(export_id(lm.folder)) == 32
    for name in read_manifest(lm.folder)["files"].values():
        metadata = {
            entry.key: entry.value for entry in onnx.load(lm.folder / name, load_external_data=False).metadata_props
        }
        assert metadata[EXPORT_ID] == export_id(lm.folder)


def test_a_graph_of_another_export_is_refused_by_name(shared_exports, tmp_path):
    """Both exports' beam candidates graphs have the same vocabulary: the other's fits every shape check."""
    lm, seq2seq = shared_exports("talk-lm"), shared_exports("dynamic-seq2seq")
    folder = lm.copy(tmp_path / "export")
    shutil.copyfile(seq2seq.folder / "beam_candidates.onnx", folder / "beam_candidates.onnx")
    other = export_id(seq2seq.folder)
    with pytest.raises(ValueError, match=rf"beam_candidates.onnx is not a graph of the export .*export_id '{other}'"):
        OnnxGenerator(folder, threads=1)
    manifest = json.loads((folder / "manifest.json").read_text())
    del manifest[EXPORT_ID]  # as an export before the id wrote it: loads, graphs unchecked
    (folder / "manifest.json").write_text(json.dumps(manifest))
    assert OnnxGenerator(folder, threads=1).manifest["files"]["beam_candidates"] == "beam_candidates.onnx"


def test_a_damaged_export_id_is_named(shared_exports, tmp_path):
    folder = shared_exports("talk-lm").copy(tmp_path / "export")
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({**manifest, EXPORT_ID: 7}))
    with pytest.raises(ValueError, match="field export_id must be the export's id, a non-empty string, got 7"):
        read_manifest(folder)
