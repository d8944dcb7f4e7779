"""Fully sharded data parallel (FSDP2, `torch.distributed.fsdp.fully_shard`) on two CPU processes.

Sharded as `examples/accelerate/fsdp.yaml` shards (each of the model's `_no_split_modules`, then the
root): the tied embeddings stay tied, the full state dict gathers to the unsharded weights and
saves/reloads through `save_pretrained`, and a training step on half a batch per process gives the
gradients of the whole batch on one process. Accelerate enables FSDP only on accelerators: the
training script under that config is tested on GPUs (tests/examples, marked `gpu`).
"""

import os
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from .helpers import CASES, training_inputs

WORLD_SIZE = 2


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _shard_like_accelerate(model, mesh):
    """FSDP2 units: every `_no_split_modules` block, then the root (which holds the tied embeddings)."""
    from torch.distributed.fsdp import fully_shard

    for module in model.modules():
        if type(module).__name__ in model._no_split_modules:
            fully_shard(module, mesh=mesh)
    fully_shard(model, mesh=mesh)


def _check_every_case(rank: int, port: int, folder: Path) -> None:
    """Runs in each spawned process; an assertion error fails the test with its traceback."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD_SIZE)
    try:
        mesh = init_device_mesh("cpu", (WORLD_SIZE,))
        for case in CASES:
            sharded, reference = case.model().train(), case.model().train()  # dropout 0: deterministic
            _shard_like_accelerate(sharded, mesh)
            assert sharded.lm_head.weight is sharded.get_input_embeddings().weight, case.name

            # What Accelerate's save path does under FSDP: gather the full weights (each tied tensor
            # once), `save_pretrained` them from the first process; they reload to the same model.
            full = get_model_state_dict(sharded, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
            expected = reference.state_dict()
            for name, tensor in full.items():
                torch.testing.assert_close(tensor, expected[name], rtol=0, atol=0, msg=f"{case.name}: {name}")
            if rank == 0:
                sharded.save_pretrained(folder / case.name, state_dict=full)
                reloaded = type(reference).from_pretrained(folder / case.name).train()
                for name, tensor in reloaded.state_dict().items():
                    torch.testing.assert_close(tensor, expected[name], rtol=0, atol=0, msg=f"{case.name}: {name}")

            # Rows of equal length and no padding: the mean of the two halves' losses is the whole
            # batch's loss, and FSDP's reduce-scatter averages the gradients over the processes.
            inputs, labels = training_inputs(case, batch=2 * WORLD_SIZE)
            rows = slice(2 * rank, 2 * rank + 2)
            sharded(**{k: v[rows] for k, v in inputs.items()}, labels=labels[rows]).loss.backward()
            reference(**inputs, labels=labels).loss.backward()
            expected = dict(reference.named_parameters())
            for name, parameter in sharded.named_parameters():
                torch.testing.assert_close(
                    parameter.grad.full_tensor(), expected[name].grad, rtol=1e-4, atol=1e-6, msg=f"{case.name}: {name}"
                )
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs torch.distributed with gloo")
def test_fsdp2_sharding_keeps_ties_state_and_gradients(tmp_path):
    torch.multiprocessing.spawn(_check_every_case, args=(_free_port(), tmp_path), nprocs=WORLD_SIZE)
