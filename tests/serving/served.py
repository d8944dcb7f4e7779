"""An exported model served by `talk_hf.onnx` beside the PyTorch model it was exported from, for the tests
that compare the two under transformers' generate (test_ort_models.py, test_ort_generate.py; their
``lm``, ``seq2seq`` and ``slicenet`` fixtures are conftest.py's)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from talk_hf.onnx import ORTModelForCausalLM, ORTModelForSeq2SeqLM

from .exported import EXPORTED, NEW_TOKENS, SharedExports


@dataclass
class Served:
    model: torch.nn.Module  # the PyTorch model
    ort: ORTModelForCausalLM | ORTModelForSeq2SeqLM  # its export, loaded with from_pretrained
    folder: Path
    ids: torch.Tensor  # (3, S) sources (row 0 right-padded, row 1 left-padded) or prompts (row 0 left-padded)
    mask: torch.Tensor

    def both(self, **settings) -> tuple[torch.Tensor, torch.Tensor]:
        """(the PyTorch model's generate, the exported model's), each after torch.manual_seed(0)
        (max_new_tokens=NEW_TOKENS unless ``settings`` say otherwise)."""
        settings = {"max_new_tokens": NEW_TOKENS, **settings}
        tokens = []
        for model in (self.model, self.ort):
            torch.manual_seed(0)
            tokens.append(model.generate(input_ids=self.ids, attention_mask=self.mask, **settings))
        return tokens[0], tokens[1]


def served(shared_exports: SharedExports, name: str) -> Served:
    """The session's export of ``name``, loaded with from_pretrained, beside a new copy of its model."""
    shared = shared_exports(name)
    loader = ORTModelForSeq2SeqLM if EXPORTED[name].is_seq2seq else ORTModelForCausalLM
    return Served(
        shared.model(), loader.from_pretrained(shared.folder, threads=1), shared.folder, shared.ids, shared.mask
    )
