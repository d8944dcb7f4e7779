"""The run's `Accelerator`, in its locked output folder: what a script's training happens inside.

    with training_run(args) as accelerator:  # the folder is locked, checked and ready
        ...                                  # tokenizer, data, model, then `loop.train`

The folder itself (the lock, a fresh start or a resume, its files) is `run_folder`'s; this module
makes the Accelerator the run trains with and the records every run starts with.
"""

from contextlib import contextmanager

from accelerate import Accelerator
from accelerate.utils import GradientAccumulationPlugin, set_seed

from . import run_folder, run_outputs
from .folder_saves import full_disk_is_an_error
from .records import write_environment
from .threads import set_threads


@contextmanager
def training_run(args):
    """The `Accelerator` of a run of `args`, in its output folder (a `with` block).

    The folder is locked for this run and checked for a fresh start or a resume first
    (`run_folder.open_run`), before anything is written; the lock goes when the block ends. TensorBoard
    tracks the run when it is installed. Gradients are synchronised every
    `gradient_accumulation_steps` micro-batches exactly (the sampler makes epochs a whole number of
    steps), and the scheduler steps once per optimizer step whatever the number of processes: the
    global batch, not the process count, sets the pace.
    """
    accelerator = Accelerator(
        mixed_precision=args.mixed_precision,
        gradient_accumulation_plugin=GradientAccumulationPlugin(
            num_steps=args.gradient_accumulation_steps, sync_with_dataloader=False
        ),
        step_scheduler_with_optimizer=False,
        log_with="tensorboard" if run_outputs.tensorboard_installed() else None,
        project_dir=args.output_dir,
    )
    set_threads(accelerator, args.threads)  # --threads, else the cores other processes leave free
    lock = run_folder.open_run(accelerator, args)
    try:
        with full_disk_is_an_error(args.output_dir):  # a log line or a JSON file that finds the disk full
            set_seed(args.seed)
            hparams = {k: v for k, v in vars(args).items() if isinstance(v, (int, float, str, bool))}
            accelerator.init_trackers("train", config=hparams)
            if accelerator.is_main_process:
                write_environment(args.output_dir, accelerator.num_processes, accelerator.device)
            yield accelerator
            accelerator.end_training()
    finally:
        if lock is not None:
            lock.release()
