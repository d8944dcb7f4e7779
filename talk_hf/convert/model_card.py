"""The model card (``README.md``) of a converted checkpoint: where it comes from, its license, how
to use it and what the conversion guarantees."""

from __future__ import annotations

from transformers import GenerationConfig, PretrainedConfig

from ..model_card import card_data, pipeline_tag

# family -> (origin, page with the released checkpoints, the license statement quoted from it)
SOURCES = {
    "lightconv": (
        (
            "fairseq's LightConv/DynamicConv release (Wu et al., *Pay Less Attention with Lightweight and Dynamic "
            "Convolutions*, ICLR 2019)"
        ),
        "https://github.com/facebookresearch/fairseq/blob/main/examples/pay_less_attention_paper/README.md",
        "fairseq(-py) is MIT-licensed. The license applies to the pre-trained models as well.",
    ),
    "talk": (
        "the TaLK authors' fairseq plugin (Lioutas & Guo, *Time-aware Large Kernel Convolutions*, ICML 2020)",
        "https://github.com/lioutasb/TaLKConvolutions",
        "This project is MIT-licensed. The license applies to the pre-trained models as well.",
    ),
}


def model_card(
    name: str,
    folder: str,
    arch: str,
    family: str,
    config: PretrainedConfig,
    generation: GenerationConfig,
    tokenizer_note: str,
) -> str:
    """Markdown with a YAML header for ``output_dir/README.md``: the license, ``library_name: talk_hf``, the
    pipeline tag of the converted head as talk_hf's own checkpoint cards give it (``talk_hf.model_card``) and tags.

    Args:
        name: the checkpoint's name (its archive folder).
        folder: the converted model's folder, as the usage example loads it.
        arch: fairseq's architecture name.
        family: ``"lightconv"`` or ``"talk"``.
        config: the converted model's configuration.
        generation: its generation settings.
        tokenizer_note: what was written as a tokenizer, in a sentence.
    """
    origin, page, license_statement = SOURCES[family]
    seq2seq = config.is_encoder_decoder
    imports = "AutoModelForSeq2SeqLM, AutoTokenizer" if seq2seq else "AutoModelForCausalLM"
    auto_class = imports.split(",")[0]
    usage = (
        f'tokenizer = AutoTokenizer.from_pretrained("{folder}")\n'
        'batch = tokenizer(["A sentence to translate."], return_tensors="pt", padding=True)\n'
        "print(tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True))"
        if seq2seq
        else "# fairseq's LMs read </s> (id 2) first: prepend it to the prompt's dict.txt ids\n"
        "prompt_ids = [4, 5, 6]\n"
        "print(model.generate(input_ids=torch.tensor([[2] + prompt_ids]))[0].tolist())"
    )
    metadata = card_data(
        ["talk_hf", config.model_type, "fairseq"],
        [],
        pipeline_tag(seq2seq, getattr(config, "task_specific_params", None)),
    )
    metadata.license = "mit"
    return f"""---
{metadata.to_yaml()}
---

# {name} (converted from fairseq)

`{arch}` from {origin}: {page}

**License**: MIT. From the source: "{license_statement}"

Converted with `python -m talk_hf.convert fairseq` into talk_hf's `{config.model_type}` model
(`{type(config).__name__}`); loading it needs talk_hf, installed from its source (it is not on the package
index: `pip install -e <path to a clone of the talk_hf repository>`), and `import talk_hf`.
{tokenizer_note}

```python
import torch
import talk_hf  # registers the model types
from transformers import {imports}

model = {auto_class}.from_pretrained("{folder}")
{usage}
```

`generation_config.json` holds fairseq-generate's search: beam {generation.num_beams}, length penalty
{generation.length_penalty}, at most {generation.max_length - 2} tokens and a final `</s>`, `</s>` not
allowed first, `<pad>` never generated.

## What the conversion guarantees

The converter maps every parameter by name with exact shape checks and refuses options talk_hf cannot
reproduce. Its tests convert small random checkpoints written by fairseq 0.12.2 (and by a CPU
re-implementation of the TaLK plugin) and match fairseq's encoder outputs, logits, incremental
decoding and greedy outputs to 1e-5 in float32. This checkpoint itself was not compared with fairseq's outputs.
"""
