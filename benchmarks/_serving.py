"""What `bench_serving.py` translates with: Multi30k sources, a locally trained tokenizer, same-size
translation models with that tokenizer's ids, and the CTranslate2 conversions of the Marian baseline.

Models: Marian (transformers' MarianMTModel, as the example scripts build the Transformer baseline:
post-norm, sinusoidal positions, scaled and shared embeddings, ``<pad>`` at id 0, decoding starting
from ``</s>``) and every encoder-decoder head of the registry (`talk_hf.MODEL_FAMILIES`): those of a
`MixerFamily` built like `_models.build_ours`, the others (SliceNet) from their ``small`` preset at the
same width and depth.  Every model has random, seeded weights and an output layer of its own (untied
from the embeddings: a randomly initialised tied decoder emits the token it was fed, so every output
would repeat one token and comparing two engines' tokens would prove little).  `PARAMETERS_NOTE` says
why Marian's parameter count is larger than ours at the same size.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from _models import SEQ2SEQ_BASELINE, ModelShape, build_model, build_ours
from transformers import MarianMTModel

from talk_hf.models.families import MODEL_FAMILIES

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))  # the example scripts' `common`: their data reading and tokenizer

from common.data import read_lines  # noqa: E402
from common.tokenizer import train_tokenizer  # noqa: E402

MULTI30K = ROOT.parent / "shared" / "data" / "multi30k"  # the offline data pack (shared/data/README.md)
TEST_SPLIT = "test_2016_flickr"


def multi30k(data_dir: Path, source: str, target: str, vocab: int):
    """(tokenizer, test sources): a BPE tokenizer of at most ``vocab`` pieces trained on the train
    split's ``source`` and ``target`` text (one joint vocabulary, as the translation scripts train it;
    it appends ``</s>`` to every sentence) and the ``source`` sentences of the test split."""
    texts = read_lines(data_dir / f"train.{source}.gz") + read_lines(data_dir / f"train.{target}.gz")
    tokenizer = train_tokenizer(texts, "bpe", vocab, add_eos=True)
    return tokenizer, read_lines(data_dir / f"{TEST_SPLIT}.{source}.gz")


@dataclass(frozen=True)
class Batch:
    """Source sentences, encoded once for every system."""

    input_ids: torch.Tensor  # (batch, longest source), padded on the right with <pad>
    attention_mask: torch.Tensor
    source_tokens: list[list[str]]  # the same pieces as strings, unpadded: CTranslate2's input

    @classmethod
    def encode(cls, tokenizer, sentences: list[str]) -> Batch:
        encoded = tokenizer(sentences, padding=True, return_tensors="pt")
        tokens = [
            tokenizer.convert_ids_to_tokens(ids[mask.bool()].tolist())
            for ids, mask in zip(encoded["input_ids"], encoded["attention_mask"], strict=True)
        ]
        return cls(encoded["input_ids"], encoded["attention_mask"], tokens)


def token_ids(tokenizer) -> dict[str, int]:
    """The special ids every model takes from the tokenizer; decoding starts from ``</s>``."""
    return {
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "decoder_start_token_id": tokenizer.eos_token_id,
    }


def build_marian(shape: ModelShape, tokenizer, max_positions: int = 512) -> MarianMTModel:
    """The Marian baseline of ``shape`` (as `examples/common/models.py` builds it, output layer untied)."""
    return build_model(
        SEQ2SEQ_BASELINE,
        shape,
        max_positions,
        dropout=0.0,
        decoder_vocab_size=shape.vocab,
        scale_embedding=True,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=False,
        forced_eos_token_id=None,
        **token_ids(tokenizer),
    )


PARAMETERS_NOTE = (
    "Marian counts two more vocabulary x d tables than ours: with tie_word_embeddings=False transformers 5 "
    "also unties Marian's encoder and decoder embeddings from model.shared (left unused), and a checkpoint "
    "cannot keep them shared; a step reads one row of each embedding, so the work per token is the same"
)


def translation_models(shape: ModelShape, tokenizer) -> dict[str, torch.nn.Module]:
    """Marian (`SEQ2SEQ_BASELINE`) and ours by head class name, in eval mode, each seeded alike."""
    fields = {**token_ids(tokenizer), "tie_word_embeddings": False}
    models = {}
    for model_type in MODEL_FAMILIES:
        if model_type.head_auto_class != "AutoModelForSeq2SeqLM":
            continue
        torch.manual_seed(0)
        config_class = model_type.config_class
        if getattr(config_class, "family", None) is not None:
            model = build_ours(model_type, shape, dropout=0.0, **fields)
        else:  # no FFN or heads to set (SliceNet): the small preset at this width and depth
            config = config_class.from_preset(
                "small",
                d_model=shape.d_model,
                encoder_layers=shape.layers,
                decoder_layers=shape.layers,
                vocab_size=shape.vocab,
                dropout=0.0,
                **fields,
            )
            model = model_type.head_class(config)
        models[model_type.head_class.__name__] = model.eval()
    torch.manual_seed(0)
    return {SEQ2SEQ_BASELINE: build_marian(shape, tokenizer).eval(), **models}


def model_config(model: torch.nn.Module) -> dict:
    """The configuration fields a report records of a model."""
    return {key: value for key, value in model.config.to_diff_dict().items() if not key.startswith("_")}


# CTranslate2 ---------------------------------------------------------------------------------------

# What CTranslate2's own converter for MarianMTModel assumes of the Hub's opus-mt models, which
# the Marian baseline here (like any Marian trained with a tokenizer of its own) does not do.
CONVERTER_ASSUMPTIONS = {
    "pad_is_last_token": (
        "MarianMTLoader drops the last row of the embeddings and the output layer as the <pad> that "
        "transformers appends to opus-mt vocabularies; <pad> is id 0 here, so the stock conversion fails "
        "('Source vocabulary 0 has size V but the model expected a vocabulary of size V - 1')"
    ),
    "decoder_starts_from_zero_embedding": (
        "MarianMTLoader sets start_from_zero_embedding (opus-mt decoders start from <pad>, whose "
        "embedding is zero); this Marian starts from </s>, whose embedding is not"
    ),
    "fix": (
        "convert with BartLoader's mapping under Marian's post-norm settings (normalize_before=False, "
        "normalize_embedding=False): all rows kept, decoding starts from the embedding of "
        "decoder_start_token_id (</s>)"
    ),
}


def _marian_loader():
    """CTranslate2's MarianMTLoader without the two assumptions of `CONVERTER_ASSUMPTIONS`."""
    from ctranslate2.converters.transformers import BartLoader

    class MarianKeepingItsVocabularyLoader(BartLoader):
        @property
        def architecture_name(self):
            return "MarianMTModel"

        def get_model_spec(self, model):
            model.config.normalize_before = False  # Marian is post-norm
            model.config.normalize_embedding = False  # and has no embedding layer norm
            return super().get_model_spec(model)

    return MarianKeepingItsVocabularyLoader()


