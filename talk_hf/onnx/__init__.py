"""Exported models served as HuggingFace users serve them (optimum's ``ORTModelFor*`` usage).

``ORTModelForCausalLM.from_pretrained(folder)`` / ``ORTModelForSeq2SeqLM.from_pretrained(folder)`` load a
folder written by ``python -m talk_hf.export`` (or a Hugging Face Hub repository holding one:
`talk_hf.onnx.hub`) into a transformers model whose forward runs the exported graphs in ONNX Runtime
(CPU), so that ``generate`` (every strategy and logits processor) and, for the causal LMs,
``pipeline("text-generation")`` drive it as they drive the PyTorch model (`talk_hf.onnx.modeling`);
``save_pretrained`` and ``push_to_hub`` copy and upload the folder (`talk_hf.onnx.saving`).  Needs
torch and transformers; a host with only ONNX Runtime and numpy runs the folder's own ``runner.py``.
"""

from .modeling import ORTModelForCausalLM, ORTModelForSeq2SeqLM

__all__ = ["ORTModelForCausalLM", "ORTModelForSeq2SeqLM"]
