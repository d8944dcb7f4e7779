"""Train a translation model from scratch with Accelerate, then report BLEU and translate.

    python examples/translation/train.py --output_dir runs/talk-multi30k --max_train_minutes 10 --eval_every_minutes 5

is the main job: a TaLK model (`--preset small`) trained De->En on Multi30k (the Hub dataset
`bentrevett/multi30k`; `--data_dir ../shared/data/multi30k` reads the offline data pack instead) for
10 minutes of training time, with validation loss and BLEU (sacrebleu, beam search) after every 5
minutes of it, then the best checkpoint reloaded through `AutoModelForSeq2SeqLM` for test BLEU and
a few example translations. Along the way: a joint BPE tokenizer trained on the training pairs,
batches of `--max_tokens` tokens with label smoothing, `best/` and `last/` checkpoints. Without a
time budget a run trains `--epochs` (or `--max_steps`) and evaluates every `--eval_every` steps.
The same line under `accelerate launch` trains on several processes or GPUs (one visible GPU is
used without it); `--resume` continues a run exactly where its last saved state left it.
`--model_type transformer` trains the same-size Marian baseline. The defaults are the recipe tuned
for CPU budgets (examples/results/recipe-search); examples/README.md has the rest.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/, for `common`

import sacrebleu  # noqa: E402
import torch  # noqa: E402
from common import checkpoints, hub, loop, optimizer_steps, option_checks, options, records, run_folder, signals  # noqa: E402
from common.batching import TranslationCollator  # noqa: E402
from common.data import load_splits, split_name  # noqa: E402
from common.losses import token_loss  # noqa: E402
from common.messages import fail  # noqa: E402
from common.models import build_model  # noqa: E402
from common.seq2seq_eval import evaluation_loader, loss_and_texts  # noqa: E402
from transformers import AutoModelForSeq2SeqLM  # noqa: E402

import talk_hf  # noqa: E402,F401  (registers our models with the Auto classes)


def parse_args(argv=None):
    parser = options.argument_parser(__doc__)
    options.add_data_options(parser, dataset_name="bentrevett/multi30k")
    parser.add_argument("--source_lang", default="de")
    parser.add_argument("--target_lang", default="en")
    parser.add_argument(
        "--max_length",
        type=int,
        default=128,
        help="longer training pairs (in tokens, either side) are left out (the start counts what is kept); at most "
        "--max_tokens",
    )
    parser.add_argument("--num_beams", type=int, default=4, help="beam size for BLEU")
    parser.add_argument(
        "--valid_num_beams", type=int, help="beam size for the validation BLEU during training (default: --num_beams)"
    )
    options.add_tokenizer_options(parser, kind="bpe", vocab_size=8000, min_frequency=2)
    options.add_model_options(parser, encoder_decoder=True)
    # The recipe chosen on Multi30k validation BLEU for CPU budgets (examples/results/recipe-search).
    options.add_training_options(
        parser, lr=1e-3, max_tokens=512, schedule="inverse_sqrt", warmup_steps=150, label_smoothing=0.1, metric="bleu"
    )
    args = option_checks.parse_args(parser, argv)
    option_checks.check_at_least(args, 1, "max_length", "num_beams", "valid_num_beams")
    if args.source_lang == args.target_lang:
        fail(f"--source_lang and --target_lang are both {args.source_lang!r}: translation needs two languages")
    if args.max_tokens < args.max_length:  # so that every pair trained on fits in a batch
        fail(
            f"--max_tokens {args.max_tokens} is below --max_length {args.max_length}: a training pair of up to "
            "--max_length tokens must fit in one batch of --max_tokens padded tokens; raise --max_tokens or lower "
            "--max_length"
        )
    return args


def encode(tokenizer, pairs, max_length=None):
    """Examples {"source", "target", "index"} of token ids; pairs longer than `max_length` are dropped."""
    sources = tokenizer(pairs["source"])["input_ids"]
    targets = tokenizer(pairs["target"])["input_ids"]
    return [
        {"source": s, "target": t, "index": i}
        for i, (s, t) in enumerate(zip(sources, targets, strict=True))
        if max_length is None or max(len(s), len(t)) <= max_length
    ]


def translate(model, tokenizer, input_ids, attention_mask, num_beams):
    """Beam-search translations of a padded batch, as text. Length limit: 1.2 x source + 10."""
    output = model.generate(
        input_ids=input_ids,
        attention_mask=attention_mask,
        num_beams=num_beams,
        max_new_tokens=int(1.2 * input_ids.shape[1]) + 10,
    )
    return tokenizer.batch_decode(output, skip_special_tokens=True)


def make_evaluate(accelerator, tokenizer, pairs, config, args, num_beams, description="validation"):
    """evaluate(model) -> {"valid_loss", "valid_ppl", "bleu"} on `pairs`, sharded over processes, with a
    progress bar named `description` (`records.evaluation_bar`).

    BLEU is sacrebleu's corpus BLEU of `num_beams`-beam translations against the reference text.
    """
    collate = TranslationCollator(tokenizer.pad_token_id, config.decoder_start_token_id)
    loader = evaluation_loader(accelerator, encode(tokenizer, pairs), collate, args.eval_batch_size)

    def generate(model, input_ids, attention_mask):
        return translate(model, tokenizer, input_ids, attention_mask, num_beams)

    def evaluate(model):
        losses, indices, hypotheses = loss_and_texts(
            accelerator, model, loader, generate, f"{description} (loss, BLEU)"
        )
        references = [pairs["target"][i] for i in indices]
        return {**losses, "bleu": sacrebleu.corpus_bleu(hypotheses, [references]).score}

    return evaluate


def read_pairs(args):
    """The text pairs {"source": [str, ...], "target": [str, ...]} of the training, validation and test
    splits (`data.load_splits`: read and checked before anything is written)."""
    splits = load_splits(args, [args.source_lang, args.target_lang])
    return {
        key: None if columns is None else {"source": columns[args.source_lang], "target": columns[args.target_lang]}
        for key, columns in splits.items()
    }


def training_examples(args, tokenizer, pairs):
    """The training pairs as token ids (`encode`), those longer than `--max_length` left out."""
    train = encode(tokenizer, pairs, args.max_length)
    if not train:
        fail(f"no training pair is at most --max_length {args.max_length} tokens long: raise it")
    return train


def main(argv=None):
    signals.stop_on_terminal_stop()
    args = parse_args(argv)
    pairs = read_pairs(args)
    # A fresh start makes its tokenizer and training examples before the run folder is touched too, so
    # that text they refuse leaves no run behind; a resume reads the run's tokenizer once it holds the folder.
    tokenizer = None if args.resume else run_folder.new_tokenizer(args, training_texts(pairs), add_eos=True)
    train = None if args.resume else training_examples(args, tokenizer, pairs["train"])
    if train is not None:
        optimizer_steps.check_batches(args, example_lengths(train))
    with loop.training_run(args, train_data=pairs["train"]) as accelerator:
        tokenizer = run_folder.run_tokenizer(accelerator, args, tokenizer)
        train = train or training_examples(args, tokenizer, pairs["train"])
        train_model(accelerator, args, tokenizer, train, pairs)
        report(accelerator, args, pairs["test"])


def example_lengths(train):
    """The token count that batches of the encoded pairs `train` are sized by: the longer side's."""
    return [max(len(example["source"]), len(example["target"])) for example in train]


