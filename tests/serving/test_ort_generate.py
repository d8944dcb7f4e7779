"""`talk_hf.onnx` under the rest of transformers' generate surface: the options a demanding user sets
(scores and logits, several sequences per row, sequence biases and cutoffs, watermarking,
classifier-free guidance, streamers, stopping criteria, the text-generation pipeline's batching),
each token-equal to the PyTorch model for the same settings and seed, or refused naming the option.

The models are the session's shared exports (`exported.SharedExports`), loaded as test_ort_models.py
loads them.
"""

from __future__ import annotations

import threading

import pytest
import torch
from transformers import (
    AutoTokenizer,
    GenerationConfig,
    StoppingCriteria,
    SynthIDTextWatermarkingConfig,
    TextIteratorStreamer,
    WatermarkingConfig,
    pipeline,
)
from transformers.modeling_outputs import CausalLMOutputWithPast, Seq2SeqLMOutput

from talk_hf.transformers_internals import CACHE_NAME

pytest.importorskip("onnxruntime")

from talk_hf.onnx.outputs import model_output  # noqa: E402

from ..models.helpers import VOCAB  # noqa: E402
from .exported import NEW_TOKENS  # noqa: E402
from .served import Served  # noqa: E402


class _StopAfter(StoppingCriteria):
    """Stops every row once it holds ``length`` tokens (a user's own stopping criterion)."""

    def __init__(self, length: int):
        self.length = length

    def __call__(self, input_ids, scores, **kwargs):
        return torch.full((input_ids.shape[0],), input_ids.shape[1] >= self.length, dtype=torch.bool)


# Options of generate that test_ort_models.SETTINGS leaves out (max_new_tokens=NEW_TOKENS).
OPTIONS = {
    "beam-several-per-row": dict(num_beams=3, num_return_sequences=3),
    "sequence-bias": dict(do_sample=False, sequence_bias={(5,): 3.0, (6, 7): -2.0}),
    "epsilon-cutoff": dict(do_sample=True, epsilon_cutoff=3e-2),
    "eta-cutoff": dict(do_sample=True, eta_cutoff=1e-2),
    "renormalized-top-k": dict(do_sample=True, top_k=5, renormalize_logits=True),
    "length-decay": dict(do_sample=False, exponential_decay_length_penalty=(2, 1.5)),
    "encoder-repetition": dict(do_sample=False, encoder_repetition_penalty=1.5, encoder_no_repeat_ngram_size=2),
    "watermark": dict(do_sample=False, watermarking_config=WatermarkingConfig(bias=2.5)),
    "synthid-watermark": dict(
        do_sample=True, watermarking_config=SynthIDTextWatermarkingConfig(keys=[1, 2], ngram_len=2)
    ),
    "own-stopping-criterion": dict(
        do_sample=False, max_new_tokens=None, max_length=11, stopping_criteria=[_StopAfter(9)]
    ),
}
if "top_h" in GenerationConfig().to_dict():
    OPTIONS["top-h"] = dict(do_sample=True, top_h=0.5)


@pytest.mark.parametrize("settings", OPTIONS.values(), ids=OPTIONS)
@pytest.mark.parametrize("kind", ["lm", "seq2seq"])
def test_generate_options_equal_the_pytorch_models(request, kind, settings):
    expected, tokens = request.getfixturevalue(kind).both(**settings)
    assert torch.equal(tokens, expected), (tokens, expected)


@pytest.mark.parametrize("strategy", [dict(do_sample=False), dict(do_sample=True, num_return_sequences=2)])
@pytest.mark.parametrize("kind", ["lm", "seq2seq"])
def test_scores_and_logits_equal_the_pytorch_models(request, kind, strategy):
    """return_dict_in_generate's scores (after the processors) and raw logits, step by step, to float32
    rounding (beam search's: test_ort_models)."""
    settings = dict(return_dict_in_generate=True, output_scores=True, output_logits=True, **strategy)
    expected, found = request.getfixturevalue(kind).both(**settings)
    assert torch.equal(found.sequences, expected.sequences)
    for field in ("scores", "logits"):
        for step, (ours, theirs) in enumerate(zip(getattr(found, field), getattr(expected, field), strict=True)):
            torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4, msg=f"{field} of step {step}")


