"""Batches by token count, the collators that pad them, and LM blocks.

`TokenBatchSampler` is fairseq's `--max-tokens`: examples of similar length go together and a
batch holds as many as fit in `max_tokens` padded tokens, so every step costs about the same
whatever the sentence lengths. Its batches are a pure function of (seed, epoch): a resumed run
rebuilds the same epoch and skips what it had done.
"""

import torch


class TokenBatchSampler(torch.utils.data.Sampler):
    """Lists of example indices whose padded size `len(batch) * max(length)` is <= `max_tokens`.

    Args:
        lengths: the token count of every example (for a pair, the longer side).
        max_tokens: the budget of padded tokens per batch.
        shuffle: shuffle examples of equal length and the order of the batches, anew every epoch.
        seed: with `set_epoch`, fixes the shuffling.
        multiple_of: drop the last batches of an epoch so that their number is a multiple of this
            (processes x accumulation steps: every optimizer step then sees full micro-batches).
    """

    def __init__(self, lengths, max_tokens, shuffle=True, seed=0, multiple_of=1):
        super().__init__()
        self.lengths = torch.as_tensor(lengths, dtype=torch.long)
        longest = int(self.lengths.argmax())  # the index of a longest example
        if self.lengths[longest] > max_tokens:
            raise ValueError(
                f"example {longest} has {int(self.lengths[longest])} tokens, more than max_tokens={max_tokens} "
                "(the padded tokens of a batch): raise max_tokens"
            )
        self.max_tokens = max_tokens
        self.shuffle = shuffle
        self.seed = seed
        self.multiple_of = multiple_of
        self.epoch = 0
        # The grouping depends only on the sorted lengths, so every epoch has the same count.
        count = len(self._group(torch.sort(self.lengths, stable=True).indices))
        self.num_batches = count - count % multiple_of
        if self.num_batches == 0:
            raise ValueError(
                f"{len(self.lengths)} examples make {count} batches of <= {max_tokens} tokens, fewer than "
                f"the {multiple_of} that one optimizer step needs: lower max_tokens or add data"
            )

    def set_epoch(self, epoch):
        self.epoch = epoch

    def _group(self, order):
        batches, batch, longest = [], [], 0
        for index in order.tolist():
            length = int(self.lengths[index])
            if batch and (len(batch) + 1) * max(longest, length) > self.max_tokens:
                batches.append(batch)
                batch, longest = [], 0
            batch.append(index)
            longest = max(longest, length)
        if batch:
            batches.append(batch)
        return batches

    def __iter__(self):
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        order = torch.arange(len(self.lengths))
        if self.shuffle:
            order = torch.randperm(len(self.lengths), generator=generator)
        order = order[torch.sort(self.lengths[order], stable=True).indices]
        batches = self._group(order)
        if self.shuffle:
            batches = [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]
        return iter(batches[: self.num_batches])

    def __len__(self):
        return self.num_batches


def make_train_loader(examples, lengths, collate, *, max_tokens, seed, multiple_of):
    """A `DataLoader` of token-count batches of `examples`, and its `TokenBatchSampler`.

    `lengths` are the examples' token counts, `collate` makes a batch of a list of examples, and an
    epoch's batch count is a multiple of `multiple_of` (processes x accumulation steps). The loader
    gets its own `torch.Generator`: making an iterator then draws no number from the global RNG,
    whose state a checkpoint restores, so a resumed run draws what the first one drew.
    """
    sampler = TokenBatchSampler(lengths, max_tokens, seed=seed, multiple_of=multiple_of)
    loader = torch.utils.data.DataLoader(
        examples, batch_sampler=sampler, collate_fn=collate, generator=torch.Generator()
    )
    return loader, sampler


def pad(sequences, value):
    """A (len(sequences), longest) LongTensor of the lists `sequences`, right-padded with `value`."""
    out = torch.full((len(sequences), max(len(s) for s in sequences)), value, dtype=torch.long)
    for row, sequence in enumerate(sequences):
        out[row, : len(sequence)] = torch.as_tensor(sequence, dtype=torch.long)
    return out


class TranslationCollator:
    """Pads examples {"source": ids, "target": ids, "index": int} into a seq2seq batch.

    `decoder_input_ids` is the target shifted right behind `decoder_start_token_id` (teacher
    forcing); `labels` is the target with -100 at padding, the positions the loss ignores.
    """

    def __init__(self, pad_token_id, decoder_start_token_id):
        self.pad_token_id = pad_token_id
        self.decoder_start_token_id = decoder_start_token_id

    def __call__(self, examples):
        input_ids = pad([e["source"] for e in examples], self.pad_token_id)
        targets = [e["target"] for e in examples]
        return {
            "input_ids": input_ids,
            "attention_mask": (input_ids != self.pad_token_id).long(),
            "decoder_input_ids": pad([[self.decoder_start_token_id] + t[:-1] for t in targets], self.pad_token_id),
            "labels": pad(targets, -100),
            "index": torch.tensor([e["index"] for e in examples]),
        }


