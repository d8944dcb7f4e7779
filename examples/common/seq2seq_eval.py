"""The evaluation of the encoder-decoder scripts (translation, summarization) over one split: the
validation loss, and a text generated for every example, sharded over the processes.

Each script scores the texts against its references (BLEU, ROUGE): `loss_and_texts` returns every text
with the index of its example, gathered from all processes.
"""

import torch

from . import records
from .losses import LossMeter, sequence_nll


def evaluation_loader(accelerator, examples, collate, batch_size):
    """A prepared `DataLoader` of `examples` (dicts with a "source" list of token ids) sorted by source
    length (less padding), `batch_size` examples per batch and process, made into batches by `collate`."""
    examples = sorted(examples, key=lambda example: len(example["source"]))
    return accelerator.prepare(torch.utils.data.DataLoader(examples, batch_size=batch_size, collate_fn=collate))


def loss_and_texts(accelerator, model, loader, generate, description):
    """(`LossMeter.result()`, the example indices, the generated texts) over `loader` (of
    `evaluation_loader`, batches of `batching.TranslationCollator`), with a progress bar named `description`.

    generate(model, input_ids, attention_mask) -> one str per row of the (B, S) padded sources; it gets
    the unwrapped model. Indices and texts come in the same order, from every process.
    """
    generator = accelerator.unwrap_model(model)
    meter, indices, texts = LossMeter(accelerator), [], []
    for batch in records.evaluation_bar(accelerator, loader, description):
        logits = model(batch["input_ids"], batch["attention_mask"], decoder_input_ids=batch["decoder_input_ids"]).logits
        meter.add(sequence_nll(logits, batch["labels"]), batch["labels"])
        generated = generate(generator, batch["input_ids"], batch["attention_mask"])
        indices.extend(accelerator.gather_for_metrics(batch["index"]).tolist())
        texts.extend(accelerator.gather_for_metrics(generated, use_gather_object=True))
    return meter.result(), indices, texts
