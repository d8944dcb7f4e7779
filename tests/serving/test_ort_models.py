"""`talk_hf.onnx`: exported models driven by transformers' ``generate`` and ``pipeline`` as the PyTorch
models are, token for token, with every strategy and logits processor (the same torch seed for
sampling); a causal LM's prompt runs in one graph call; the folder carries config.json,
generation_config.json and the tokenizer; bad folders, tokenizers and requests say what is wrong.

Three of the session's shared exports (`exported.SharedExports`): a TaLK LM (with a tokenizer), a
DynamicConv encoder-decoder (exported over a copy of the LM's folder, which must lose the LM's tokenizer
and prompt graph) and SliceNet (whose steps read the encoder output itself).  Each has an end token
chosen so that a row ends early.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer
from transformers import AutoTokenizer, CompileConfig, DynamicCache, pipeline

pytest.importorskip("onnxruntime")

from talk_hf.cache import ConvCache  # noqa: E402
from talk_hf.export import export_onnx, quantize_exported  # noqa: E402
from talk_hf.export.folder_writes import remove_stale  # noqa: E402
from talk_hf.onnx import ORTModelForCausalLM, ORTModelForSeq2SeqLM  # noqa: E402
from talk_hf.transformers_internals import CACHE_NAME  # noqa: E402

from ..models.helpers import EOS, VOCAB, word_tokenizer  # noqa: E402
from .exported import EXPORTED, NEW_TOKENS  # noqa: E402
from .served import Served  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer():
    return word_tokenizer()


# Every decoding strategy and logits processor of transformers' generate (max_new_tokens=NEW_TOKENS
# unless a setting says otherwise).
SETTINGS = {
    "greedy": dict(do_sample=False),
    "greedy-min-new-tokens": dict(do_sample=False, min_new_tokens=NEW_TOKENS),
    "beam": dict(num_beams=3),
    "beam-length-penalty-early-stopping": dict(
        num_beams=4, length_penalty=0.5, early_stopping=True, num_return_sequences=2
    ),
    "sampling": dict(do_sample=True),
    "top-k-top-p-temperature": dict(do_sample=True, top_k=6, top_p=0.9, temperature=0.7),
    "min-p-typical-p": dict(do_sample=True, min_p=0.05, typical_p=0.9),
    "sampling-several-per-row": dict(do_sample=True, num_return_sequences=3),
    "beam-sample": dict(do_sample=True, num_beams=3, temperature=1.3),
    "repetition-penalty": dict(do_sample=False, repetition_penalty=1.5),
    "no-repeat-ngram": dict(num_beams=2, no_repeat_ngram_size=2),
    "forced-bos-eos": dict(do_sample=False, forced_bos_token_id=7, forced_eos_token_id=EOS),
    "suppress-tokens": dict(do_sample=False, suppress_tokens=[5, 6, 9], begin_suppress_tokens=[EOS, 4]),
    "bad-words": dict(do_sample=False, bad_words_ids=[[8], [10, 11]]),
    "min-max-length": dict(do_sample=False, max_new_tokens=None, min_length=9, max_length=12),
    # Without a cache generate feeds every token again at each step (a causal LM's prompt graph, an
    # encoder-decoder's step graph token by token).
    "no-cache": dict(num_beams=2, use_cache=False),
}


@pytest.mark.parametrize("settings", SETTINGS.values(), ids=SETTINGS)
@pytest.mark.parametrize("kind", ["lm", "seq2seq"])
def test_generate_equals_the_pytorch_models(request, kind, settings):
    served = request.getfixturevalue(kind)
    expected, tokens = served.both(**settings)
    assert torch.equal(tokens, expected), (tokens, expected)


@pytest.mark.parametrize("settings", ["greedy", "beam", "sampling", "greedy-min-new-tokens"])
def test_slicenet_generate_equals_the_pytorch_models(slicenet, settings):
    """SliceNet's steps read the encoder output itself (no cross-attention keys and values)."""
    expected, tokens = slicenet.both(**SETTINGS[settings])
    assert torch.equal(tokens, expected), (tokens, expected)