def lm_blocks(token_lists, eos_token_id, block_size):
    """Concatenate every line's ids plus `eos_token_id` and cut the stream into blocks.

    Returns an (N, block_size + 1) LongTensor: consecutive blocks share one token, so that a
    block's inputs are its first `block_size` tokens and its labels the last `block_size`, and
    every token but the very first is predicted exactly once (the usual non-overlapping
    perplexity). The tail that does not fill a block is dropped; a stream too short for one block
    raises ValueError with its token count (the caller names the split and the option), and so does
    a `block_size` below 1, which predicts nothing.
    """
    if block_size < 1:
        raise ValueError(f"a block of {block_size} + 1 tokens predicts no token: blocks need at least 1 + 1")
    stream = torch.tensor([token for tokens in token_lists for token in (*tokens, eos_token_id)], dtype=torch.long)
    count = (len(stream) - 1) // block_size
    if count == 0:
        raise ValueError(
            f"{len(stream)} tokens ({len(token_lists)} lines, each ended by an end-of-sequence token) do not fill "
            f"one block of {block_size} + 1 tokens"
        )
    return stream[: count * block_size + 1].unfold(0, block_size + 1, block_size)


def lm_documents(token_lists, eos_token_id, max_length):
    """Each line's ids plus `eos_token_id` as a document of at most `max_length` tokens, an empty line
    (only the end token) left out. Returns a list of id lists.

    A longer line is cut into pieces of at most `max_length` tokens that share their edge token, as
    `lm_blocks`' blocks do: a piece's last token is the next one's first, so every token of the line
    but its first is predicted exactly once, and every piece (2 tokens or more) predicts at least one.
    A `max_length` below 2 predicts nothing and raises ValueError (the caller names the option).
    """
    if max_length < 2:
        raise ValueError(f"a document of at most {max_length} token predicts nothing: documents need at least 2")
    documents = []
    for tokens in token_lists:
        if not tokens:
            continue
        ids = [*tokens, eos_token_id]
        documents.extend(ids[start : start + max_length] for start in range(0, len(ids) - 1, max_length - 1))
    return documents


def pack_documents(lengths, row_length):
    """Best-fit decreasing: the documents of token counts `lengths` (each 1 to `row_length`) grouped into
    rows of at most `row_length` tokens, few rows and little space left in them; every document whole.

    Longest first, each document goes to the row with the least free space it fits in (a new row when
    none has room).  Returns the rows as lists of document indices.  Deterministic: equal lengths keep
    their order.
    """
    outside = next((i for i, length in enumerate(lengths) if not 1 <= length <= row_length), None)
    if outside is not None:
        raise ValueError(f"document {outside} has {lengths[outside]} tokens: each must hold 1 to {row_length}")
    rows, rows_by_space = [], [[] for _ in range(row_length + 1)]  # rows_by_space[s]: rows with s tokens free
    for index in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        length = lengths[index]
        space = next((s for s in range(length, row_length + 1) if rows_by_space[s]), None)
        if space is None:
            row, space = len(rows), row_length
            rows.append([])
        else:
            row = rows_by_space[space].pop()
        rows[row].append(index)
        rows_by_space[space - length].append(row)
    return rows


class PackedLMCollator:
    """Rows of whole documents (each row a list of token id lists, at most `row_length` tokens) as a
    (B, row_length) batch without attention mask: `position_ids` restart at 0 at each document, and
    `labels` are each token's next token within its document, -100 at a document's last token.

    A row's free tail holds `pad_token_id` tokens as one more document (positions from 0, labels -100):
    it comes after every real token, so a causal model's real tokens never read it, and GPT-2 and our
    models alike read the documents from `position_ids` (transformers finds packed sequences there when
    no attention mask is given).
    """

    def __init__(self, pad_token_id, row_length):
        self.pad_token_id = pad_token_id
        self.row_length = row_length

    def __call__(self, rows):
        shape = (len(rows), self.row_length)
        input_ids = torch.full(shape, self.pad_token_id, dtype=torch.long)
        labels = torch.full(shape, -100, dtype=torch.long)
        position_ids = torch.zeros(shape, dtype=torch.long)
        for row, documents in enumerate(rows):
            start = 0
            for document in documents:
                end = start + len(document)
                input_ids[row, start:end] = torch.as_tensor(document)
                labels[row, start : end - 1] = torch.as_tensor(document[1:])
                position_ids[row, start:end] = torch.arange(len(document))
                start = end
            position_ids[row, start:] = torch.arange(self.row_length - start)
        return {"input_ids": input_ids, "position_ids": position_ids, "labels": labels}


def collate_lm(blocks):
    """Inputs and next-token labels of a list of (block_size + 1) blocks."""
    blocks = torch.stack(blocks)
    return {"input_ids": blocks[:, :-1], "labels": blocks[:, 1:]}