# Classifier-free guidance runs an unconditional forward of the model itself: of a negative prompt of
# several tokens, or (use_cache=False) of every token so far, whose logits of every position it asks for
# (logits_to_keep=0); the exported model refused them as if generate had asked.
GUIDANCE = {
    "guidance": dict(guidance_scale=1.5),
    "guidance-negative-prompt": dict(guidance_scale=1.5, negative_prompt_ids=torch.tensor([[5, 6, 7]] * 3)),
    "guidance-without-cache": dict(guidance_scale=1.5, use_cache=False),
    "guidance-beam": dict(guidance_scale=2.0, num_beams=2),
}


@pytest.mark.parametrize("settings", GUIDANCE.values(), ids=GUIDANCE)
def test_classifier_free_guidance_equals_the_pytorch_models(lm, settings):
    expected, tokens = lm.both(**settings)
    assert torch.equal(tokens, expected), (tokens, expected)


def test_an_encoder_decoders_guidance_is_refused_naming_it(seq2seq):
    """The unconditional forward has no source (the PyTorch model fails on it too): refused before decoding."""
    with pytest.raises(
        ValueError, match=r"cannot apply guidance_scale=1.5: classifier-free guidance .* without a source"
    ):
        seq2seq.ort.generate(input_ids=seq2seq.ids, attention_mask=seq2seq.mask, guidance_scale=1.5, max_new_tokens=2)


