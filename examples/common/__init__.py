"""Code shared by the example scripts: data, tokenizers, batching, models and the training loop.

The scripts put `examples/` on `sys.path` and import from here, so each script keeps only what is
particular to its task. Modules:

* `data`        -- read splits from local files, a `datasets` folder or a Hub dataset name
* `tokenizer`   -- train a BPE or word-level tokenizer and wrap it as a `PreTrainedTokenizerFast`
* `batching`    -- batches by token count (fairseq's max-tokens), the training loader, collators, LM blocks
* `models`      -- `build_model`: our models and same-size transformers baselines
* `options`     -- the command-line options every Accelerate script shares, and `fail`
* `option_checks` -- their checks: ranges, flags that go together, sizes that make a valid model
* `training_run` -- the run's Accelerator, in its locked output folder
* `optimizer_steps` -- whether the data fills an optimizer step, how many steps, AdamW and its schedule
* `loop`        -- the Accelerate training loop: `train`, `fit`, `train_step`
* `loop_settings` -- `Settings`: what `fit` reads of the command line, and the test hook that stops a run
* `losses`      -- the training loss, per-sequence NLL and the validation loss meter
* `checkpoints` -- `Progress`, saving last/ and best/ (with their files' hashes), resuming, reloading best/
* `training_state` -- state/: Accelerate's files, progress.json and the averaging snapshots, loaded so that
                   nothing in it runs code
* `averaging`   -- `--average_last`: the mean of the weights of the last evaluations
* `records`     -- log.jsonl (writing, reading back), the trackers and the progress bar, environment.json,
                   test_results.json
* `clock`       -- training time, which the time budget and the evaluation pace are measured on
* `signals`     -- terminal stops: they stop a script anywhere and cost the time budget nothing
* `threads`     -- the thread count of a CPU run: the cores other processes leave free, unless --threads
* `run_folder`  -- the output folder: one run at a time, a fresh start or a resume, the run's tokenizer
* `run_outputs` -- outputs.json, the manifest of what a run wrote: all that --overwrite_output_dir deletes
* `run_settings` -- args.json, and how a resume's settings compare with it
* `atomic_files` -- writes that a kill or a power cut leaves whole (beside the name, fsync, rename)
* `folder_saves` -- saving a folder of the run atomically; a failed save removes its copy, a full disk is named
* `file_checks` -- whether a saved file reads back whole, checked without running anything it holds
* `messages`    -- `warn`, and the first line of an error
* `hub`         -- `--push_to_hub`: best/ with our modeling code
* `hf_trainer`  -- what the `Trainer` scripts share
"""
