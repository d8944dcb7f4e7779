"""An exported encoder-decoder's encoder graph, as ``generate`` calls a model's encoder: `ORTEncoder`."""

from __future__ import annotations

import torch
from torch import nn
from transformers.modeling_outputs import BaseModelOutput

from ..export.runner import OnnxGenerator
from ..export.traced_forward import ENCODER_OUTPUT
from ..models.input_checks import InputNames, check_mask_values, check_stack_inputs, check_token_ids
from .inputs import refuse_unsupported


class ORTEncoder(nn.Module):
    """``encoder.onnx`` of an exported folder: (B, S) ids and mask -> a ``BaseModelOutput`` whose
    ``last_hidden_state`` (B, S, d) is the encoder output and whose other entries, by the graph's output
    names, are what each decoding step reads of the source (each decoder layer's cross-attention keys
    and values (B, heads, S, head_dim)): ``generate`` repeats them per beam with the rest.

    Args:
        generator: the folder's runner (its manifest and sessions).
        vocab_size: the source vocabulary's size.
    """

    main_input_name = "input_ids"

    def __init__(self, generator: OnnxGenerator, vocab_size: int):
        super().__init__()
        self.session = generator.sessions["encoder"]
        self.output_names = generator.manifest["graphs"]["encoder"]["outputs"]
        self.vocab_size = vocab_size

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        inputs_embeds=None,
        output_attentions=None,
        output_hidden_states=None,
        return_dict=True,
    ) -> BaseModelOutput:
        refuse_unsupported(
            "the exported encoder",
            inputs_embeds=inputs_embeds,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
        )
        if input_ids is None:
            raise ValueError("the exported encoder needs input_ids (B, S)")
        check_stack_inputs(InputNames(), input_ids, None, attention_mask, 0, 0)
        check_token_ids("input_ids", input_ids, self.vocab_size)
        check_mask_values("attention_mask", attention_mask)
        mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        feed = {"input_ids": input_ids.long().contiguous().numpy(), "attention_mask": mask.long().contiguous().numpy()}
        produced = self.session.run(None, feed)
        named = {name: torch.from_numpy(value) for name, value in zip(self.output_names, produced, strict=True)}
        outputs = BaseModelOutput(last_hidden_state=named.pop(ENCODER_OUTPUT))
        for name, value in named.items():
            outputs[name] = value
        return outputs if return_dict else outputs.to_tuple()
