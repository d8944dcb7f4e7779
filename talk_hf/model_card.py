"""The model cards (README.md) that talk_hf's models upload into a Hub repository that has none: their metadata
(`card_data`: ``library_name: talk_hf``, tags, `pipeline_tag`) and how to load them.  `talk_hf.onnx.model_card`
writes an exported folder's; `checkpoint_model_card` a PyTorch checkpoint's, which
`ConvPreTrainedModel._upload_modified_files` puts in place of the generic card of transformers'
``create_and_tag_model_card`` (`replace_new_card`).  A repository's own README.md is kept as transformers tags it.

This module imports no other of talk_hf's: `talk_hf.export_for_remote_code` copies it beside the modeling code.
"""

from __future__ import annotations

import json
from pathlib import Path

from huggingface_hub import ModelCard, ModelCardData
from huggingface_hub.errors import EntryNotFoundError

CARD_NAME = "README.md"
CONFIG_NAME = "config.json"
# The Hub tasks of an encoder-decoder that its configuration's task_specific_params (transformers' record of the
# tasks a checkpoint does, by its keys: "summarization", "translation_en_to_de", ...) can name.
SEQ2SEQ_TASKS = ("summarization", "translation")
SEQ2SEQ_DEFAULT_TASK = "text2text-generation"  # an encoder-decoder whose configuration names none, or both
# How a card tells its reader to install talk_hf, which is not on the package index.
INSTALL = "`pip install -e <path to a clone of the talk_hf repository>`"
CHECKPOINT_TEMPLATE = """---
{{ card_data }}
---

# {{ repo_id }}

{{ kind }} ({{ model_type }}) of talk_hf, saved by transformers' `save_pretrained`. transformers' Auto classes
load it once talk_hf is imported, which needs talk_hf installed from its source (it is not on the package index:
{{ install }}):

```python
import talk_hf  # registers talk_hf's model types with the Auto classes
from transformers import {{ auto_class }}{{ tokenizer_import }}

model = {{ auto_class }}.from_pretrained("{{ repo_id }}")
{% if tokenizer %}tokenizer = AutoTokenizer.from_pretrained("{{ repo_id }}")
{% endif %}```
{% if remote_code %}
Without talk_hf, the modeling code this repository holds (config.json's `auto_map`) loads it, on the PyTorch
path of the operators (no compiled kernels){% if tokenizer %}; transformers asks the tokenizer for
`trust_remote_code=True` too, as it does of any repository with an `auto_map`{% endif %}:

```python
from transformers import {{ auto_class }}{{ tokenizer_import }}

model = {{ auto_class }}.from_pretrained("{{ repo_id }}", trust_remote_code=True)
{% if tokenizer %}tokenizer = AutoTokenizer.from_pretrained("{{ repo_id }}", trust_remote_code=True)
{% endif %}```
{% endif %}"""
# The file by which a folder holds a tokenizer (every tokenizer's save_pretrained writes it).
TOKENIZER_CONFIG_NAME = "tokenizer_config.json"


def merged_tags(first: list[str], then: list[str]) -> list[str]:
    """``first``, then the tags of ``then`` that it lacks: each tag once, in the order it first came."""
    return list(dict.fromkeys([*first, *then]))


def pipeline_tag(seq2seq: bool, task_specific_params) -> str:
    """The Hub task of a model: ``text-generation`` for a causal LM; for an encoder-decoder, the one of
    `SEQ2SEQ_TASKS` that the keys of its configuration's ``task_specific_params`` (a dict, or None) name
    (``summarization``; ``translation`` or ``translation_<source>_to_<target>``), else `SEQ2SEQ_DEFAULT_TASK`
    (none named, as in the training scripts' checkpoints, or both, as in T5's)."""
    if not seq2seq:
        return "text-generation"
    keys = task_specific_params if isinstance(task_specific_params, dict) else {}
    named = [task for task in SEQ2SEQ_TASKS if any(key == task or key.startswith(f"{task}_") for key in keys)]
    return named[0] if len(named) == 1 else SEQ2SEQ_DEFAULT_TASK


def card_data(own: list[str], tags: list[str], task: str | None) -> ModelCardData:
    """A talk_hf card's metadata: ``library_name: talk_hf``, the card's ``own`` tags then ``tags``
    (`merged_tags`), and the pipeline tag ``task`` (None: none, as for a base model, which has no Hub task)."""
    return ModelCardData(library_name="talk_hf", pipeline_tag=task, tags=merged_tags(own, tags))


