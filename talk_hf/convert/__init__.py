"""Checkpoint converters into talk_hf models.

``python -m talk_hf.convert fairseq CHECKPOINT OUTPUT_DIR`` converts fairseq's released
LightConv/DynamicConv checkpoints and the TaLK authors' fairseq-plugin checkpoints
(:func:`convert_fairseq_checkpoint`).  One module per step:

* ``fairseq_checkpoint`` reads ``model.pt`` with ``torch.load(weights_only=True)`` and an allow-list;
* ``fairseq_dictionary`` reads ``dict.<lang>.txt``;
* ``fairseq_config`` maps the saved arguments to a talk_hf configuration (or names what does not map);
* ``fairseq_weights`` renames and checks the parameters;
* ``fairseq_tokenizer`` writes the Moses + BPE tokenizer (transformers' ``FSMTTokenizer``);
* ``model_card`` writes the README with the source and the license;
* ``from_fairseq`` runs them in order.
"""

from .from_fairseq import convert_fairseq_checkpoint

__all__ = ["convert_fairseq_checkpoint"]
