"""Train an abstractive summarization model from scratch with Accelerate, then report ROUGE and summarize.

    python examples/summarization/train.py --preset cnn-dm --output_dir runs/talk-cnn-dm

trains a TaLK encoder-decoder of the papers' CNN-DailyMail size on the Hub dataset
`abisee/cnn_dailymail` (configuration 3.0.0, columns `article` and `highlights`): a BPE tokenizer
trained on the training pairs, articles cut to `--max_source_tokens` (400, as the papers), batches
of `--max_tokens` tokens with label smoothing, validation loss and ROUGE-1/2/L/Lsum (rouge_score) of
beam-search summaries every `--eval_every` steps, best/ (highest validation ROUGE-Lsum) and last/
checkpoints, and at the end the best checkpoint reloaded through `AutoModelForSeq2SeqLM` for test
ROUGE and a few example summaries. The decoding is the papers': beam 4, no repeated trigram, a length
penalty and a minimum and maximum summary length, all options.

`--model_type dynamic_conv | light_conv | transformer` trains the others (`transformer`: the same-size
Transformer baseline); `--preset small` (the default) fits a CPU, `cnn-dm-deep` is the papers' deep
model. `--dataset_name EdinburghNLP/xsum` takes XSum (its columns `document` and `summary`), and
`--data_dir` or `--train_file` / `--validation_file` / `--test_file` local data (documents.py says
which files). Time budgets, `--resume`, several processes and the run folder work as in
translation/train.py; examples/README.md has the rest.
"""

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/, for `common` and `summarization`

import torch  # noqa: E402
from common import checkpoints, hub, loop, optimizer_steps, option_checks, options, records, run_folder, signals  # noqa: E402
from common.batching import TranslationCollator  # noqa: E402
from common.data import split_name  # noqa: E402
from common.losses import token_loss  # noqa: E402
from common.messages import fail  # noqa: E402
from common.models import build_model  # noqa: E402
from common.seq2seq_eval import evaluation_loader, loss_and_texts  # noqa: E402
from summarization import documents  # noqa: E402
from transformers import AutoModelForSeq2SeqLM  # noqa: E402

import talk_hf  # noqa: E402,F401  (registers our models with the Auto classes)

try:
    from rouge_score import rouge_scorer
except ImportError:
    fail("ROUGE needs the rouge_score package: pip install rouge_score (or pip install -e '.[examples]')")

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")
SAMPLES = 2  # test documents summarized in the report


def argument_parser():
    parser = options.argument_parser(__doc__)
    cnn_dm_config, document, summary = documents.dataset_defaults("abisee/cnn_dailymail")
    options.add_data_options(parser, dataset_name="abisee/cnn_dailymail", dataset_config=cnn_dm_config)
    group = parser.add_argument_group("summarization data", documents.describe_known())
    group.add_argument("--document_column", default=document)
    group.add_argument("--summary_column", default=summary, help="one sentence per line for ROUGE-Lsum")
    for key in documents.SPLITS:
        group.add_argument(
            documents.file_option(key),
            help=f"a local .jsonl, .csv or .tsv file (plain or .gz) as the {key} split, instead of --data_dir or "
            "--dataset_name" + (" (needs --validation_file)" if key == "train" else ""),
        )
    group.add_argument("--max_source_tokens", type=int, default=400, help="documents are cut to this many tokens")
    group.add_argument("--max_target_tokens", type=int, default=256, help="a longer summary stops the start, or is cut")
    group.add_argument(
        "--truncate_summaries",
        action="store_true",
        help="cut summaries longer than --max_target_tokens (the start prints how many) instead of stopping",
    )
    group.add_argument(
        "--skip_blank_pairs",
        action="store_true",
        help="leave out records whose document or summary is blank (the start prints how many) instead of stopping",
    )
    decoding = parser.add_argument_group("decoding (the defaults: fairseq's CNN-DM settings for BART)")
    decoding.add_argument("--num_beams", type=int, default=4, help="beam size for ROUGE")
    decoding.add_argument(
        "--valid_num_beams", type=int, help="beam size for the validation ROUGE during training (default: --num_beams)"
    )
    decoding.add_argument("--no_repeat_ngram_size", type=int, default=3, help="no n-gram twice in a summary; 0: off")
    decoding.add_argument("--length_penalty", type=float, default=2.0, help="beam scores / length**this")
    decoding.add_argument("--min_summary_tokens", type=int, default=55, help="the shortest summary generated")
    decoding.add_argument("--max_summary_tokens", type=int, default=140, help="the longest summary generated")
    options.add_tokenizer_options(parser, kind="bpe", vocab_size=30000, min_frequency=2)
    options.add_model_options(parser, encoder_decoder=True)
    options.add_training_options(
        parser,
        lr=5e-4,
        max_tokens=4096,
        schedule="inverse_sqrt",
        warmup_steps=4000,
        label_smoothing=0.1,
        metric="ROUGE",
    )
    return parser


