"""The model card (README.md) that ``push_to_hub`` uploads with an exported folder into a Hub repository that
has none, as ``PreTrainedModel.push_to_hub`` does with transformers' ``create_and_tag_model_card``: built by
``huggingface_hub.ModelCard`` from `talk_hf.model_card.card_data` (the metadata: library, tags, pipeline tag, as a
PyTorch checkpoint's card), with what the folder's manifest says of the model and how to load and run it.
``push_to_hub``'s ``tags`` join the card's (`tag_list`, `talk_hf.model_card.merged_tags`); a repository's own
README.md is kept, and only gains the tags it lacks in its metadata, as transformers' ``create_and_tag_model_card``
adds them (`tagged_card`).  ``save_pretrained`` writes no card, as transformers' does not.
"""

from __future__ import annotations

from huggingface_hub import ModelCard

from ..export.runner_checks import source_vocab_size
from ..model_card import INSTALL, card_data, merged_tags, pipeline_tag

TOKENIZER_FILE = "tokenizer_config.json"  # among an exported folder's files when it was exported with its tokenizer
TEMPLATE = """---
{{ card_data }}
---

# {{ repo_id }}

A {{ head }} ({{ model_type }}) exported to ONNX by talk_hf{% if exported_with %} {{ exported_with.talk_hf }}
(torch {{ exported_with.torch }}, opset {{ exported_with.opset }}){% endif %}{{ int8 }}. Its graphs run in ONNX
Runtime on the CPU, driven by transformers' `generate` through `talk_hf.onnx` ({{ vocabulary }}), which needs
talk_hf installed from its source (it is not on the package index:
{{ install }}):

```python
from talk_hf.onnx import {{ model_class }}
{% if tokenizer %}from transformers import AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained("{{ repo_id }}")
model = {{ model_class }}.from_pretrained("{{ repo_id }}")
inputs = tokenizer(["..."], return_tensors="pt")
tokens = model.generate(**inputs, num_beams=4, max_new_tokens=64)
print(tokenizer.batch_decode(tokens, skip_special_tokens=True))
{% else %}
model = {{ model_class }}.from_pretrained("{{ repo_id }}")
# input_ids, attention_mask: (batch, length) token ids of the model's tokenizer, and 1 at real tokens
tokens = model.generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=4, max_new_tokens=64)
{% endif %}```

A host with only `onnxruntime` and `numpy` runs the repository's own `runner.py` in a download of it
(`from runner import OnnxGenerator`, then `OnnxGenerator(folder).generate(input_ids, attention_mask,
max_new_tokens=64)`: the tokens `generate` gives).
"""


def tag_list(tags) -> list[str]:
    """``push_to_hub``'s ``tags`` as a list, as ``PreTrainedModel.push_to_hub`` takes them: None (none), one
    string, or a list (or tuple) of strings.

    Raises:
        TypeError: anything else, naming ``tags``.
    """
    if tags is None:
        return []
    if isinstance(tags, str):
        return [tags]
    if isinstance(tags, (list, tuple)) and all(isinstance(tag, str) for tag in tags):
        return list(tags)
    raise TypeError(f"push_to_hub: tags must be a string or a list of strings (the model card's tags), got {tags!r}")


def tagged_card(card: ModelCard, tags: list[str]) -> ModelCard | None:
    """A repository's own ``card`` with the ``tags`` its metadata lacks appended to its metadata's tags, as
    transformers' ``create_and_tag_model_card`` does (its text kept, its metadata written again by
    ``huggingface_hub``); None where it has them all (the card stays as it is)."""
    present = card.data.tags or []  # huggingface_hub reads the metadata's tags as a list
    tagged = merged_tags(present, tags)
    if tagged == present:
        return None
    card.data.tags = tagged
    return card


def exported_model_card(
    repo_id: str, manifest: dict, names: list[str], model_class: str, tags: list[str], task_specific_params
) -> ModelCard:
    """The model card of the exported folder whose ``manifest`` (checked, `talk_hf.export.read_manifest`) and
    files ``names`` are uploaded to ``repo_id``, loaded by ``model_class`` (``"ORTModelForSeq2SeqLM"`` or
    ``"ORTModelForCausalLM"``): tagged ``onnx``, ``talk_hf``, the model type, ``int8`` for a quantized folder,
    then ``tags`` (`merged_tags`); its pipeline tag `pipeline_tag`'s, from the configuration's
    ``task_specific_params``."""
    seq2seq = manifest["is_encoder_decoder"]
    own = ["onnx", "talk_hf", manifest["model_type"], *(["int8"] if manifest.get("int8") else [])]
    task = pipeline_tag(seq2seq, task_specific_params)
    return ModelCard.from_template(
        card_data(own, tags, task),
        template_str=TEMPLATE,
        repo_id=repo_id,
        head=manifest.get("head", "model"),
        model_type=manifest["model_type"],
        exported_with=manifest.get("exported_with"),
        int8=", int8 weights (onnxruntime's quantize_dynamic)" if manifest.get("int8") else "",
        vocabulary=f"source vocabulary {source_vocab_size(manifest)}, target {manifest['vocab_size']}"
        if seq2seq
        else f"vocabulary {manifest['vocab_size']}",
        model_class=model_class,
        install=INSTALL,
        tokenizer=TOKENIZER_FILE in names,
    )
