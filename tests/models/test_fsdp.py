"""Fully sharded data parallel (FSDP2, `torch.distributed.fsdp.fully_shard`) on two CPU processes.

Sharded by Accelerate's own `fsdp2_prepare_model`, as `examples/accelerate/fsdp.yaml` asks (each of
the model's `_no_split_modules`, the embeddings with the tied LM head, then the root): the tied
embeddings stay tied, the full state dict gathers to the unsharded weights and saves/reloads
through `save_pretrained`, a training step on half a batch per process gives the gradients of the
whole batch on one process, and so do the losses and weights of the next optimizer steps.
Accelerate enables FSDP only on accelerators, so its `Accelerator` is stood in for here; the
training script under that config is tested on GPUs (tests/examples, marked `gpu`).
"""

import os
import socket
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from ..tolerances import assert_tensor_sets_close
from .helpers import CASES, training_inputs

WORLD_SIZE = 2


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _named(context: str):
    """An `assert_close` message: ``context`` above torch's own report of the differences."""
    return lambda details: f"{context}\n{details}"


def _shard_like_accelerate(model):
    """What `Accelerator.prepare` does to a model under fsdp.yaml (float32 here: exact comparisons)."""
    from accelerate.utils import FullyShardedDataParallelPlugin
    from accelerate.utils.fsdp_utils import fsdp2_prepare_model

    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2,
        auto_wrap_policy="transformer_based_wrap",
        reshard_after_forward=True,
        state_dict_type="SHARDED_STATE_DICT",
    )
    accelerator = SimpleNamespace(
        state=SimpleNamespace(fsdp_plugin=plugin),
        torch_device_mesh=None,
        mixed_precision="no",
        is_main_process=dist.get_rank() == 0,
    )
    return fsdp2_prepare_model(accelerator, model)


def _check_every_case(rank: int, port: int, folder: Path) -> None:
    """Runs in each spawned process; an assertion error fails the test with its traceback."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD_SIZE)
    try:
        for case in CASES:
            reference = case.model().train()  # dropout 0: deterministic
            sharded = _shard_like_accelerate(case.model().train())
            assert sharded.lm_head.weight is sharded.get_input_embeddings().weight, case.name

            # What Accelerate's save path does under FSDP: gather the full weights (each tied tensor
            # once), `save_pretrained` them from the first process; they reload to the same model.
            full = get_model_state_dict(sharded, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
            expected = reference.state_dict()
            for name, tensor in full.items():
                torch.testing.assert_close(tensor, expected[name], rtol=0, atol=0, msg=_named(f"{case.name}: {name}"))
            if rank == 0:
                sharded.save_pretrained(folder / case.name, state_dict=full)
                reloaded = type(reference).from_pretrained(folder / case.name).train()
                for name, tensor in reloaded.state_dict().items():
                    torch.testing.assert_close(
                        tensor, expected[name], rtol=0, atol=0, msg=_named(f"{case.name}: {name}")
                    )

            # Rows of equal length and no padding: the mean of the two halves' losses is the whole
            # batch's loss, and FSDP's reduce-scatter averages the gradients over the processes.
            # Then optimizer steps: the losses and weights follow the unsharded model's (the second
            # step is where a weight sharded twice, in two FSDP groups, would go wrong).
            inputs, labels = training_inputs(case, batch=2 * WORLD_SIZE)
            rows = slice(2 * rank, 2 * rank + 2)
            # SGD with momentum, not Adam: Adam scales each entry's noise up to the learning rate (the
            # key bias of the cross-attention has a gradient of zero plus rounding).
            optimizers = [torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9) for model in (sharded, reference)]
            for step in range(3):
                loss = sharded(**{k: v[rows] for k, v in inputs.items()}, labels=labels[rows]).loss
                loss.backward()
                expected_loss = reference(**inputs, labels=labels).loss
                expected_loss.backward()
                dist.all_reduce(mean_loss := loss.detach() / WORLD_SIZE)
                context = f"{case.name}, step {step}"
                torch.testing.assert_close(
                    mean_loss, expected_loss.detach(), rtol=1e-5, atol=0, msg=_named(f"{context}: loss")
                )
                expected = dict(reference.named_parameters())
                weights = {name: parameter.full_tensor() for name, parameter in sharded.named_parameters()}
                assert_tensor_sets_close(
                    weights, {name: expected[name] for name in weights}, rtol=1e-4, context=context
                )
                gradients = {name: parameter.grad.full_tensor() for name, parameter in sharded.named_parameters()}
                assert_tensor_sets_close(
                    gradients, {name: expected[name].grad for name in gradients}, rtol=1e-3, context=context
                )
                for optimizer in optimizers:
                    optimizer.step()
                    optimizer.zero_grad()
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs torch.distributed with gloo")
def test_fsdp2_sharding_keeps_ties_state_gradients_and_training(tmp_path):
    torch.multiprocessing.spawn(_check_every_case, args=(_free_port(), tmp_path), nprocs=WORLD_SIZE)
