"""Reading an exported folder for `talk_hf.onnx`'s models: its runner (manifest and ONNX Runtime
sessions), config.json and generation_config.json, each refused with a message naming the file."""

from __future__ import annotations

from pathlib import Path

from transformers import AutoConfig, GenerationConfig

from ..export.onnx_files import CONFIG_FILE, GENERATION_CONFIG_FILE
from ..export.runner import OnnxGenerator

CLASSES = {True: "ORTModelForSeq2SeqLM", False: "ORTModelForCausalLM"}  # by is_encoder_decoder


def read_folder(folder: str | Path, is_encoder_decoder: bool, **session_options):
    """(config, generation config, runner) of an exported model of the kind ``is_encoder_decoder``.

    Args:
        folder: written by ``python -m talk_hf.export`` (local).
        session_options: ``threads``, ``optimization``, ``spin`` (`talk_hf.export.OnnxGenerator`).

    Raises:
        FileNotFoundError: no manifest, graph, config.json or generation_config.json.
        ValueError: a damaged manifest (`talk_hf.export.read_manifest`), a model of the other kind, a
            config.json of a model type this process has not registered or other than the manifest's.
    """
    generator = OnnxGenerator(folder, **session_options)
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
    return _read_config(folder, manifest["model_type"]), GenerationConfig.from_pretrained(folder), generator


def _read_config(folder: Path, model_type: str):
    """The model configuration exported into ``folder``, of the manifest's ``model_type``."""
    try:
        config = AutoConfig.from_pretrained(folder)
    except (ValueError, KeyError) as error:  # a model type this process has not registered
        raise ValueError(
            f"{folder / CONFIG_FILE} could not be read ({error}): import the package that registers its model "
            f"type {model_type!r} first (a family added with talk_hf.register_family)"
        ) from None
    if config.model_type != model_type:
        raise ValueError(
            f"{folder / CONFIG_FILE} is of model type {config.model_type!r} but the manifest's graphs of {model_type!r}: "
            "the folder mixes two exports; export the model again"
        )
    return config
