"""transformers' ``ModelTesterMixin`` over every talk_hf model class, with the tiny test configs.

One test case per model type (base model and generative head): TaLK and DynamicConv as
encoder-decoder and as decoder-only LM, and SliceNet.  The tester gives the mixin what it reads
from a ``model_tester``: the sizes, and ``(config, inputs)`` from ``prepare_config_and_inputs_for_common``.
"""

from __future__ import annotations

import unittest
from unittest.mock import patch

import torch
from transformers.models.auto import modeling_auto
from transformers.testing_utils import torch_device
from transformers_tests.test_modeling_common import ModelTesterMixin

from talk_hf.models.families import family_of
from tests.models.helpers import CASES, random_tokens

# Source and target have the same length, as in transformers' own seq2seq testers: the mixin makes
# labels of (batch_size, seq_length) for every head.
BATCH, LENGTH = 2, 7
# The mixin picks a head's labels and skips base models in training tests by looking the class name
# up in transformers' tables of built-in names; talk_hf's heads are added there, per test.
HEAD_NAME_TABLES = {
    "AutoModelForSeq2SeqLM": modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
    "AutoModelForCausalLM": modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
}


class TinyModelTester:
    """Sizes and inputs of one of ``tests.models.helpers.CASES``, named as ModelTesterMixin reads them."""

    batch_size = BATCH
    seq_length = LENGTH
    is_training = True

    def __init__(self, case_name: str):
        self.case = next(case for case in CASES if case.name == case_name)
        config = self.get_config()
        self.hidden_size = config.d_model
        self.num_hidden_layers = config.num_hidden_layers

    def get_config(self):
        """The case's tiny config; weights drawn with std 0.02 (where the family has ``init_std``) as in
        transformers' testers, whose float32 tolerances assume outputs of that scale."""
        config = self.case.config()
        if hasattr(config, "init_std"):
            config.init_std = 0.02
        return config

    def prepare_config_and_inputs_for_common(self) -> tuple:
        """``(config, inputs)``: random ids (no special tokens) with all-ones masks, and decoder ones for
        seq2seq, on the device the mixin moves the models to."""
        config = self.get_config()
        input_ids = random_tokens(BATCH, LENGTH).to(torch_device)
        inputs = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
        if self.case.is_seq2seq:
            decoder_input_ids = random_tokens(BATCH, LENGTH, seed=2).to(torch_device)
            inputs.update(
                decoder_input_ids=decoder_input_ids, decoder_attention_mask=torch.ones_like(decoder_input_ids)
            )
        return config, inputs


class _CommonTests(ModelTesterMixin):
    """ModelTesterMixin with the switches of an attention-free, non-exportable model family.

    The tests that do not apply are deselected by name in ``conftest.py``, each with its reason.
    """

    case_name: str
    # The mixers are convolutions: no self-attention weights (the mixin's switch, as Mamba's tests set it).
    has_attentions = False
    test_torch_exportable = False  # the export mixin is left out
    # The check that `_init_weights` rebuilds every weight runs for models "added" (dated by a copyright
    # line) from 2023 only, unless this switch (5.24; not in 5.17) is on; talk_hf's files carry no such line.
    test_can_init_all_missing_weights_before_2023 = True

    def setUp(self):
        self.model_tester = TinyModelTester(self.case_name)
        case = self.model_tester.case
        self.all_model_classes = (case.base, case.head)
        self.is_encoder_decoder = case.is_seq2seq
        model_type = case.config_class.model_type
        head_table = HEAD_NAME_TABLES[family_of(model_type)[3]]
        for table, model_class in ((modeling_auto.MODEL_MAPPING_NAMES, case.base), (head_table, case.head)):
            patcher = patch.dict(table, {model_type: model_class.__name__})
            patcher.start()
            self.addCleanup(patcher.stop)


class TaLKSeq2SeqCommonTest(_CommonTests, unittest.TestCase):
    case_name = "talk-seq2seq"


class TaLKLMCommonTest(_CommonTests, unittest.TestCase):
    case_name = "talk-lm"


class DynamicConvSeq2SeqCommonTest(_CommonTests, unittest.TestCase):
    case_name = "dynamic-seq2seq"


class DynamicConvLMCommonTest(_CommonTests, unittest.TestCase):
    case_name = "dynamic-lm"


class SliceNetCommonTest(_CommonTests, unittest.TestCase):
    case_name = "slicenet"