@pytest.mark.parametrize("logits_to_keep", [0, 2])
def test_the_logits_of_every_position_equal_the_pytorch_models(lm, logits_to_keep):
    """A forward's logits_to_keep as the PyTorch model's (the step graph, token by token), at real tokens."""
    found = lm.ort(input_ids=lm.ids, attention_mask=lm.mask, logits_to_keep=logits_to_keep).logits
    with torch.no_grad():
        expected = lm.model(input_ids=lm.ids, attention_mask=lm.mask, logits_to_keep=logits_to_keep).logits
    assert found.shape == expected.shape == (3, logits_to_keep or lm.ids.shape[1], VOCAB)
    real = lm.mask[:, -found.shape[1] :].bool()
    torch.testing.assert_close(found[real], expected[real], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("logits_to_keep", [torch.tensor([0, 2]), -1, 1.0])
def test_logits_to_keep_other_than_a_count_is_refused(lm, logits_to_keep):
    with pytest.raises(ValueError, match=r"logits_to_keep must be an int >= 0 .* got"):
        lm.ort(input_ids=lm.ids, attention_mask=lm.mask, logits_to_keep=logits_to_keep)


def test_max_length_shorter_than_the_prompt_is_refused_as_by_the_pytorch_model(lm):
    for model in (lm.model, lm.ort):
        with pytest.raises(ValueError, match=r"Input length of input_ids is 5, but `max_length` is set to 3"):
            model.generate(input_ids=lm.ids, attention_mask=lm.mask, max_length=3)


@pytest.mark.parametrize("kind", ["lm", "seq2seq"])
def test_a_streamer_gets_the_pytorch_models_text(request, kind):
    """TextIteratorStreamer over one row (streamers take one), generate in a thread as its docs show."""
    served = request.getfixturevalue(kind)
    tokenizer = AutoTokenizer.from_pretrained(request.getfixturevalue("lm").folder)
    texts = []
    for model in (served.model, served.ort):
        streamer = TextIteratorStreamer(tokenizer)
        settings = dict(input_ids=served.ids[1:2], max_new_tokens=NEW_TOKENS, do_sample=False, streamer=streamer)
        worker = threading.Thread(target=model.generate, kwargs=settings)
        worker.start()
        texts.append("".join(streamer))
        worker.join()
    assert texts[0] == texts[1] and texts[1].strip()


PIPELINE = {
    "batches-of-2": dict(batch_size=2, do_sample=False),
    "new-text-only": dict(batch_size=2, do_sample=False, return_full_text=False),
    "several-per-text-sampled": dict(batch_size=3, do_sample=True, num_return_sequences=2),
    "several-per-text-beam": dict(num_beams=3, num_return_sequences=2),
}


@pytest.mark.parametrize("settings", PIPELINE.values(), ids=PIPELINE)
def test_text_generation_pipeline_options_equal_the_pytorch_models(lm, settings):
    """Batched (left-padded texts of different lengths), new text only, several sequences per text."""
    texts = ["w5 w6 w7 w8", "w9", "w10 w11"]
    tokenizer = AutoTokenizer.from_pretrained(lm.folder)
    outputs = []
    for model in (lm.model, lm.ort):
        torch.manual_seed(0)
        outputs.append(
            pipeline("text-generation", model=model, tokenizer=tokenizer)(texts, max_new_tokens=5, **settings)
        )
    assert outputs[0] == outputs[1]
    per_text = settings.get("num_return_sequences", 1)
    assert [len(rows) for rows in outputs[1]] == [per_text] * len(texts)


def _step(seq2seq: Served, encoder_outputs, cache, token: int):
    """One decoding step of the three sources on ``cache``: the forward's output."""
    decoder_input_ids = torch.full((3, 1), token)
    return seq2seq.ort(
        encoder_outputs=encoder_outputs, attention_mask=seq2seq.mask, decoder_input_ids=decoder_input_ids, cache=cache
    )


def test_step_logits_a_caller_keeps_are_never_overwritten(seq2seq):
    """The windows' buffers are written again two steps later, the logits never: the logits kept whole, as
    a view and as a numpy array keep the values of their step while decoding goes on."""
    encoder_outputs = seq2seq.ort.get_encoder()(seq2seq.ids, attention_mask=seq2seq.mask)
    cache = seq2seq.ort.new_cache()
    keep = {
        "whole": lambda logits: logits,
        "view": lambda logits: logits[:, -1],
        "numpy": lambda logits: logits.numpy(),
    }
    kept, values = {}, {}
    for token, (name, taken) in enumerate(keep.items(), start=7):
        kept[name] = taken(_step(seq2seq, encoder_outputs, cache, token).logits)
        values[name] = torch.as_tensor(kept[name]).clone()
    for token in (10, 11, 12, 13):
        _step(seq2seq, encoder_outputs, cache, token)
    for name, held in kept.items():
        torch.testing.assert_close(torch.as_tensor(held), values[name], atol=0, rtol=0, msg=name)


def test_forward_outputs_read_as_transformers_outputs(seq2seq, lm):
    """The forward's outputs are the transformers classes' own: by attribute, name, index, to_tuple() and
    return_dict=False, the fields not given None and left out of the items, as a constructed one reads."""
    encoder_outputs = seq2seq.ort.get_encoder()(seq2seq.ids, attention_mask=seq2seq.mask)
    cache = seq2seq.ort.new_cache()
    output = _step(seq2seq, encoder_outputs, cache, 7)
    fields = {"logits": output.logits, CACHE_NAME: cache, "encoder_last_hidden_state": encoder_outputs[0]}
    expected = Seq2SeqLMOutput(**fields)
    assert type(output) is Seq2SeqLMOutput and vars(output) == vars(expected)
    assert list(output.keys()) == list(expected.keys()) == list(fields)
    assert (
        output[0] is output["logits"] is output.logits and output[1] is cache and output.decoder_hidden_states is None
    )
    assert output.to_tuple() == expected.to_tuple()
    as_tuple = seq2seq.ort(
        encoder_outputs=encoder_outputs,
        attention_mask=seq2seq.mask,
        decoder_input_ids=torch.full((3, 1), 8),
        cache=cache,
        return_dict=False,
    )
    assert isinstance(as_tuple, tuple) and len(as_tuple) == 3 and as_tuple[1] is cache
    lm_output = lm.ort(input_ids=lm.ids, attention_mask=lm.mask, use_cache=False)
    assert type(lm_output) is CausalLMOutputWithPast and list(lm_output.keys()) == ["logits"]
    assert getattr(lm_output, CACHE_NAME) is None and lm_output.to_tuple() == (lm_output.logits,)


def test_model_output_refuses_a_name_that_is_no_field():
    with pytest.raises(TypeError, match=r"CausalLMOutputWithPast has no fields \['past'\]; its fields: \['loss', "):
        model_output(CausalLMOutputWithPast, logits=torch.zeros(1, 1, 2), past=None)
