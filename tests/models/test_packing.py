"""Packed rows (several documents in one row, as transformers' ``DataCollatorWithFlattening`` makes them
for padding-free training): a causal LM computes each document exactly as if it were alone, from
``position_ids``, ``cu_seq_lens_q/k`` or ``seq_idx`` alike; whatever cannot honour them refuses them.
"""

import numpy as np
import pytest
import torch
from transformers import DataCollatorWithFlattening

from talk_hf.models import conv_modeling
from talk_hf.models.packing import document_positions
from talk_hf.ops import documents as ops_documents

from .helpers import CASES, PAD, random_tokens, returned_cache

# Every family of the package; the toy family's core takes no document edges (it is refused below).
LM_CASES = [case for case in CASES if not case.is_seq2seq and not case.name.startswith("toy")]
LM_IDS = [case.name for case in LM_CASES]
# One token, two, fewer than the widest window (TaLK reaches 3 back, the convolutions 4), more than it.
DOCUMENT_LENGTHS = [1, 2, 3, 9, 4]


def _documents(lengths=DOCUMENT_LENGTHS, seed: int = 1) -> list[torch.Tensor]:
    return [random_tokens(1, length, seed=seed + index)[0] for index, length in enumerate(lengths)]


def _packed(documents: list[torch.Tensor], **collator_options) -> dict:
    """What DataCollatorWithFlattening gives for ``documents`` (labels included), as tensors."""
    collator = DataCollatorWithFlattening(return_tensors="pt", **collator_options)
    return collator([{"input_ids": document.tolist()} for document in documents])


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("case", LM_CASES, ids=LM_IDS)
def test_a_packed_document_computes_what_it_computes_alone(case, device):
    """Logits, loss and gradients (weights and embeddings) of each packed document equal its own run
    (float64 logits to 1e-10; transformers' loss runs in float32, so the loss and gradients to its
    rounding), on the CPU and (`gpu`) on the CUDA kernels."""
    model = case.model().double().to(device)
    documents = [document.to(device) for document in _documents()]
    batch = {name: tensor.to(device) for name, tensor in _packed(documents).items()}
    embeds = model.get_input_embeddings()(batch["input_ids"]).detach().requires_grad_()
    outputs = model(
        inputs_embeds=embeds, labels=batch["labels"], position_ids=batch["position_ids"], num_items_in_batch=1
    )
    outputs.loss.backward()
    packed_grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    start, total_loss = 0, 0.0
    alone_embed_grads = []
    for document in documents:
        ids = document[None]
        alone_embeds = model.get_input_embeddings()(ids).detach().requires_grad_()
        alone = model(inputs_embeds=alone_embeds, labels=ids, num_items_in_batch=1)
        alone.loss.backward()
        end = start + len(document)
        torch.testing.assert_close(outputs.logits[:, start:end], alone.logits, rtol=1e-10, atol=1e-10)
        alone_embed_grads.append(alone_embeds.grad)
        total_loss += alone.loss.item()
        start = end
    torch.testing.assert_close(outputs.loss.item(), total_loss, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(embeds.grad, torch.cat(alone_embed_grads, dim=1), rtol=1e-5, atol=1e-7)
    for name, parameter in model.named_parameters():
        if parameter.grad is not None:
            torch.testing.assert_close(packed_grads[name], parameter.grad, rtol=1e-5, atol=1e-7, msg=name)


@pytest.mark.parametrize("case", LM_CASES, ids=LM_IDS)
def test_a_packed_forward_derives_the_documents_once(case, monkeypatch):
    """The causal LM's head and its base model share one derivation per forward: the documents'
    positions (and their checks) and their edges (and the value check, a host sync on a GPU), which
    every layer's op is handed; each forward derives them again from its own positions."""
    calls = {"positions": 0, "edges": 0}

    def counted(name, function):
        def count(*args, **kwargs):
            calls[name] += 1
            return function(*args, **kwargs)

        return count

    monkeypatch.setattr(conv_modeling, "document_positions", counted("positions", conv_modeling.document_positions))
    monkeypatch.setattr(ops_documents, "_derive_edges", counted("edges", ops_documents._derive_edges))
    model = case.model()
    batch = _packed(_documents())
    assert sum(1 for name, _ in model.named_modules() if name.endswith("mixer")) >= 2
    model(input_ids=batch["input_ids"], labels=batch["labels"], position_ids=batch["position_ids"])
    assert calls == {"positions": 1, "edges": 1}
    model(input_ids=batch["input_ids"], labels=batch["labels"], position_ids=batch["position_ids"])
    assert calls == {"positions": 2, "edges": 2}


@pytest.mark.parametrize("edit", ["numpy", "data"])
@pytest.mark.parametrize("case", LM_CASES, ids=LM_IDS)
def test_positions_changed_in_place_reach_the_next_forward(case, edit):
    """position_ids changed in place where the tensor's version counter does not see it (through the
    numpy array it shares, or through ``.data``) to split one document in two: the next forward
    computes the two documents, as a new tensor of the same positions does."""
    model = case.model().eval()
    ids = random_tokens(1, 12, seed=5)
    array = np.arange(12)[None].copy()
    position_ids = torch.from_numpy(array)
    one_document = model(input_ids=ids, position_ids=position_ids).logits
    if edit == "numpy":
        array[0, 6:] = np.arange(6)
    else:
        position_ids.data[0, 6:] = torch.arange(6)
    two_documents = model(input_ids=ids, position_ids=position_ids).logits
    expected = model(input_ids=ids, position_ids=torch.cat([torch.arange(6), torch.arange(6)])[None]).logits
    torch.testing.assert_close(two_documents, expected, rtol=0, atol=0)
    assert not torch.allclose(two_documents[:, 6:], one_document[:, 6:])


@pytest.mark.parametrize("case", LM_CASES[:1], ids=LM_IDS[:1])
def test_documents_handed_to_the_base_model_are_checked(case):
    """``packed_documents`` (what a causal-LM head hands its base model) must be derived documents of
    the tokens' shape, given without the inputs that describe them again."""
    model = case.model().eval()
    batch = _packed(_documents([2, 3]))
    ids, positions = batch["input_ids"], batch["position_ids"]
    base = model.model
    derived = base._documents(ids, None, None, {"position_ids": positions})
    torch.testing.assert_close(
        base(input_ids=ids, packed_documents=derived).last_hidden_state,
        base(input_ids=ids, position_ids=positions).last_hidden_state,
    )
    with pytest.raises(TypeError, match="packed_documents must be the talk_hf.models.packing.PackedDocuments"):
        base(input_ids=ids, packed_documents=positions)
    with pytest.raises(ValueError, match="packed_documents were given with position_ids: pass either"):
        base(input_ids=ids, packed_documents=derived, position_ids=positions)
    with pytest.raises(ValueError, match=r"derived for \(B, T\) = \(1, 5\) but the tokens have \(1, 4\)"):
        base(input_ids=ids[:, :4], packed_documents=derived)


@pytest.mark.parametrize(
    "collator_options",
    [
        {},
        {"return_flash_attn_kwargs": True},
        {"return_seq_idx": True},
        {"return_flash_attn_kwargs": True, "return_position_ids": False},
    ],
    ids=["position_ids", "flash_attn_kwargs", "seq_idx", "cu_seq_lens_only"],
)
@pytest.mark.parametrize("case", LM_CASES, ids=LM_IDS)
def test_every_form_of_the_collator_s_batch_gives_the_same_logits_and_loss(case, collator_options):
    model = case.model().eval()
    documents = _documents(seed=3)
    reference = model(**_packed(documents))
    batch = _packed(documents, **collator_options)
    outputs = model(**batch)
    torch.testing.assert_close(outputs.logits, reference.logits, rtol=0, atol=0)
    torch.testing.assert_close(outputs.loss, reference.loss, rtol=0, atol=0)
    last_document = model(input_ids=documents[-1][None]).logits
    torch.testing.assert_close(outputs.logits[:, -len(documents[-1]) :], last_document, rtol=1e-5, atol=1e-5)


def test_the_three_descriptions_of_documents_agree():
    documents = _documents([2, 3, 1])
    flash = _packed(documents, return_flash_attn_kwargs=True)
    seq_idx = _packed(documents, return_seq_idx=True)["seq_idx"]
    expected = torch.tensor([[0, 1, 0, 1, 2, 0]])
    packing = {"cu_seq_lens_q": flash["cu_seq_lens_q"], "cu_seq_lens_k": flash["cu_seq_lens_k"]}
    assert torch.equal(document_positions(None, packing, 1, 6, torch.device("cpu")), expected)
    assert torch.equal(document_positions(None, {"seq_idx": seq_idx}, 1, 6, torch.device("cpu")), expected)
    both = document_positions(flash["position_ids"], {**packing, "seq_idx": seq_idx}, 1, 6, torch.device("cpu"))
    assert torch.equal(both, expected)
    with pytest.raises(
        ValueError, match=r"cu_seq_lens_q and position_ids describe different documents: row 0, token 2"
    ):
        document_positions(torch.arange(6), packing, 1, 6, torch.device("cpu"))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("case", LM_CASES, ids=LM_IDS)
def test_random_packings_compute_every_document_alone(case, seed):
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 12, (int(torch.randint(2, 6, (1,), generator=generator)),), generator=generator)
    documents = _documents(lengths.tolist(), seed=10 * seed)
    model = case.model().eval()
    logits = model(**_packed(documents)).logits
    start = 0
    for document in documents:
        alone = model(input_ids=document[None]).logits
        torch.testing.assert_close(logits[:, start : start + len(document)], alone, rtol=1e-5, atol=1e-5)
        start += len(document)