@pytest.mark.parametrize("settings", ["beam", "beam-length-penalty-early-stopping", "sampling-several-per-row"])
@pytest.mark.parametrize("kind", ["seq2seq", "slicenet"])
def test_generate_hands_each_source_once_to_its_rows(request, kind, settings, monkeypatch):
    """generate gives every decoding step each sentence's source once, for all of its rows (its beams or
    returned sequences), and the tokens stay the PyTorch model's (which reads a repeated source)."""
    served = request.getfixturevalue(kind)
    seen = []
    forward = type(served.ort).forward

    def recording_forward(model, *args, **kwargs):
        seen.append((kwargs["encoder_outputs"]["last_hidden_state"].shape[0], kwargs["decoder_input_ids"].shape[0]))
        return forward(model, *args, **kwargs)

    monkeypatch.setattr(type(served.ort), "forward", recording_forward)
    expected, tokens = served.both(**SETTINGS[settings])
    assert torch.equal(tokens, expected), (tokens, expected)
    per_sentence = max(SETTINGS[settings].get("num_beams", 1), SETTINGS[settings].get("num_return_sequences", 1))
    assert seen and set(seen) == {(3, 3 * per_sentence)}, seen


def test_a_step_on_a_source_per_sentence_equals_the_source_repeated(seq2seq):
    """Rows = sources x n, each source serving its n consecutive rows: the step's logits are those of the
    source repeated for every row, as in the PyTorch model (`check_source_rows`)."""
    ort, rows = seq2seq.ort, 3 * 2
    encoder_outputs = ort.get_encoder()(seq2seq.ids, attention_mask=seq2seq.mask)
    repeated = {name: value.repeat_interleave(2, dim=0) for name, value in encoder_outputs.items()}
    start = torch.randint(4, VOCAB, (rows, 1), generator=torch.Generator().manual_seed(0))
    logits = [
        ort(encoder_outputs=outputs, attention_mask=mask, decoder_input_ids=start).logits
        for outputs, mask in ((encoder_outputs, seq2seq.mask), (repeated, seq2seq.mask.repeat_interleave(2, dim=0)))
    ]
    torch.testing.assert_close(logits[0], logits[1], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", ["lm", "seq2seq"])
def test_every_steps_logits_equal_the_pytorch_models(request, kind):
    """The logits of every step (beam search: every beam's) as generate sees them, to float32 rounding."""
    served = request.getfixturevalue(kind)
    settings = dict(max_new_tokens=NEW_TOKENS, num_beams=2, return_dict_in_generate=True, output_logits=True)
    settings.update(min_new_tokens=NEW_TOKENS, output_scores=True)
    outputs = [
        model.generate(input_ids=served.ids, attention_mask=served.mask, **settings)
        for model in (served.model, served.ort)
    ]
    assert torch.equal(outputs[0].sequences, outputs[1].sequences)
    for expected, found in zip(outputs[0].logits, outputs[1].logits, strict=True):
        torch.testing.assert_close(found, expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(outputs[1].sequences_scores, outputs[0].sequences_scores, atol=1e-4, rtol=1e-4)


def test_a_chunked_prefill_equals_the_pytorch_models(lm):
    """A causal LM's prompt in chunks of 2 tokens: the first on a new cache (the prompt graph), the others
    going on from the cache (the step graph, token by token)."""
    expected, tokens = lm.both(do_sample=False, prefill_chunk_size=2)
    assert torch.equal(tokens, expected), (tokens, expected)


# transformers cuts the source's mask to each chunk of the decoder prompt unless the model swaps the masks
# (`EncoderDecoderChunkedPrefillMixin`): without it the exported model refused its (B, chunk) "source" mask.
SEQ2SEQ_CHUNKED = {
    "greedy-chunks-of-1": dict(do_sample=False, prefill_chunk_size=1),
    "beam-decoder-prompt-in-chunks-of-2": dict(
        num_beams=2,
        prefill_chunk_size=2,
        decoder_input_ids=torch.tensor([[EOS, 5, 6], [1, EOS, 7], [EOS, 3, 4]]),
        decoder_attention_mask=torch.tensor([[1, 1, 1], [0, 1, 1], [1, 1, 1]]),
    ),
}


@pytest.mark.parametrize("settings", SEQ2SEQ_CHUNKED.values(), ids=SEQ2SEQ_CHUNKED)
def test_a_chunked_prefill_of_an_encoder_decoder_equals_the_pytorch_models(seq2seq, settings):
    expected, tokens = seq2seq.both(**settings)
    assert torch.equal(tokens, expected), (tokens, expected)


def test_a_folder_without_the_prompt_graph_feeds_the_prompt_token_by_token(lm, tmp_path):
    """A causal LM exported before decoder_prompt.onnx: the step graph takes the prompt one token at a time."""
    folder = shutil.copytree(lm.folder, tmp_path / "no-prompt")
    manifest = json.loads((folder / "manifest.json").read_text())
    for field in ("files", "graphs"):
        del manifest[field]["decoder_prompt"]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    (folder / "decoder_prompt.onnx").unlink()
    older = ORTModelForCausalLM.from_pretrained(folder, threads=1)
    assert older.exported.prompt is None
    expected = lm.model.generate(input_ids=lm.ids, attention_mask=lm.mask, max_new_tokens=NEW_TOKENS, num_beams=2)
    tokens = older.generate(input_ids=lm.ids, attention_mask=lm.mask, max_new_tokens=NEW_TOKENS, num_beams=2)
    assert torch.equal(tokens, expected), (tokens, expected)


def test_a_decoder_prompt_of_several_tokens_equals_the_pytorch_models(seq2seq):
    """decoder_input_ids of several tokens: on a new cache, the step graph takes them one by one."""
    prompt = torch.tensor([[EOS, 7, 8]] * 3)
    expected, tokens = seq2seq.both(decoder_input_ids=prompt, num_beams=2)
    assert torch.equal(tokens, expected) and torch.equal(tokens[:, :3], prompt)


def _count_graph_calls(ort_model, monkeypatch) -> Counter:
    calls = Counter()
    for role in ("prompt", "step"):
        graph = getattr(ort_model.exported, role)
        run = graph.run
        monkeypatch.setattr(graph, "run", lambda *args, _run=run, _role=role: (calls.update([_role]), _run(*args))[1])
    return calls


@pytest.mark.parametrize("length", [1, 5])
def test_a_prompt_runs_in_one_graph_call(lm, monkeypatch, length):
    """A causal LM's whole prompt (left-padded rows included) is one call of the prompt graph, whose logits
    and windows equal the model's forward over a new cache; the next token is one call of the step graph."""
    ids, mask = lm.ids[:, -length:], lm.mask[:, -length:]
    calls = _count_graph_calls(lm.ort, monkeypatch)
    found = lm.ort(input_ids=ids, attention_mask=mask, logits_to_keep=1)
    assert calls == Counter(prompt=1)
    cache = lm.model.new_cache()
    with torch.no_grad():
        expected = lm.model(input_ids=ids, attention_mask=mask, cache=cache, use_cache=True)
    torch.testing.assert_close(found.logits, expected.logits[:, -1:], atol=1e-4, rtol=1e-4)
    for ort_layer, layer in zip(getattr(found, CACHE_NAME).layers, cache.layers, strict=True):
        torch.testing.assert_close(ort_layer.window, layer.window, atol=1e-5, rtol=1e-5)
    following = torch.full((len(ids), 1), 9)
    found = lm.ort(
        input_ids=following,
        attention_mask=torch.ones_like(following),
        cache=getattr(found, CACHE_NAME),
        logits_to_keep=1,
    )
    with torch.no_grad():
        expected = lm.model(input_ids=following, attention_mask=torch.ones_like(following), cache=cache, use_cache=True)
    assert calls == Counter(prompt=1, step=1)
    torch.testing.assert_close(found.logits, expected.logits, atol=1e-4, rtol=1e-4)


def test_the_graphs_write_into_the_given_tensors(lm):
    """IOBinding: ONNX Runtime writes each output into the caller's tensor (no copy through numpy)."""
    graph, exported = lm.ort.exported.prompt, lm.ort.exported
    logits = torch.full((3, 1, VOCAB), float("nan"))
    windows = [torch.full((3, size, channels), float("nan")) for size, channels in exported.state_shapes]
    graph.run(
        {"input_ids": lm.ids, "attention_mask": lm.mask},
        {"logits": logits, **dict(zip(exported.window_names, windows, strict=True))},
    )
    with torch.no_grad():
        expected = lm.model(input_ids=lm.ids, attention_mask=lm.mask).logits[:, -1:]
    torch.testing.assert_close(logits, expected, atol=1e-4, rtol=1e-4)
    assert not any(window.isnan().any() for window in windows)


@pytest.mark.parametrize("settings", [dict(do_sample=False), dict(do_sample=True, top_k=5)], ids=["greedy", "sampling"])
def test_text_generation_pipeline_equals_the_pytorch_models(lm, settings):
    """pipeline("text-generation") with the exported folder's own tokenizer: the PyTorch model's texts."""
    texts = ["w5 w6 w7 w8", "w9"]  # of different lengths: the pipeline pads on the left
    outputs = []
    for model in (lm.model, lm.ort):
        generator = pipeline("text-generation", model=model, tokenizer=AutoTokenizer.from_pretrained(lm.folder))
        torch.manual_seed(0)
        outputs.append(generator(texts, max_new_tokens=NEW_TOKENS, **settings))
    assert outputs[0] == outputs[1]
    assert all(row[0]["generated_text"] != text for row, text in zip(outputs[1], texts, strict=True))


def test_the_folder_carries_the_configurations_and_the_tokenizer(lm, seq2seq, tokenizer):
    manifest = json.loads((lm.folder / "manifest.json").read_text())
    tokenizer_files = {"tokenizer.json", "tokenizer_config.json"}
    assert {"config.json", "generation_config.json", "decoder_prompt.onnx", *tokenizer_files} <= set(
        manifest["written"]
    )
    assert all((lm.folder / name).is_file() for name in manifest["written"])
    assert lm.ort.config.to_dict() == {**lm.model.config.to_dict(), "_name_or_path": str(lm.folder)}
    assert lm.ort.generation_config.eos_token_id == lm.model.generation_config.eos_token_id != EOS
    text = "w5 w17 w39"
    assert AutoTokenizer.from_pretrained(lm.folder)(text)["input_ids"] == tokenizer(text)["input_ids"]
    # A host without transformers reads tokenizer.json with the tokenizers library.
    assert Tokenizer.from_file(str(lm.folder / "tokenizer.json")).encode(text).ids == tokenizer(text)["input_ids"]
    # The encoder-decoder exported over the LM's folder left neither the LM's tokenizer nor its prompt graph.
    left = {path.name for path in seq2seq.folder.iterdir()}
    assert not left & (tokenizer_files | {"decoder_prompt.onnx"}) and "encoder.onnx" in left
    assert set(json.loads((seq2seq.folder / "manifest.json").read_text())["written"]) == left


def test_an_int8_folder_quantizes_the_prompt_graph_and_generates(lm, tmp_path):
    import onnx

    folder = shutil.copytree(lm.folder, tmp_path / "int8")
    assert "decoder_prompt.onnx" in quantize_exported(folder)
    assert any(node.op_type == "MatMulInteger" for node in onnx.load(folder / "decoder_prompt.onnx").graph.node)
    tokens = ORTModelForCausalLM.from_pretrained(folder, threads=1).generate(
        input_ids=lm.ids, attention_mask=lm.mask, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS
    )
    assert tokens.shape == (3, lm.ids.shape[1] + NEW_TOKENS) and torch.equal(tokens[:, : lm.ids.shape[1]], lm.ids)


class _NoSaving:
    def __len__(self):
        return 10


class _WritingFolders:
    """A tokenizer whose save_pretrained writes ``names`` (a name ending in / as a folder)."""

    def __init__(self, *names):
        self.names = names

    def __len__(self):
        return 10

    def save_pretrained(self, folder):
        for name in self.names:
            (Path(folder) / name.rstrip("/")).mkdir() if name.endswith("/") else (Path(folder) / name).write_text("{}")


@pytest.mark.parametrize(
    "tokenizer, error, message",
    [
        (_NoSaving(), TypeError, "tokenizer must be a transformers tokenizer .* got _NoSaving"),
        (word_tokenizer(VOCAB + 5), ValueError, f"tokenizer has {VOCAB + 5} tokens but the model's vocabulary {VOCAB}"),
        (_WritingFolders("vocab.json", "extra/"), ValueError, r"writes folders or links \['extra'\]"),
        (_WritingFolders("config.json"), ValueError, r"files named as the export's own, \['config.json'\]"),
    ],
    ids=["no-save-pretrained", "larger-vocabulary", "a-folder", "an-export-file"],
)
def test_export_refuses_a_bad_tokenizer_before_exporting(tmp_path, tokenizer, error, message):
    with pytest.raises(error, match=message):
        export_onnx(EXPORTED["dynamic-lm"].model(), tmp_path, tokenizer=tokenizer)
    assert not list(tmp_path.iterdir())


def test_export_refuses_to_replace_a_users_tokenizer_file(tmp_path):
    (tmp_path / "tokenizer.json").write_text("mine")
    with pytest.raises(FileExistsError, match=r"holds \['tokenizer.json'\], which the export would replace"):
        export_onnx(EXPORTED["dynamic-lm"].model(), tmp_path, tokenizer=word_tokenizer())
    assert [path.name for path in tmp_path.iterdir()] == ["tokenizer.json"]
    assert (tmp_path / "tokenizer.json").read_text() == "mine"


def test_only_the_plain_files_a_previous_export_wrote_are_removed(tmp_path):
    """A manifest's ``written`` names that lead out of the folder or name a folder are left alone."""
    folder, outside = tmp_path / "export", tmp_path / "victim"
    (folder / "sub").mkdir(parents=True)
    for path in (folder / "tokenizer.json", folder / "kept.json", outside):
        path.write_text("x")
    remove_stale(folder, ["tokenizer.json", "kept.json", "../victim", "sub", "", ".."], ["kept.json"])
    assert sorted(path.name for path in folder.iterdir()) == ["kept.json", "sub"] and outside.exists()


def _edit_json(folder: Path, name: str, **fields) -> None:
    path = folder / name
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


@pytest.mark.parametrize(
    "edit, loader, error, message",
    [
        (lambda folder: shutil.rmtree(folder), ORTModelForCausalLM, FileNotFoundError, "manifest.json does not exist"),
        (
            lambda folder: (folder / "config.json").unlink(),
            ORTModelForCausalLM,
            FileNotFoundError,
            "has no config.json",
        ),
        (
            lambda folder: (folder / "generation_config.json").unlink(),
            ORTModelForCausalLM,
            FileNotFoundError,
            "has no generation_config.json",
        ),
        (
            lambda folder: None,
            ORTModelForSeq2SeqLM,
            ValueError,
            r"holds a causal LM \(talk_lm\): load it with ORTModelForCausalLM",
        ),
        (
            lambda folder: _edit_json(folder, "config.json", model_type="dynamic_conv_lm"),
            ORTModelForCausalLM,
            ValueError,
            "is of model type 'dynamic_conv_lm' but the manifest's graphs of 'talk_lm'",
        ),
        (
            lambda folder: (
                _edit_json(folder, "config.json", model_type="unheard_of"),
                _edit_json(folder, "manifest.json", model_type="unheard_of"),
            ),
            ORTModelForCausalLM,
            ValueError,
            "import the package that registers its model type 'unheard_of'",
        ),
    ],
    ids=["no-folder", "no-config", "no-generation-config", "other-kind", "mixed-exports", "unregistered-type"],
)
def test_from_pretrained_refuses_a_bad_folder(lm, tmp_path, edit, loader, error, message):
    folder = shutil.copytree(lm.folder, tmp_path / "copy")
    edit(folder)
    with pytest.raises(error, match=message):
        loader.from_pretrained(folder)


@pytest.mark.parametrize(
    "served, loader, edit, message",
    [
        (
            "lm",
            ORTModelForCausalLM,
            dict(vocab_size=VOCAB + 10),
            rf"vocab_size={VOCAB + 10} but .* vocabulary is {VOCAB}",
        ),
        (
            "seq2seq",
            ORTModelForSeq2SeqLM,
            dict(vocab_size=VOCAB - 10, decoder_vocab_size=VOCAB - 10),
            rf"vocab_size={VOCAB - 10} but .* source vocabulary is {VOCAB} \(manifest.json's source_vocab_size\)",
        ),
        (
            "seq2seq",
            ORTModelForSeq2SeqLM,
            dict(decoder_vocab_size=VOCAB + 10, share_encoder_decoder_embeddings=False),
            rf"decoder_vocab_size={VOCAB + 10} but .* target vocabulary \(their logits' width\) is {VOCAB} "
            r"\(manifest.json's vocab_size\)",
        ),
        (  # one vocabulary with two sizes: the configuration's own check, and the remedy
            "seq2seq",
            ORTModelForSeq2SeqLM,
            dict(vocab_size=VOCAB + 10),
            r"could not be read \(share_encoder_decoder_embeddings=True needs one vocabulary.*\): export the model again",
        ),
        ("slicenet", ORTModelForSeq2SeqLM, dict(vocab_size=VOCAB + 10), rf"vocab_size={VOCAB + 10} but .* is {VOCAB}"),
    ],
    ids=["lm", "seq2seq-source", "seq2seq-target", "seq2seq-one-vocabulary", "slicenet"],
)
def test_from_pretrained_refuses_a_config_of_another_vocabulary(request, tmp_path, served, loader, edit, message):
    """A config.json whose vocabulary sizes were edited is refused naming the file, the field and both
    sizes (the graphs' embeddings would fail on the ids it allows, their logits are another width)."""
    folder = shutil.copytree(request.getfixturevalue(served).folder, tmp_path / "copy")
    _edit_json(folder, "config.json", **edit)
    with pytest.raises(ValueError, match=rf"{folder / 'config.json'} .*{message}"):
        loader.from_pretrained(folder)


def _lm_requests(lm):
    ids = lm.ids
    return {
        "generate-output-attentions": (
            lambda: lm.ort.generate(ids, max_new_tokens=2, output_attentions=True, return_dict_in_generate=True),
            ValueError,
            "output_attentions",
        ),
        "generate-output-hidden-states": (
            lambda: lm.ort.generate(ids, max_new_tokens=2, output_hidden_states=True, return_dict_in_generate=True),
            ValueError,
            "output_hidden_states",
        ),
        "generate-prompt-lookup": (
            lambda: lm.ort.generate(ids, max_new_tokens=2, prompt_lookup_num_tokens=2),
            ValueError,
            "cannot verify drafted tokens",
        ),
        "generate-compile-config": (
            lambda: lm.ort.generate(ids, max_new_tokens=2, compile_config=CompileConfig()),
            ValueError,
            "without compile_config",
        ),
        "generate-inputs-embeds": (
            lambda: lm.ort.generate(inputs_embeds=torch.zeros(3, 5, 16), max_new_tokens=2),
            ValueError,
            "inputs_embeds .the graphs embed",
        ),
        "forward-labels": (lambda: lm.ort(input_ids=ids, labels=ids), ValueError, "labels .the graphs compute no loss"),
        "forward-id-outside-vocabulary": (
            lambda: lm.ort(input_ids=ids + VOCAB, logits_to_keep=1),
            ValueError,
            r"input_ids must hold token ids in \[0, 40\)",
        ),
        "forward-mask-of-2": (
            lambda: lm.ort(input_ids=ids, attention_mask=lm.mask * 2, logits_to_keep=1),
            ValueError,
            "attention_mask must hold only 0",
        ),
        "forward-position-ids": (
            lambda: lm.ort(input_ids=ids, position_ids=ids, logits_to_keep=1),
            TypeError,
            "unexpected keyword argument.s. position_ids",
        ),
        "forward-other-cache": (
            lambda: lm.ort(input_ids=ids, cache=DynamicCache(), logits_to_keep=1),
            TypeError,
            "must be the ConvCache that ORTModelForCausalLM returned, got DynamicCache",
        ),
        "forward-other-models-cache": (
            lambda: lm.ort(input_ids=ids, cache=ConvCache([7]), logits_to_keep=1),
            ValueError,
            r"history sizes \[7\]",
        ),
        "forward-cache-and-no-cache": (
            lambda: lm.ort(input_ids=ids, cache=lm.ort.new_cache(), use_cache=False, logits_to_keep=1),
            ValueError,
            "use_cache=False with a generation cache",
        ),
        "to-cuda": (lambda: lm.ort.to("cuda"), ValueError, "cannot move or cast to 'cuda'"),
        "half": (lambda: lm.ort.half(), ValueError, "cannot move or cast it"),
        "train": (lambda: lm.ort.train(), ValueError, "is for inference"),
    }


LM_REQUESTS = [
    "generate-output-attentions",
    "generate-output-hidden-states",
    "generate-prompt-lookup",
    "generate-compile-config",
    "generate-inputs-embeds",
    "forward-labels",
    "forward-id-outside-vocabulary",
    "forward-mask-of-2",
    "forward-position-ids",
    "forward-other-cache",
    "forward-other-models-cache",
    "forward-cache-and-no-cache",
    "to-cuda",
    "half",
    "train",
]


@pytest.mark.parametrize("request_name", LM_REQUESTS)
def test_a_request_the_graphs_cannot_honour_is_refused_naming_it(lm, request_name):
    call, error, message = _lm_requests(lm)[request_name]
    with pytest.raises(error, match=message):
        call()
    assert lm.ort.to("cpu", torch.float32) is lm.ort.eval() is lm.ort


def test_a_cache_of_other_rows_is_refused(lm):
    cache = getattr(lm.ort(input_ids=lm.ids, logits_to_keep=1), CACHE_NAME)
    with pytest.raises(ValueError, match="the generation cache holds 3 rows but the input_ids 2"):
        lm.ort(input_ids=lm.ids[:2, :1], cache=cache, logits_to_keep=1)


def test_seq2seq_refuses_encoder_outputs_it_cannot_read(seq2seq):
    model, ort, ids = seq2seq.model, seq2seq.ort, seq2seq.ids
    start = torch.full((3, 1), EOS)
    with torch.no_grad():
        pytorch_encoder_outputs = model.get_encoder()(ids)
    with pytest.raises(ValueError, match=r"encoder_outputs lacks \['cross_key_0', .* get_encoder\(\)"):
        ort(encoder_outputs=pytorch_encoder_outputs, decoder_input_ids=start)
    encoder_outputs = dict(ort.get_encoder()(ids))
    as_numpy = {**encoder_outputs, "cross_key_0": encoder_outputs["cross_key_0"].numpy()}
    with pytest.raises(
        ValueError, match=r"encoder_outputs must hold torch.Tensor values .*\{'cross_key_0': 'ndarray'\}"
    ):
        ort(encoder_outputs=as_numpy, decoder_input_ids=start)
    hidden_as_numpy = {**encoder_outputs, "last_hidden_state": encoder_outputs["last_hidden_state"].numpy()}
    with pytest.raises(ValueError, match="last_hidden_state must be a .B, S, d. torch.Tensor, got ndarray"):
        ort(encoder_outputs=hidden_as_numpy, decoder_input_ids=start)
    with pytest.raises(ValueError, match="attention_mask must be a .B, S. torch.Tensor, got list"):
        ort(encoder_outputs=encoder_outputs, attention_mask=seq2seq.mask.tolist(), decoder_input_ids=start)
    with pytest.raises(ValueError, match="pass input_ids .the source. or its encoder_outputs, not both"):
        ort(input_ids=ids, encoder_outputs=ort.get_encoder()(ids), decoder_input_ids=start)
    with pytest.raises(ValueError, match="pass decoder_input_ids"):
        ort(input_ids=ids)
    with pytest.raises(ValueError, match="has batch size 3 but decoder_input_ids has 2: each source must serve"):
        ort(input_ids=ids, decoder_input_ids=start[:2])
    with pytest.raises(ValueError, match="decoder_inputs_embeds .the graphs embed"):
        ort(input_ids=ids, decoder_inputs_embeds=torch.zeros(3, 1, 16))
    with pytest.raises(TypeError, match="unexpected keyword argument.s. position_ids"):  # None only is let through
        ort(input_ids=ids, decoder_input_ids=start, position_ids=torch.zeros(3, 1, dtype=torch.long))


@pytest.mark.parametrize("token", [VOCAB, -1], ids=["beyond-the-vocabulary", "negative"])
def test_seq2seq_refuses_ids_outside_the_vocabulary(seq2seq, token):
    """As the PyTorch model (whose embedding raises an IndexError), before ONNX Runtime's Gather fails or,
    for an id < 0, reads the row VOCAB + id."""
    ids, start = seq2seq.ids.clone(), torch.full((3, 1), EOS)
    ids[1, 4] = token
    with pytest.raises(ValueError, match=rf"^input_ids must hold token ids in \[0, {VOCAB}\)"):
        seq2seq.ort(input_ids=ids, decoder_input_ids=start)
    with pytest.raises(ValueError, match=rf"^decoder_input_ids must hold token ids in \[0, {VOCAB}\)"):
        seq2seq.ort(input_ids=seq2seq.ids, decoder_input_ids=start * 0 + token)


# What a decoding step keeps between forward calls (talk_hf.onnx.inputs.SourceInputs, step_buffers,
# bound_graph.Binding) must never stand in for what a call is given: each fault below hands a later
# call other inputs through the same objects, shapes or addresses.


def _decode_steps(served: Served, caches: dict, encoder_outputs: dict, masks: dict, order: list, tokens=(EOS, 7, 8)):
    """Feed ``tokens`` one by one to each source named in ``order`` (a name per step, so sources may
    interleave), each on its own cache; per name, the logits of every step."""
    logits, fed = {name: [] for name in caches}, dict.fromkeys(caches, 0)
    for name in order:
        token = torch.full((3, 1), tokens[fed[name]])
        fed[name] += 1
        with torch.no_grad():
            out = served.ort(
                encoder_outputs=encoder_outputs[name],
                attention_mask=masks[name],
                decoder_input_ids=token,
                cache=caches[name],
            )
        logits[name].append(out.logits)
    return logits


def _pytorch_steps(served: Served, ids, mask, steps: int, tokens=(EOS, 7, 8)) -> list[torch.Tensor]:
    cache, found = served.model.new_cache(), []
    for token in tokens[:steps]:
        with torch.no_grad():
            out = served.model(
                input_ids=ids,
                attention_mask=mask,
                decoder_input_ids=torch.full((3, 1), token),
                cache=cache,
                use_cache=True,
            )
        found.append(out.logits[:, -1:])
    return found


def test_interleaved_decodings_of_sources_of_one_shape_each_read_their_own(seq2seq):
    """Two caches decoded step by step in turn, their sources of one shape sharing one mask object: each
    step reads its own cache's windows and its own source (not the other's bound memory)."""
    other_ids = seq2seq.ids.flip(0)
    mask = seq2seq.mask.flip(0).clone()
    sources = {"first": (seq2seq.ids, seq2seq.mask.clone()), "second": (other_ids, mask)}
    shared_mask = sources["second"][1]
    sources["first"] = (seq2seq.ids, shared_mask) if torch.equal(seq2seq.mask, shared_mask) else sources["first"]
    encoder_outputs = {name: seq2seq.ort.get_encoder()(ids, attention_mask=m) for name, (ids, m) in sources.items()}
    caches = {name: seq2seq.ort.new_cache() for name in sources}
    masks = {name: m for name, (_, m) in sources.items()}
    found = _decode_steps(
        seq2seq, caches, encoder_outputs, masks, ["first", "second", "second", "first", "first", "second"]
    )
    for name, (ids, m) in sources.items():
        for step, expected in zip(found[name], _pytorch_steps(seq2seq, ids, m, 3), strict=True):
            torch.testing.assert_close(step, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("inference_mode", [False, True], ids=["no-grad", "inference-mode"])
def test_a_source_mask_written_in_place_is_checked_and_read_again(seq2seq, inference_mode):
    """The source mask's checks are kept for the same tensor between steps: written in place, it is read
    anew (a 1 set to 0 changes the logits as in the PyTorch model) and checked anew (a 2 is refused),
    also for an inference tensor, which has no version counter."""
    context = torch.inference_mode() if inference_mode else torch.no_grad()
    with context:
        mask = seq2seq.mask.clone()
        encoder_outputs = seq2seq.ort.get_encoder()(seq2seq.ids, attention_mask=mask)
        pytorch_encoder_outputs = seq2seq.model.get_encoder()(seq2seq.ids, attention_mask=mask)
        caches = seq2seq.ort.new_cache(), seq2seq.model.new_cache()
        for token in (EOS, 7):
            if token == 7:
                mask[2, mask[2].nonzero()[-1].item()] = 0  # row 2 loses its last real source token
            found = seq2seq.ort(
                encoder_outputs=encoder_outputs,
                attention_mask=mask,
                decoder_input_ids=torch.full((3, 1), token),
                cache=caches[0],
            )
            expected = seq2seq.model(
                encoder_outputs=pytorch_encoder_outputs,
                attention_mask=mask,
                decoder_input_ids=torch.full((3, 1), token),
                cache=caches[1],
                use_cache=True,
            )
            torch.testing.assert_close(found.logits, expected.logits[:, -1:], atol=1e-4, rtol=1e-4)
        cache = caches[0]
        mask[0, 0] = 2
        with pytest.raises(ValueError, match=r"attention_mask must hold only 0 .padding. and 1 .real token.*\[2\]"):
            seq2seq.ort(
                encoder_outputs=encoder_outputs,
                attention_mask=mask,
                decoder_input_ids=torch.full((3, 1), 8),
                cache=cache,
            )


def test_windows_the_cache_received_from_elsewhere_are_read(seq2seq):
    """A cache whose rows were reselected between steps (new window tensors, as beam search's batch
    operations make them) is read as it stands, as the PyTorch model's cache is."""
    rows = torch.tensor([2, 0, 1])
    steps = []
    for model in (seq2seq.model, seq2seq.ort):
        cache = model.new_cache()
        with torch.no_grad():
            model(
                input_ids=seq2seq.ids,
                attention_mask=seq2seq.mask,
                decoder_input_ids=torch.full((3, 1), EOS),
                cache=cache,
                use_cache=True,
            )
            cache.batch_select_indices(rows)
            out = model(
                input_ids=seq2seq.ids[rows],
                attention_mask=seq2seq.mask[rows],
                decoder_input_ids=torch.full((3, 1), 7),
                cache=cache,
                use_cache=True,
            )
        steps.append(out.logits[:, -1:])
    torch.testing.assert_close(steps[1], steps[0], atol=1e-4, rtol=1e-4)


def test_a_graph_reads_the_tensors_of_each_run(lm):
    """The binding a graph keeps between runs: tensors at new addresses are bound anew, and a tensor bound
    before is read again at run time (written in place between runs)."""
    graph, exported = lm.ort.exported.prompt, lm.ort.exported
    ids = lm.ids.clone()
    for change in ("new-tensors", "in-place"):
        if change == "new-tensors":
            ids = ids.flip(0).clone()
        else:
            ids[:, -1] = 9
        logits = torch.empty(3, 1, VOCAB)
        windows = [torch.empty(3, size, channels) for size, channels in exported.state_shapes]
        mask = lm.mask.flip(0).clone() if change == "new-tensors" else lm.mask.flip(0)
        graph.run(
            {"input_ids": ids, "attention_mask": mask},
            {"logits": logits, **dict(zip(exported.window_names, windows, strict=True))},
        )
        with torch.no_grad():
            expected = lm.model(input_ids=ids, attention_mask=mask).logits[:, -1:]
        torch.testing.assert_close(logits, expected, atol=1e-4, rtol=1e-4)