@contextlib.contextmanager
def _converting_marian_as_saved():
    """Within: `TransformersConverter` converts a MarianConfig model with `_marian_loader`."""
    from ctranslate2.converters import transformers as converters

    stock = converters._MODEL_LOADERS["MarianConfig"]
    converters._MODEL_LOADERS["MarianConfig"] = _marian_loader()
    try:
        yield
    finally:
        converters._MODEL_LOADERS["MarianConfig"] = stock


def convert_marian(marian: MarianMTModel, tokenizer, folder: Path, quantizations: tuple[str, ...]) -> dict[str, Path]:
    """Save ``marian`` and ``tokenizer`` to ``folder``/transformers, then convert that folder with
    CTranslate2's `TransformersConverter` once per quantization; returns quantization -> model folder."""
    from ctranslate2.converters import TransformersConverter

    saved = folder / "transformers"
    marian.save_pretrained(saved)
    tokenizer.save_pretrained(saved)
    converted = {}
    with _converting_marian_as_saved():
        for quantization in quantizations:
            converted[quantization] = Path(
                TransformersConverter(str(saved)).convert(
                    str(folder / f"ctranslate2-{quantization}"), quantization=quantization
                )
            )
    return converted


class CTranslate2Model:
    """A converted model, with one `ctranslate2.Translator` per thread count (CTranslate2 fixes its
    threads when it loads a model)."""

    def __init__(self, folder: Path, compute_type: str, tokenizer):
        self.folder, self.compute_type, self.tokenizer = folder, compute_type, tokenizer
        self._translators = {}

    def translator(self, threads: int):
        import ctranslate2

        if threads not in self._translators:
            self._translators[threads] = ctranslate2.Translator(
                str(self.folder), device="cpu", compute_type=self.compute_type, intra_threads=threads, inter_threads=1
            )
        return self._translators[threads]

    def ids(self, tokens: list[str]) -> list[int]:
        return self.tokenizer.convert_tokens_to_ids(tokens)
