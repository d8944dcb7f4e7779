"""Train a causal language model from scratch with Accelerate, then report perplexity and sample.

    python examples/language-modeling/train.py --data_dir ../shared/data/wikitext-2 --output_dir runs/talk-wt2

runs the whole job: a tokenizer trained on the training text (word-level by default, the classic
WikiText setup; `--tokenizer_kind bpe` for raw text), the text cut into blocks of `--block_size`
tokens (`line.split() + [eos]` per line, as in the standard WikiText token counts), training with
`--max_tokens` tokens per micro-batch, validation perplexity every `--eval_every` steps (with a
time budget, `--max_train_minutes`, every `--eval_every_minutes` of training time), `best/`
and `last/` checkpoints, and at the end the best checkpoint reloaded through
`AutoModelForCausalLM` for test perplexity and a sampled continuation. The same line under
`accelerate launch` trains on several processes; `--resume` continues exactly. Without
`--data_dir` the data comes from the Hub (`Salesforce/wikitext`, `wikitext-2-v1`).
`--model_type transformer` trains the same-size GPT-2 baseline.

`--packing` trains on whole documents instead of blocks cut from one stream: each line (plus its end
token) is a document, cut only when longer than `--block_size` (into pieces that share their edge token,
so that every piece predicts a token), and the documents are packed into rows of `--block_size` tokens (`batching.pack_documents`) with their edges kept (`position_ids` restarting
at 0): no token reads or predicts across two documents. Evaluation keeps the blocks, so perplexities
stay comparable with runs without it.
"""

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/, for `common`

import torch  # noqa: E402
from common import checkpoints, hub, loop, optimizer_steps, option_checks, options, records, run_folder, signals  # noqa: E402
from common.batching import PackedLMCollator, collate_lm, lm_blocks, lm_documents, pack_documents  # noqa: E402
from common.data import load_splits, split_name  # noqa: E402
from common.losses import LossMeter, sequence_nll, token_loss  # noqa: E402
from common.messages import fail  # noqa: E402
from common.models import build_model  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

import talk_hf  # noqa: E402,F401  (registers our models with the Auto classes)

# The learning rate the search chose at each block size it searched (examples/results/recipe-search:
# rounds lm and lm-long), shared by our models and GPT-2.
SEARCHED_LR = {256: 1e-3, 2048: 2e-3}


def default_lr(block_size):
    """The default ``--lr`` for ``block_size`` tokens per block: the rate searched at the nearest
    searched block size, distances taken on a log scale (256 to 724 -> 1e-3; 725 and longer -> 2e-3)."""
    nearest = min(SEARCHED_LR, key=lambda size: abs(math.log(block_size / size)))
    return SEARCHED_LR[nearest]


def parse_args(argv=None):
    parser = options.argument_parser(__doc__)
    options.add_data_options(parser, dataset_name="Salesforce/wikitext", dataset_config="wikitext-2-v1")
    parser.add_argument("--block_size", type=int, default=256, help="tokens per training/evaluation sequence")
    parser.add_argument(
        "--packing",
        action="store_true",
        help="train on rows of --block_size tokens packed with whole lines (documents), their edges kept",
    )
    parser.add_argument("--prompt", default="The game", help="start of the sample generated at the end")
    options.add_tokenizer_options(parser, kind="word", vocab_size=40000, min_frequency=1)
    options.add_model_options(parser, encoder_decoder=False)
    # The recipe chosen on WikiText-2 validation perplexity for CPU budgets (examples/results/recipe-search).
    options.add_training_options(
        parser,
        lr=None,
        lr_help="(default: the searched rate of the nearer searched block size on a log scale: "
        + ", ".join(f"{rate:g} at {size:,}" for size, rate in SEARCHED_LR.items())
        + " tokens per block)",
        max_tokens=1024,
        schedule="inverse_sqrt",
        warmup_steps=50,
        label_smoothing=0.0,
        metric="valid_ppl",
    )
    args = option_checks.parse_args(parser, argv)
    option_checks.check_at_least(args, 1, "block_size")
    if args.packing and args.block_size < 2:  # a one-token document predicts nothing
        fail(f"--packing needs --block_size >= 2 (a document of one token predicts nothing), not {args.block_size}")
    if args.lr is None:  # resolved here, so args.json records the rate that ran
        args.lr = default_lr(args.block_size)
    if args.max_tokens < args.block_size:
        fail(f"--max_tokens {args.max_tokens} holds no block of --block_size {args.block_size}")
    return args


def make_blocks(args, tokenizer, texts):
    """The blocks (`lm_blocks`: (N, block_size + 1) token ids) of each split's text in `texts`
    (`data.load_splits`'s), None for a split that is None; text too short for one block stops the
    script with an error naming the split and `--block_size`. With `--packing`, the training split is
    rows of documents instead (`packed_rows`)."""
    blocks = {}
    for key, columns in texts.items():
        if columns is None:
            blocks[key] = None
            continue
        if key == "train" and args.packing:
            blocks[key] = packed_rows(tokenizer, columns["text"], args.block_size)
            continue
        try:
            blocks[key] = lm_blocks(tokenizer(columns["text"])["input_ids"], tokenizer.eos_token_id, args.block_size)
        except ValueError as error:
            limit = "--max_train_samples" if key == "train" else "--max_eval_samples"
            fail(
                f"--{key}_split {getattr(args, f'{key}_split')}: its text is too short for --block_size "
                f"{args.block_size}: {error}. Lower --block_size, or give more text ({limit})"
            )
    return blocks


