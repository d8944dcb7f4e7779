"""The model card (README.md) that ``push_to_hub`` uploads with an exported folder into a Hub repository that
has none, as ``PreTrainedModel.push_to_hub`` does with transformers' ``create_and_tag_model_card``: built by
``huggingface_hub.ModelCard`` from ``ModelCardData`` (the metadata: library, tags, pipeline tag), with what the
folder's manifest says of the model and how to load and run it.  A repository's own README.md is never replaced
(`talk_hf.onnx.saving`); ``save_pretrained`` writes none, as transformers' does not.
"""

from __future__ import annotations

from huggingface_hub import ModelCard, ModelCardData

from ..export.runner_checks import source_vocab_size

CARD_NAME = "README.md"
# The Hub task of each kind of model (by is_encoder_decoder): the encoder-decoders' are translation models.
PIPELINE_TAGS = {True: "translation", False: "text-generation"}
TOKENIZER_FILE = "tokenizer_config.json"  # among an exported folder's files when it was exported with its tokenizer
TEMPLATE = """---
{{ card_data }}
---

# {{ repo_id }}

A {{ head }} ({{ model_type }}) exported to ONNX by talk_hf{% if exported_with %} {{ exported_with.talk_hf }}
(torch {{ exported_with.torch }}, opset {{ exported_with.opset }}){% endif %}{{ int8 }}. Its graphs run in ONNX
Runtime on the CPU, driven by transformers' `generate` through `talk_hf.onnx` ({{ vocabulary }}), which needs
talk_hf installed from its source (it is not on the package index: `pip install -e <path to a clone of the
talk_hf repository>`):

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


def exported_model_card(repo_id: str, manifest: dict, names: list[str], model_class: str) -> ModelCard:
    """The model card of the exported folder whose ``manifest`` (checked, `talk_hf.export.read_manifest`) and
    files ``names`` are uploaded to ``repo_id``, loaded by ``model_class`` (``"ORTModelForSeq2SeqLM"`` or
    ``"ORTModelForCausalLM"``)."""
    seq2seq = manifest["is_encoder_decoder"]
    tags = ["onnx", "talk_hf", manifest["model_type"], *(["int8"] if manifest.get("int8") else [])]
    data = ModelCardData(library_name="talk_hf", pipeline_tag=PIPELINE_TAGS[seq2seq], tags=tags)
    return ModelCard.from_template(
        data,
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
        tokenizer=TOKENIZER_FILE in names,
    )
