"""What bench_train's rows share: a training step, the memory it takes, a child process's failure,
and the ratios of each model to its baseline."""

from __future__ import annotations

from collections.abc import Callable

import torch
from _device import process_status_bytes
from _models import baseline_of

OUT_OF_MEMORY_MARKERS = ("out of memory", "can't allocate memory", "cannot allocate memory", "std::bad_alloc")


def memory_in_use(device: str, peak: bool) -> int | None:
    """Memory in use now (or its peak so far): the CUDA allocator's on a GPU, the process's
    resident memory on the CPU."""
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated(device) if peak else torch.cuda.memory_allocated(device)
    return process_status_bytes("VmHWM" if peak else "VmRSS")


def random_ids(rows: int, columns: int, vocab: int, device: str, generator: torch.Generator) -> torch.Tensor:
    """(rows, columns) random token ids 3 .. vocab - 1 (clear of the special ids 0, 1, 2) on ``device``."""
    return torch.randint(3, vocab, (rows, columns), generator=generator).to(device)


def training_step(
    model: torch.nn.Module, batch: dict[str, torch.Tensor], device: str, mixed_precision: str
) -> Callable[[int], torch.Tensor]:
    """One training step of ``model`` on ``batch`` as a function of `_timing.interleaved`'s call
    number (unused): the forward (under bfloat16 autocast when ``mixed_precision`` is ``"bf16"``),
    the backward and an AdamW update; it returns the loss (a 0-d tensor)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    device_type = torch.device(device).type

    def step(number: int) -> torch.Tensor:
        with torch.autocast(device_type, dtype=torch.bfloat16, enabled=mixed_precision == "bf16"):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    return step


def failure_of(what: str, returncode: int | None, stderr: str) -> dict:
    """The result of a child process that measured ``what`` and ended without its answer: out of
    memory (killed by the kernel's OOM killer, or an allocator's message on ``stderr``) is a result;
    any other failure raises RuntimeError with the child's ``stderr``."""
    killed = returncode in (-9, 137)  # the kernel's OOM killer sends SIGKILL
    if killed:
        return {"status": "out of memory", "error": "killed (SIGKILL, out of memory)"}
    if any(marker in stderr.lower() for marker in OUT_OF_MEMORY_MARKERS):
        error = (stderr.strip().splitlines() or [f"exit status {returncode}"])[-1]
        return {"status": "out of memory", "error": error}
    raise RuntimeError(f"{what} failed (exit status {returncode}):\n{stderr}")


def summarise(results: dict) -> dict:
    """Per model and length of ``results`` ({model: {length: measured}}): tokens/s and memory as
    ratios to the model's baseline (None where either did not run)."""
    summary = {}
    for name, per_length in results.items():
        baseline = results.get(baseline_of(name), {})
        rows = {}
        for length, measured in per_length.items():
            reference = baseline.get(length, {"status": "not measured"})  # a run cut short
            both_ran = measured["status"] == "ok" and reference["status"] == "ok"
            rows[length] = {
                "tokens_per_s_over_baseline": measured["tokens_per_s"] / reference["tokens_per_s"]
                if both_ran
                else None,
                "peak_memory_over_baseline": measured["peak_memory_bytes"] / reference["peak_memory_bytes"]
                if both_ran
                else None,
                "training_memory_over_baseline": measured["training_memory_bytes"] / reference["training_memory_bytes"]
                if both_ran
                else None,
                "baseline_status": reference["status"],
            }
        summary[name] = rows
    return summary