def packed_rows(tokenizer, lines, block_size):
    """Rows of at most `block_size` tokens, each a list of whole documents (token id lists): every
    non-empty line plus the end token, cut into pieces only where longer than `block_size`
    (`lm_documents`: every piece predicts a token, so every row and micro-batch does)."""
    documents = lm_documents(tokenizer(lines)["input_ids"], tokenizer.eos_token_id, block_size)
    return [[documents[i] for i in row] for row in pack_documents([len(d) for d in documents], block_size)]


# Evaluation runs the model on slices of each batch so that one slice's logits stay under this many
# elements (512 MiB in float32): a whole batch of 64 blocks x 256 tokens x a 33k vocabulary is 2.2 GB.
EVAL_LOGITS_ELEMENTS = 2**27


def make_evaluate(accelerator, blocks, args, description="validation"):
    """evaluate(model) -> {"valid_loss", "valid_ppl"} on `blocks`, sharded over processes, with a
    progress bar named `description` (`records.evaluation_bar`)."""
    loader = accelerator.prepare(
        torch.utils.data.DataLoader(list(blocks), batch_size=args.eval_batch_size, collate_fn=collate_lm)
    )

    def evaluate(model):
        meter = LossMeter(accelerator)
        vocab_size = accelerator.unwrap_model(model).config.vocab_size
        for batch in records.evaluation_bar(accelerator, loader, description):
            input_ids, labels = batch["input_ids"], batch["labels"]
            rows = max(1, EVAL_LOGITS_ELEMENTS // (input_ids.shape[1] * vocab_size))
            nll = [
                sequence_nll(model(ids).logits, targets)
                for ids, targets in zip(input_ids.split(rows), labels.split(rows), strict=True)
            ]
            meter.add(torch.cat(nll), labels)
        return meter.result()

    return evaluate


def main(argv=None):
    signals.stop_on_terminal_stop()
    args = parse_args(argv)
    texts = load_splits(args, ["text"])  # read and checked before anything is written
    # A fresh start makes its tokenizer and blocks before the run folder is touched too, so that text
    # they refuse leaves no run behind; a resume reads the run's tokenizer once it holds the folder.
    tokenizer = None if args.resume else run_folder.new_tokenizer(args, texts["train"]["text"])
    blocks = None if args.resume else make_blocks(args, tokenizer, texts)
    if blocks is not None:
        optimizer_steps.check_batches(args, [args.block_size] * len(blocks["train"]))
    with loop.training_run(args, train_data=texts["train"]) as accelerator:
        tokenizer = run_folder.run_tokenizer(accelerator, args, tokenizer)
        blocks = blocks or make_blocks(args, tokenizer, texts)
        train_model(accelerator, args, tokenizer, blocks)
        report(accelerator, args, blocks["test"], texts["test"])


def train_model(accelerator, args, tokenizer, blocks):
    """Model and training (`loop.train`) on `blocks["train"]`, evaluated on `blocks["validation"]`."""
    train = blocks["train"]
    if args.packing:
        tokens = sum(len(document) for row in train for document in row)
        accelerator.print(
            f"{len(train)} training rows of {args.block_size} tokens packed with {sum(map(len, train))} documents "
            f"({1 - tokens / (len(train) * args.block_size):.1%} padding), vocabulary {len(tokenizer)}"
        )
    else:
        accelerator.print(f"{len(train)} training blocks of {args.block_size} tokens, vocabulary {len(tokenizer)}")
    positions, sizes = max(1024, args.block_size), options.model_sizes(args)
    model = build_model(
        args.model_type, tokenizer, False, args.preset, positions, config_overrides=args.config_overrides, **sizes
    )

    def loss_fn(model, batch):  # no generation cache: our decoders' would cost time in every step
        positions = {"position_ids": batch["position_ids"]} if args.packing else {}
        logits = model(batch["input_ids"], use_cache=False, **positions).logits
        return token_loss(logits, batch["labels"], args.label_smoothing)

    loop.train(
        accelerator,
        args,
        model=model,
        examples=list(train),
        lengths=[args.block_size] * len(train),
        collate=PackedLMCollator(tokenizer.pad_token_id, args.block_size) if args.packing else collate_lm,
        loss_fn=loss_fn,
        evaluate=make_evaluate(accelerator, blocks["validation"], args),
        tokenizer=tokenizer,
        metric="valid_ppl",
        maximize=False,
    )


def report(accelerator, args, test_blocks, test_text):
    """Reload best/ through the Auto classes: perplexity on `test_blocks` (None: no test split), the
    blocks of the records `test_text` ({"text": [str, ...]}), a sample, the optional upload."""
    best, tokenizer, model = checkpoints.load_best(accelerator, args.output_dir, AutoModelForCausalLM)
    if test_blocks is not None:
        with torch.no_grad():
            metrics = make_evaluate(accelerator, test_blocks, args, "test")(model)
        split = split_name(args.data_dir or args.dataset_name, args.test_split, args.dataset_config)
        records.report_test(accelerator, args, best, metrics, split, len(test_text["text"]))
    prompt = tokenizer(args.prompt, return_tensors="pt").to(accelerator.device)
    with torch.no_grad():
        sample = model.generate(
            **prompt, do_sample=True, top_k=40, max_new_tokens=40, pad_token_id=tokenizer.pad_token_id
        )
    accelerator.print(f"sample: {tokenizer.decode(sample[0], skip_special_tokens=True)}")
    hub.upload(accelerator, args)


if __name__ == "__main__":
    main()
