"""Reading an exported folder for `talk_hf.onnx`'s models: its runner (manifest and ONNX Runtime
sessions), config.json and generation_config.json, each refused with a message naming the file; a
config.json whose vocabulary sizes are not the graphs' is refused naming the field and both sizes.  Also the
folder's files, for a download, a copy or an upload of it (`talk_hf.onnx.hub`, `talk_hf.onnx.saving`): those
its manifest lists, and their states at loading, to tell a folder rewritten since.  These are the whole model:
an export writes no ONNX external data (each graph one file), and a graph that another tool saved with
external data loads only where that file lies beside it (else ONNX Runtime's error names the file)."""

from __future__ import annotations

from pathlib import Path

from transformers import CONFIG_MAPPING, AutoConfig, GenerationConfig

from ..export.folder_writes import previous_export_files
from ..export.onnx_files import CONFIG_FILE, GENERATION_CONFIG_FILE
from ..export.runner import OnnxGenerator
from ..export.runner_checks import MANIFEST_NAME

CLASSES = {True: "ORTModelForSeq2SeqLM", False: "ORTModelForCausalLM"}  # by is_encoder_decoder


def read_folder(folder: str | Path, is_encoder_decoder: bool, **session_options):
    """(config, generation config, runner) of an exported model of the kind ``is_encoder_decoder``.

    Args:
        folder: written by ``python -m talk_hf.export`` (local).
        session_options: ``threads``, ``optimization``, ``spin`` (`talk_hf.export.OnnxGenerator`).

    Raises:
        FileNotFoundError: no manifest, graph, config.json or generation_config.json.
        ValueError: a damaged manifest (`talk_hf.export.read_manifest`), a model of the other kind, a
            config.json that does not load, of a model type this process has not registered or other than
            the manifest's, or whose vocabulary sizes are not the graphs' (`_check_vocabularies`).
    """
    # The model decodes with generation_config.json's settings (an edited one too), not the manifest's.
    generator = OnnxGenerator(folder, **session_options, check_generation_config=False)
    manifest, folder = generator.manifest, Path(folder)
    if manifest["is_encoder_decoder"] != is_encoder_decoder:
        kind = "an encoder-decoder" if manifest["is_encoder_decoder"] else "a causal LM"
        raise ValueError(
            f"{folder} holds {kind} ({manifest['model_type']}): load it with {CLASSES[manifest['is_encoder_decoder']]}"
        )
    for name in (CONFIG_FILE, GENERATION_CONFIG_FILE):
        if not (folder / name).is_file():
            raise FileNotFoundError(
                f"{folder} has no {name} (an export by an older talk_hf, or a damaged folder): export the model "
                f"again (python -m talk_hf.export MODEL_DIR {folder})"
            )
    config = _read_config(folder, manifest["model_type"])
    _check_vocabularies(config, manifest, folder)
    return config, GenerationConfig.from_pretrained(folder), generator


def _read_config(folder: Path, model_type: str):
    """The model configuration exported into ``folder``, of the manifest's ``model_type``."""
    try:
        config = AutoConfig.from_pretrained(folder)
    except (ValueError, KeyError) as error:
        if model_type in CONFIG_MAPPING:  # the configuration's own checks refused a field
            remedy = f"export the model again (python -m talk_hf.export MODEL_DIR {folder})"
        else:
            remedy = (
                f"import the package that registers its model type {model_type!r} first (a family added with "
                "talk_hf.register_family)"
            )
        raise ValueError(f"{folder / CONFIG_FILE} could not be read ({error}): {remedy}") from None
    if config.model_type != model_type:
        raise ValueError(
            f"{folder / CONFIG_FILE} is of model type {config.model_type!r} but the manifest's graphs of {model_type!r}: "
            "the folder mixes two exports; export the model again"
        )
    return config


def _check_vocabularies(config, manifest: dict, folder: Path) -> None:
    """ValueError naming config.json's field and both sizes where the configuration's vocabulary is not
    the graphs' (an edited config.json, or one of another export): ``vocab_size`` is the ids the graphs
    embed (an encoder-decoder's source, as the manifest's ``source_vocab_size`` has it; a causal LM's
    one vocabulary), and an encoder-decoder's target vocabulary (``decoder_vocab_size`` where its
    configuration has one, else ``vocab_size``) is the width of the step graph's logits, the manifest's
    ``vocab_size``."""
    sizes = []  # (config.json's field, the graphs' size, what it is, the manifest's field)
    if not manifest["is_encoder_decoder"]:
        sizes.append(("vocab_size", manifest["vocab_size"], "vocabulary", "vocab_size"))
    else:
        if "source_vocab_size" in manifest:  # an older export's manifest has none
            sizes.append(("vocab_size", manifest["source_vocab_size"], "source vocabulary", "source_vocab_size"))
        target = "decoder_vocab_size" if getattr(config, "decoder_vocab_size", None) is not None else "vocab_size"
        sizes.append((target, manifest["vocab_size"], "target vocabulary (their logits' width)", "vocab_size"))
    for field, exported, what, manifest_field in sizes:
        if getattr(config, field) != exported:
            raise ValueError(
                f"{folder / CONFIG_FILE} has {field}={getattr(config, field)} but the exported graphs' {what} is "
                f"{exported} ({MANIFEST_NAME}'s {manifest_field}): config.json was edited or comes from another "
                f"export; export the model again (python -m talk_hf.export MODEL_DIR {folder})"
            )


def exported_file_names(folder: Path) -> list[str]:
    """The files of ``folder`` that its model is: those an export wrote there, as its manifest lists them
    (`folder_writes.previous_export_files`: its ``written`` list, or an older manifest's graphs and runner),
    and the manifest and configurations that `read_folder` reads; empty where ``folder`` holds no talk_hf-onnx
    manifest.

    Raises:
        ValueError: the manifest lists a name that is no file name of ``folder`` (a path into a folder or out of
            it), which no copy or download may follow.
    """
    written = previous_export_files(Path(folder))
    outside = sorted(name for name in written if Path(name).name != name or name in (".", "..") or "\\" in name)
    if outside:
        raise ValueError(
            f"{Path(folder) / MANIFEST_NAME} field written lists {outside}, which are not file names of the folder: the "
            f"manifest was edited or damaged; export the model again (python -m talk_hf.export MODEL_DIR {folder})"
        )
    return sorted(written | {CONFIG_FILE, GENERATION_CONFIG_FILE, MANIFEST_NAME}) if written else []


def file_states(folder: Path, names: list[str]) -> dict[str, tuple[int, int] | None]:
    """Each file's (size, modification time in ns) in ``folder`` (a link's target's), None where there is none:
    what `check_unchanged` compares to tell a file rewritten (a new export, an int8 quantization) since."""
    states = {}
    for name in names:
        try:
            status = (folder / name).stat()
            states[name] = (status.st_size, status.st_mtime_ns)
        except OSError:
            states[name] = None
    return states


def check_unchanged(folder: Path, loaded: dict[str, tuple[int, int] | None], owner: str) -> None:
    """Refuse, naming the files, to copy or upload ``folder`` when its files are not those ``owner`` (a model's
    class) loaded (`file_states` at loading): written since (a new export, quantize_exported), or removed."""
    changed = [name for name, state in file_states(folder, list(loaded)).items() if state != loaded[name]]
    if changed:
        raise ValueError(
            f"{folder}'s files {changed} changed since this {owner} was loaded from it (a new export or int8 "
            f"quantization, or removed), so it no longer holds this model: load it again with {owner}.from_pretrained"
        )