def parse_args(argv=None):
    parser = argument_parser()
    # The defaults of the configuration and the columns follow the dataset: read its name first.
    config, document, summary = documents.dataset_defaults(parser.parse_known_args(argv)[0].dataset_name)
    parser.set_defaults(dataset_config=config, document_column=document, summary_column=summary)
    args = option_checks.parse_args(parser, argv)
    option_checks.check_at_least(args, 2, "max_source_tokens", "max_target_tokens")  # a token and the end
    option_checks.check_at_least(args, 1, "num_beams", "valid_num_beams", "max_summary_tokens")
    option_checks.check_at_least(args, 0, "no_repeat_ngram_size", "min_summary_tokens")
    if args.min_summary_tokens > args.max_summary_tokens:
        fail(
            f"--min_summary_tokens {args.min_summary_tokens} is above --max_summary_tokens {args.max_summary_tokens}: "
            "lower the one or raise the other"
        )
    if not math.isfinite(args.length_penalty):
        fail(f"--length_penalty must be a finite number, not {args.length_penalty}")
    longest = max(args.max_source_tokens, args.max_target_tokens)
    if args.max_tokens < longest:  # so that every pair trained on fits in a batch
        fail(
            f"--max_tokens {args.max_tokens} is below the {longest} tokens of --max_source_tokens / --max_target_tokens: "
            "the longest training pair must fit in one batch of --max_tokens padded tokens; raise --max_tokens or "
            "lower the other"
        )
    check_file_options(args, parser)
    return args


def check_file_options(args, parser):
    """--train_file and --validation_file go together (and --test_file with them), and replace the data
    options: --data_dir and the split names of a dataset may not be given with them."""
    given = [documents.file_option(key) for key in documents.SPLITS if getattr(args, f"{key}_file") is not None]
    if not given:
        return
    if args.train_file is None or args.validation_file is None:
        fail(f"{' and '.join(given)} given, but local files need both --train_file and --validation_file")
    for name in ("data_dir", "dataset_name", "dataset_config", "train_split", "validation_split", "test_split"):
        if getattr(args, name) != parser.get_default(name):
            fail(
                f"--{name} chooses data of a folder or a Hub dataset, but {', '.join(given)} name the files to read: "
                f"drop --{name} (without --test_file there is no test split)"
            )


def training_texts(split):
    """The text a new tokenizer learns from: the documents and summaries of the training split."""
    return split.documents + split.summaries


def example_lengths(examples):
    """The token count that batches of the encoded pairs are sized by: the longer side's."""
    return [max(len(example["source"]), len(example["target"])) for example in examples]


def main(argv=None):
    signals.stop_on_terminal_stop()
    args = parse_args(argv)
    splits = documents.read_splits(args)
    # A fresh start makes its tokenizer and encodes the data before the run folder is touched, so that
    # data they refuse leaves no run behind; a resume reads the run's tokenizer once it holds the folder.
    tokenizer = None if args.resume else run_folder.new_tokenizer(args, training_texts(splits["train"]), add_eos=True)
    encoded = None if args.resume else documents.encode_splits(tokenizer, splits, args)
    if encoded is not None:
        optimizer_steps.check_batches(args, example_lengths(encoded["train"].examples))
    train = {"documents": splits["train"].documents, "summaries": splits["train"].summaries}
    with loop.training_run(args, train_data=train) as accelerator:
        tokenizer = run_folder.run_tokenizer(accelerator, args, tokenizer)
        encoded = encoded or documents.encode_splits(tokenizer, splits, args)
        train_model(accelerator, args, tokenizer, splits, encoded)
        report(accelerator, args, splits["test"], encoded["test"])


def describe_encoding(split, encoded, args):
    """`where: N pairs (M skipped), K documents cut to 400 tokens`: what the start made of a split."""
    notes = [f"{len(encoded.examples)} pairs"]
    if split.skipped:
        notes.append(f"{split.skipped} records with a blank document or summary left out")
    notes.append(f"{encoded.cut_documents} documents cut to {args.max_source_tokens} tokens")
    if encoded.cut_summaries:
        notes.append(f"{encoded.cut_summaries} summaries cut to {args.max_target_tokens} tokens")
    return f"{split.where}: {', '.join(notes)}"