def auto_class_name(head: bool, seq2seq: bool) -> str:
    """The Auto class that loads a model: a generative head's by its configuration (as
    `talk_hf.register_family` registers it), ``AutoModel`` for a base model."""
    if not head:
        return "AutoModel"
    return "AutoModelForSeq2SeqLM" if seq2seq else "AutoModelForCausalLM"


def holds_remote_code(folder: Path, auto_map, auto_class: str) -> bool:
    """Whether ``folder`` loads by ``auto_class`` with ``trust_remote_code=True``: its configuration's
    ``auto_map`` (a dict, or None) names ``auto_class`` and ``AutoConfig`` as ``"<module>.<class>"``, in modules
    the folder holds (as `talk_hf.export_for_remote_code` and transformers' ``save_pretrained`` of remote code
    write them; code in another repository, ``"<repo>--<module>.<class>"``, is not the folder's)."""
    references = [auto_map.get(name) for name in (auto_class, "AutoConfig")] if isinstance(auto_map, dict) else [None]
    return all(
        isinstance(reference, str) and (folder / f"{reference.rpartition('.')[0]}.py").is_file()
        for reference in references
    )


def checkpoint_model_card(repo_id: str, folder: Path, head: bool, tags: list[str]) -> ModelCard:
    """The model card of the checkpoint ``folder`` (a ``save_pretrained`` folder) pushed to ``repo_id``:
    tagged ``talk_hf`` and its config.json's model type, then ``tags``; its pipeline tag `pipeline_tag`'s for a
    generative ``head``, none for a base model; how to load it with its Auto class (`auto_class_name`), and its
    tokenizer with ``AutoTokenizer`` where the folder holds one, after ``import talk_hf``, and both with
    ``trust_remote_code=True`` where the folder holds the code (`holds_remote_code`)."""
    config = json.loads((folder / CONFIG_NAME).read_text(encoding="utf-8"))
    seq2seq = bool(config.get("is_encoder_decoder"))
    auto_class = auto_class_name(head, seq2seq)
    task = pipeline_tag(seq2seq, config.get("task_specific_params")) if head else None
    tokenizer = (folder / TOKENIZER_CONFIG_NAME).is_file()
    kinds = {
        "AutoModel": "A base model",
        "AutoModelForSeq2SeqLM": "An encoder-decoder",
        "AutoModelForCausalLM": "A causal LM",
    }
    return ModelCard.from_template(
        card_data(["talk_hf", config["model_type"]], tags, task),
        template_str=CHECKPOINT_TEMPLATE,
        repo_id=repo_id,
        kind=kinds[auto_class],
        model_type=config["model_type"],
        install=INSTALL,
        auto_class=auto_class,
        remote_code=holds_remote_code(folder, config.get("auto_map"), auto_class),
        tokenizer=tokenizer,
        tokenizer_import=", AutoTokenizer" if tokenizer else "",
    )


def has_card(repo_id: str, token: str | bool | None) -> bool:
    """Whether the Hub repository ``repo_id`` has a README.md, asked as transformers'
    ``create_and_tag_model_card`` asks (``ModelCard.load``: its default branch, EntryNotFoundError where it
    has none), so that the answer is the one by which transformers chose its card."""
    try:
        ModelCard.load(repo_id, token=token)
    except EntryNotFoundError:
        return False
    return True


def replace_new_card(folder: Path, repo_id: str, head: bool, token: str | bool | None) -> None:
    """Put `checkpoint_model_card` in place of the card that transformers' ``create_and_tag_model_card`` wrote
    into the pushed ``folder`` where the repository ``repo_id`` has no README.md (`has_card`): that card is
    transformers' generic one, whose tags (the model's ``model_tags``, then ``push_to_hub``'s ``tags``) the new
    card keeps after its own.  A repository's own README.md, which
    transformers tagged, and a folder without a README.md, stay as they are."""
    path = folder / CARD_NAME
    if not path.is_file() or has_card(repo_id, token):
        return
    tags = ModelCard(path.read_text(encoding="utf-8")).data.tags or []
    checkpoint_model_card(repo_id, folder, head, tags).save(path)
