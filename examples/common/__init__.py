"""Code shared by the example scripts: data, tokenizers, batching, models and the training run.

The scripts put `examples/` on `sys.path` and import from here, so each script keeps only what is
particular to its task (its data columns, loss and evaluation).

A run of translation/train.py, summarization/train.py or language-modeling/train.py goes through the
modules in this order:

1. Before anything is written: `signals.stop_on_terminal_stop`; the command line (`options`, checked
   by `option_checks`); the splits (`data`); on a fresh start the tokenizer
   (`run_folder.new_tokenizer` of `tokenizer`) and whether the data fills an optimizer step
   (`optimizer_steps.check_batches`).
2. `loop.training_run`: the Accelerator, in the output folder that `run_folder` locks and checks
   for a fresh start or a resume (`run_settings`: args.json; `run_outputs`: outputs.json), with the
   thread count of `threads` and `records.write_environment`.
3. The model (`models.build_model`), then `loop.train`: the loader (`batching`), AdamW and its
   schedule (`optimizer_steps`), `pacing.Settings`; `loop.fit` resumes the saved state
   (`checkpoints.resume`, which reads it through `training_state`), then repeats a step:
   a. `loop.train_step`: the script's loss (`losses.token_loss`) over the step's micro-batches,
      backward, clipping, the optimizer step; its time is a lap of `pacing.TrainingClock`, which
      a terminal stop does not run (`signals.stops_off_the_clock`);
   b. `checkpoints.Progress.advance`, a line in log.jsonl (`records.TrainingLog`), and a warning
      when the steps slow down (`pacing.SlowdownDetector`);
   c. when `pacing.Settings` says so: the script's evaluation (`losses.LossMeter`; an encoder-decoder's
      generated texts through `seq2seq_eval`), best/ when it is better (`checkpoints.Saver`), a
      snapshot for `averaging`; last/ and state/ (`Saver`, `training_state`); the stop after
      `max_steps` or the time budget.
   Every save goes through `folder_saves.save_folder` (a failed one removes its copy, a full disk
   is named) and `atomic_files` (fsync, rename into place); `file_checks` checks what a resume or
   the test reads back, without running anything it holds.
4. The end: best/ reloaded (`checkpoints.load_best`) for the test split (`records.report_test`),
   and `hub.upload` with --push_to_hub.

Modules, one job each:

* `data`        -- read splits from local files, a `datasets` folder or a Hub dataset name
* `tokenizer`   -- train a BPE or word-level tokenizer and wrap it as a `PreTrainedTokenizerFast`
* `batching`    -- batches by token count (fairseq's max-tokens), the training loader, collators, LM blocks
* `models`      -- `build_model`: our models and same-size transformers baselines
* `messages`    -- `fail` (stop the script with a clear error), `warn`, and the first line of an error
* `options`     -- the command-line options every Accelerate script shares
* `option_checks` -- their checks: ranges, flags that go together, sizes that make a valid model
* `optimizer_steps` -- whether the data fills an optimizer step, how many steps, AdamW and its schedule
* `loop`        -- the training run: `training_run` (the Accelerator in its folder), `train`, `fit`, `train_step`
* `pacing`      -- `Settings` (when the loop evaluates, saves, stops), training time, slowdowns, the test hook
* `signals`     -- terminal stops: they stop a script anywhere and cost the time budget nothing
* `losses`      -- the training loss, per-sequence NLL and the validation loss meter
* `seq2seq_eval` -- an encoder-decoder script's evaluation loop: validation loss and generated texts
* `checkpoints` -- `Progress`, saving last/ and best/ (with their files' hashes), resuming, reloading best/
* `training_state` -- state/: Accelerate's files, progress.json and the averaging snapshots, loaded so that
                   nothing in it runs code
* `averaging`   -- `--average_last`: the mean of the weights of the last evaluations
* `records`     -- log.jsonl (writing, reading back), the trackers and the progress bar, environment.json,
                   test_results.json
* `threads`     -- the thread count of a CPU run: the cores other processes leave free, unless --threads
* `run_folder`  -- the output folder: one run at a time, a fresh start or a resume, the run's tokenizer
* `run_outputs` -- outputs.json, the manifest of what a run wrote: all that --overwrite_output_dir deletes
* `run_settings` -- args.json, and how a resume's settings compare with it
* `atomic_files` -- writes that a kill or a power cut leaves whole (beside the name, fsync, rename)
* `folder_saves` -- saving a folder of the run atomically; a failed save removes its copy, a full disk is named
* `file_checks` -- whether a saved file reads back whole, checked without running anything it holds
* `hub`         -- `--push_to_hub`: best/ with our modeling code, checked at the start
* `hf_trainer`  -- what the `Trainer` scripts (run_translation.py, run_clm.py) share
"""