@pytest.mark.parametrize("case", LM_CASES, ids=LM_IDS)
def test_two_packed_rows_with_padding_compute_every_document_alone(case):
    """B = 2 rows of different packings, the shorter one right-padded (position_ids as a collator of
    padded packed rows would give them)."""
    model = case.model().eval()
    rows = [_documents([3, 5], seed=20), _documents([6, 1], seed=30)]
    ids = torch.full((2, 8), PAD)
    positions = torch.zeros(2, 8, dtype=torch.long)
    mask = torch.zeros(2, 8, dtype=torch.long)
    for row, documents in enumerate(rows):
        tokens = torch.cat(documents)
        ids[row, : len(tokens)] = tokens
        positions[row, : len(tokens)] = torch.cat([torch.arange(len(document)) for document in documents])
        mask[row, : len(tokens)] = 1
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
    for row, documents in enumerate(rows):
        start = 0
        for document in documents:
            alone = model(input_ids=document[None]).logits[0]
            torch.testing.assert_close(logits[row, start : start + len(document)], alone, rtol=1e-5, atol=1e-5)
            start += len(document)


@pytest.mark.parametrize("case", LM_CASES[:1], ids=LM_IDS[:1])
def test_position_ids_give_the_sinusoidal_positions(case):
    """Positions come from position_ids, not from the mask: shifted positions change the logits, and
    positions counted on from a prefix give the continuation's logits."""
    model = case.model().eval()
    tokens = random_tokens(1, 6, seed=5)
    full = model(input_ids=tokens).logits
    assert not torch.allclose(model(input_ids=tokens, position_ids=torch.arange(1, 7)[None]).logits, full)
    torch.testing.assert_close(model(input_ids=tokens, position_ids=torch.arange(6)[None]).logits, full, rtol=0, atol=0)