def training_texts(pairs):
    """The text a new tokenizer learns from: both sides of the training pairs (a joint vocabulary)."""
    return pairs["train"]["source"] + pairs["train"]["target"]


def train_model(accelerator, args, tokenizer, train, pairs):
    """Model (naming its task: `hub.record_task`) and training (`loop.train`) on the encoded training pairs
    `train`, evaluated on `pairs["validation"]`."""
    accelerator.print(f"{len(train)} training pairs (of {len(pairs['train']['source'])}), vocabulary {len(tokenizer)}")
    sizes = options.model_sizes(args)
    model = build_model(args.model_type, tokenizer, True, args.preset, config_overrides=args.config_overrides, **sizes)
    config = model.config
    # The card of every upload names the task (`pipeline_tag: translation`), with the test BLEU's beam size.
    hub.record_task(config, hub.translation_task(args.source_lang, args.target_lang), {"num_beams": args.num_beams})

    def loss_fn(model, batch):  # no generation cache: our decoders' would cost time in every step
        inputs = dict(decoder_input_ids=batch["decoder_input_ids"], use_cache=False)
        logits = model(batch["input_ids"], batch["attention_mask"], **inputs).logits
        return token_loss(logits, batch["labels"], args.label_smoothing)

    num_beams = args.valid_num_beams or args.num_beams
    evaluate = make_evaluate(accelerator, tokenizer, pairs["validation"], config, args, num_beams)
    loop.train(
        accelerator,
        args,
        model=model,
        examples=train,
        lengths=example_lengths(train),
        collate=TranslationCollator(tokenizer.pad_token_id, config.decoder_start_token_id),
        loss_fn=loss_fn,
        evaluate=evaluate,
        tokenizer=tokenizer,
        metric="bleu",
        maximize=True,
    )


def report(accelerator, args, pairs):
    """Reload best/ through the Auto classes: BLEU on the test `pairs` (None: no test split), a few
    translations, the optional upload."""
    best, tokenizer, model = checkpoints.load_best(accelerator, args.output_dir, AutoModelForSeq2SeqLM)
    if pairs is not None:
        with torch.no_grad():
            metrics = make_evaluate(accelerator, tokenizer, pairs, model.config, args, args.num_beams, "test")(model)
        split = split_name(args.data_dir or args.dataset_name, args.test_split, args.dataset_config)
        records.report_test(accelerator, args, best, metrics, split, len(pairs["source"]))
        samples = pairs["source"][:3]
        batch = tokenizer(samples, return_tensors="pt", padding=True).to(accelerator.device)
        with torch.no_grad():
            outputs = translate(model, tokenizer, batch["input_ids"], batch["attention_mask"], args.num_beams)
        for source, output in zip(samples, outputs, strict=True):
            accelerator.print(f"  {source}\n  -> {output}")
    hub.upload(accelerator, args)


if __name__ == "__main__":
    main()
