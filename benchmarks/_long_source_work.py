"""What a worker process of bench_train's long-source rows does (`_long_source` drives them): train
one model on one batch of long sources, or run its beam search from one long source, one timed
call per request (`_workers.serve`)."""

from __future__ import annotations

import torch
from _models import ModelShape, build_model
from _timing import Stopwatch
from _train_step import memory_in_use, random_ids, training_step
from _workers import Work


class ModelWork(Work):
    """A `Work` of model ``name`` (`_models.build_model`) of the command line's shape on its device,
    with position tables of ``positions``: its memory before the first call (``ready``, taken by
    `take_ready` once the inputs are made) and its peak (``finish``)."""

    def __init__(self, name: str, positions: int, args):
        torch.manual_seed(0)
        self.model = build_model(name, ModelShape.from_args(args), positions, args.dropout).to(args.device)
        self.name, self.device, self.stopwatch = name, args.device, Stopwatch(args.device)
        self.generator = torch.Generator().manual_seed(0)  # the inputs' random ids

    def take_ready(self) -> None:
        self.ready = {
            "memory_before_bytes": memory_in_use(self.device, peak=False),
            "parameters": sum(parameter.numel() for parameter in self.model.parameters()),
        }

    def finish(self) -> dict:
        return {"peak_memory_bytes": memory_in_use(self.device, peak=True)}


class TrainingWork(ModelWork):
    """Training steps of model ``name`` on one batch: (rows, source_length) random source ids and
    (rows, target_length) labels, no attention mask (nothing is padded: every model takes its
    fastest path)."""

    def __init__(self, name: str, source_length: int, target_length: int, rows: int, args):
        super().__init__(name, max(source_length, target_length) + 8, args)
        batch = {
            "input_ids": random_ids(rows, source_length, args.vocab, args.device, self.generator),
            "labels": random_ids(rows, target_length, args.vocab, args.device, self.generator),
        }
        self.step = training_step(self.model.train(), batch, args.device, args.mixed_precision)
        self.take_ready()

    def run(self) -> dict:
        loss, wall, cpu = self.stopwatch.time(self.step, 0)
        return {"wall_s": wall, "cpu_s": cpu, "loss": loss.item()}


class GenerationWork(ModelWork):
    """Beam search of model ``name`` from ``rows`` random sources of ``source_length`` ids: exactly
    ``new_tokens`` new tokens (``--beams`` beams), and the encoder pass alone before it."""

    def __init__(self, name: str, source_length: int, new_tokens: int, rows: int, args):
        super().__init__(name, max(source_length, new_tokens) + 8, args)
        self.model.eval()
        self.input_ids = random_ids(rows, source_length, args.vocab, args.device, self.generator)
        self.new_tokens = new_tokens
        self.settings = dict(
            num_beams=args.beams, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False
        )
        device_type = torch.device(args.device).type
        self.autocast = dict(device_type=device_type, dtype=torch.bfloat16, enabled=args.mixed_precision == "bf16")
        self.take_ready()

    @torch.no_grad()
    def run(self) -> dict:
        with torch.autocast(**self.autocast):
            _, encoder_wall, encoder_cpu = self.stopwatch.time(self.model.get_encoder(), self.input_ids)
            sequences, wall, cpu = self.stopwatch.time(lambda: self.model.generate(self.input_ids, **self.settings))
        written = sequences.shape[1] - 1  # after the decoder's start token
        if written != self.new_tokens:
            raise RuntimeError(
                f"{self.name} wrote {written} tokens, not {self.new_tokens}: the timings would not compare"
            )
        return {"wall_s": wall, "cpu_s": cpu, "encoder_wall_s": encoder_wall, "encoder_cpu_s": encoder_cpu}


def make_work(name: str, task: str, source_length: int, target_length: int, rows: int, args) -> Work:
    """The `Work` of ``task`` (``train`` or ``generate``; for ``generate`` the target length is the
    new tokens)."""
    works = {"train": TrainingWork, "generate": GenerationWork}
    if task not in works:
        raise ValueError(f"task {task!r}: expected one of {sorted(works)}")
    return works[task](name, source_length, target_length, rows, args)