def train_model(accelerator, args, tokenizer, splits, encoded):
    """Model (naming its task: `hub.record_task`) and training (`loop.train`) on the encoded training pairs,
    evaluated on the validation split."""
    for key, split in splits.items():
        if split is not None:
            accelerator.print(describe_encoding(split, encoded[key], args))
    accelerator.print(f"vocabulary {len(tokenizer)}")
    positions = max(1024, args.max_source_tokens, args.max_target_tokens, args.max_summary_tokens + 1)  # the baseline's
    sizes = options.model_sizes(args)
    model = build_model(
        args.model_type, tokenizer, True, args.preset, positions, config_overrides=args.config_overrides, **sizes
    )
    config = model.config
    # The card of every upload names the task (`pipeline_tag: summarization`), with the test ROUGE's decoding.
    hub.record_task(config, "summarization", decoding(args, args.num_beams))

    def loss_fn(model, batch):  # no generation cache: our decoders' would cost time in every step
        inputs = dict(decoder_input_ids=batch["decoder_input_ids"], use_cache=False)
        logits = model(batch["input_ids"], batch["attention_mask"], **inputs).logits
        return token_loss(logits, batch["labels"], args.label_smoothing)

    num_beams = args.valid_num_beams or args.num_beams
    evaluate = make_evaluate(
        accelerator, tokenizer, splits["validation"], encoded["validation"], config, args, num_beams
    )
    train = encoded["train"].examples
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
        metric="rougeLsum",
        maximize=True,
    )


def decoding(args, num_beams):
    """The settings of ``generate`` that summarize with `num_beams` beams and the decoding options of `args`
    (the length penalty only where there are beams to rank)."""
    beam_options = {"length_penalty": args.length_penalty} if num_beams > 1 else {}
    return {
        "num_beams": num_beams,
        "no_repeat_ngram_size": args.no_repeat_ngram_size,
        "min_new_tokens": args.min_summary_tokens,
        "max_new_tokens": args.max_summary_tokens,
        **beam_options,
    }


def summarize(model, tokenizer, input_ids, attention_mask, args, num_beams):
    """Beam-search summaries of a padded (B, S) batch of documents, as text (newlines kept), with the
    decoding options of `args` (`decoding`)."""
    output = model.generate(input_ids=input_ids, attention_mask=attention_mask, **decoding(args, num_beams))
    return tokenizer.batch_decode(output, skip_special_tokens=True)


def rouge(summaries, references):
    """{"rouge1", "rouge2", "rougeL", "rougeLsum"}: each the mean F1 (x 100) over the pairs of the lists
    of str `summaries` and `references`, by rouge_score with Porter stemming. rougeL compares each text
    as one token sequence; rougeLsum splits both into sentences at newlines and matches sentence against
    sentence (summary-level LCS), as ROUGE-1.5.5 scores CNN-DM's one-highlight-per-line summaries."""
    scorer = rouge_scorer.RougeScorer(ROUGE_TYPES, use_stemmer=True)
    totals = dict.fromkeys(ROUGE_TYPES, 0.0)
    for summary, reference in zip(summaries, references, strict=True):
        for name, score in scorer.score(reference, summary).items():
            totals[name] += score.fmeasure
    return {name: 100 * total / len(summaries) for name, total in totals.items()}


def make_evaluate(accelerator, tokenizer, split, encoded, config, args, num_beams, description="validation"):
    """evaluate(model) -> {"valid_loss", "valid_ppl", "rouge1", "rouge2", "rougeL", "rougeLsum"} on `split`
    (a `documents.Split`, whose whole summaries are the references) through its `encoded` examples,
    sharded over processes, with a progress bar named `description`."""
    collate = TranslationCollator(tokenizer.pad_token_id, config.decoder_start_token_id)
    loader = evaluation_loader(accelerator, encoded.examples, collate, args.eval_batch_size)

    def generate(model, input_ids, attention_mask):
        return summarize(model, tokenizer, input_ids, attention_mask, args, num_beams)

    def evaluate(model):
        losses, indices, summaries = loss_and_texts(
            accelerator, model, loader, generate, f"{description} (loss, ROUGE)"
        )
        return {**losses, **rouge(summaries, [split.summaries[i] for i in indices])}

    return evaluate


def report_split_name(args):
    """The test split as `records.report_test` names it: the file, or the split of the dataset."""
    if args.test_file is not None:
        return args.test_file
    return split_name(args.data_dir or args.dataset_name, args.test_split, args.dataset_config)


def report(accelerator, args, split, encoded):
    """Reload best/ (Auto classes): ROUGE on test `split` and its `encoded` examples (None: none), samples, upload."""
    best, tokenizer, model = checkpoints.load_best(accelerator, args.output_dir, AutoModelForSeq2SeqLM)
    if split is not None:
        with torch.no_grad():
            evaluate = make_evaluate(accelerator, tokenizer, split, encoded, model.config, args, args.num_beams, "test")
            read = len(split.records) + split.skipped  # blank pairs left out included
            records.report_test(accelerator, args, best, evaluate(model), report_split_name(args), read)
            samples = split.documents[:SAMPLES]
            batch = tokenizer(
                samples, truncation=True, max_length=args.max_source_tokens, padding=True, return_tensors="pt"
            ).to(accelerator.device)
            outputs = summarize(model, tokenizer, batch["input_ids"], batch["attention_mask"], args, args.num_beams)
        for document, output in zip(samples, outputs, strict=True):
            summary = output.replace("\n", "\n     ")  # a highlight per line, indented
            accelerator.print(f"  {document[:200]}...\n  -> {summary}")
    hub.upload(accelerator, args)


if __name__ == "__main__":
    main()