@pytest.mark.parametrize("case", LM_CASES, ids=LM_IDS)
def test_left_padded_generation_with_position_ids_decodes_the_same_tokens(case):
    model = case.model()
    ids = random_tokens(2, 5, seed=3)
    mask = torch.ones_like(ids)
    mask[0, :2] = 0
    ids = ids.masked_fill(mask == 0, PAD)
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
    settings = {"max_new_tokens": 4, "do_sample": False, "pad_token_id": PAD}
    expected = model.generate(input_ids=ids, attention_mask=mask, **settings)
    given = model.generate(input_ids=ids, attention_mask=mask, position_ids=positions, **settings)
    assert torch.equal(given, expected)


@pytest.mark.parametrize("case", LM_CASES[:1], ids=LM_IDS[:1])
def test_bad_packing_inputs_are_refused_naming_them(case):
    model = case.model().eval()
    batch = _packed(_documents([2, 3]), return_flash_attn_kwargs=True)
    ids, positions, lengths = batch["input_ids"], batch["position_ids"], batch["cu_seq_lens_q"]
    with pytest.raises(ValueError, match=r"cu_seq_lens_k must equal cu_seq_lens_q"):
        model(input_ids=ids, cu_seq_lens_q=lengths, cu_seq_lens_k=torch.tensor([0, 1, 5], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"max_length_q must be the longest document's length, 3 .* got 4"):
        model(input_ids=ids, cu_seq_lens_q=lengths, max_length_q=4)
    with pytest.raises(ValueError, match=r"max_length_k was given without cu_seq_lens_q"):
        model(input_ids=ids, max_length_k=3)
    with pytest.raises(ValueError, match=r"cu_seq_lens_q describes the documents of one packed row .* got 2 rows"):
        model(input_ids=ids.expand(2, -1), cu_seq_lens_q=lengths)
    with pytest.raises(ValueError, match=r"position_ids must be >= 0"):
        model(input_ids=ids, position_ids=positions - 1)
    with pytest.raises(ValueError, match=r"seq_idx must be a \(1, 5\) tensor"):
        model(input_ids=ids, seq_idx=torch.zeros(1, 4, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"packed rows .* without a generation cache"):
        model(input_ids=ids, position_ids=positions, use_cache=True)
    assert returned_cache(model(input_ids=ids, position_ids=positions)) is None  # none made unless asked


def test_a_family_whose_core_takes_no_document_edges_refuses_packed_rows():
    toy = next(case for case in CASES if case.name == "toy-lm")
    with pytest.raises(ValueError, match=r"DepthwiseConvCore.forward takes no document_edges: pad the batch"):
        toy.model()(**_packed(_documents([2, 3])))


@pytest.mark.parametrize("name", ["cu_seq_lens_q", "seq_idx"])
def test_encoder_decoders_refuse_packing_inputs(name):
    seq2seq = next(case for case in CASES if case.is_seq2seq)
    model = seq2seq.model()
    inputs = {"input_ids": random_tokens(1, 5), "decoder_input_ids": random_tokens(1, 5, seed=2)}
    value = (
        torch.tensor([0, 2, 5], dtype=torch.int32) if name == "cu_seq_lens_q" else torch.zeros(1, 5, dtype=torch.int32)
    )
    with pytest.raises(ValueError, match=rf"got {name}: .* computed by the causal LMs only"):
        model(**inputs, **{name: value})


class _Documents(torch.utils.data.Dataset):
    """Documents of several lengths, as a tokenized text dataset holds them (``input_ids`` lists)."""

    def __init__(self, lengths: list[int]):
        self.rows = [{"input_ids": document.tolist()} for document in _documents(lengths, seed=40)]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, index):
        return self.rows[index]


def _padded_batch(rows: list[dict]) -> dict:
    """Right-padded rows with labels -100 at padding (what DataCollatorForLanguageModeling(mlm=False) gives)."""
    longest = max(len(row["input_ids"]) for row in rows)
    ids = torch.full((len(rows), longest), PAD)
    mask = torch.zeros(len(rows), longest, dtype=torch.long)
    for index, row in enumerate(rows):
        ids[index, : len(row["input_ids"])] = torch.tensor(row["input_ids"])
        mask[index, : len(row["input_ids"])] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


@pytest.mark.parametrize("case", LM_CASES[:2], ids=LM_IDS[:2])
def test_trainer_with_data_collator_with_flattening_trains_and_evaluates_the_padded_loss(case, tmp_path):
    """The packed batches' evaluation loss is the padded batches' (the same tokens predicted from the
    same documents), and training on packed batches lowers it."""
    from transformers import Trainer, TrainingArguments

    documents = _Documents([3, 7, 2, 5, 9, 4, 6, 1])
    arguments = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        max_steps=4,
        learning_rate=1e-2,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
    )

    model = case.model()
    padded = Trainer(
        model=model,
        args=arguments,
        eval_dataset=documents,
        data_collator=_padded_batch,
    )
    packed = Trainer(
        model=model,
        args=arguments,
        train_dataset=documents,
        eval_dataset=documents,
        data_collator=DataCollatorWithFlattening(),
    )
    before = packed.evaluate()["eval_loss"]
    assert before == pytest.approx(padded.evaluate()["eval_loss"], rel=1e-5)
    packed.train()
    assert packed.evaluate()["eval_loss"] < before


@pytest.mark.parametrize("case", LM_CASES[:1], ids=LM_IDS[:1])
def test_a_compiled_packed_training_step_is_one_graph(case):
    """torch.compile(fullgraph=True) traces the documents' one derivation (its value checks skipped):
    the packed loss and logits equal eager's."""
    torch._dynamo.reset()
    model = case.model()
    batch = _packed(_documents())
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    expected, actual = model(**batch), compiled(**batch)
    torch.testing.assert_close(actual.logits, expected.logits)
    torch.testing.assert_close(actual.loss, expected.loss)
