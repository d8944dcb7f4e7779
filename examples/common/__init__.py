"""Code shared by the example scripts: data, tokenizers, batching, models and the training loop.

The scripts put `examples/` on `sys.path` and import from here, so each script keeps only what is
particular to its task. Modules:

* `data`       -- read splits from local files, a `datasets` folder or a Hub dataset name
* `tokenizer`  -- train a BPE or word-level tokenizer and wrap it as a `PreTrainedTokenizerFast`
* `batching`   -- batches by token count (fairseq's max-tokens), collators, LM blocks
* `models`     -- `build_model`: our models and same-size transformers baselines
* `loop`       -- the Accelerate training loop: accumulation, clipping, evaluation, checkpoints, resume
* `run_folder` -- the output folder: one run at a time, fresh start or resume, the run's settings and
                  tokenizer, loading its saved state with errors that name the damaged file
* `options`    -- the command-line options every Accelerate script shares
* `hf_trainer` -- what the `Trainer` scripts share
"""
