"""Code shared by the example scripts: data, tokenizers, batching, models and the training loop.

The scripts put `examples/` on `sys.path` and import from here, so each script keeps only what is
particular to its task. Modules:

* `data`        -- read splits from local files, a `datasets` folder or a Hub dataset name
* `tokenizer`   -- train a BPE or word-level tokenizer and wrap it as a `PreTrainedTokenizerFast`
* `batching`    -- batches by token count (fairseq's max-tokens), the training loader, collators, LM blocks
* `models`      -- `build_model`: our models and same-size transformers baselines
* `options`     -- the command-line options every Accelerate script shares, and their checks
* `loop`        -- the Accelerate training loop: `training_run`, `train`, `fit`, `train_step`
* `losses`      -- the training loss, per-sequence NLL and the validation loss meter
* `checkpoints` -- `Progress`, saving last/, state/ and best/ atomically, resuming, reloading best/
* `averaging`   -- `--average_last`: the mean of the weights of the last evaluations
* `records`     -- log.jsonl (with the trackers and the progress bar), environment.json, test_results.json
* `clock`       -- training time, which the time budget and the evaluation pace are measured on
* `signals`     -- terminal stops: they stop a script anywhere and cost the time budget nothing
* `run_folder`  -- the output folder: one run at a time, fresh start or resume, the run's settings and
                   tokenizer, loading its saved state with errors that name the damaged file
* `hub`         -- `--push_to_hub`: best/ with our modeling code
* `hf_trainer`  -- what the `Trainer` scripts share
"""
