"""Checkpoint averaging (`--average_last`): fairseq's mean of the weights of the last evaluations."""

from collections import deque
from contextlib import contextmanager

import torch
from accelerate.utils import DistributedType


class WeightAverage:
    """The parameters at the last `count` evaluations, and their mean.

    The snapshots are float32 copies on the CPU (`count` x the model's size in memory). They are
    saved with the training state (`training_state`: `state/weight_average.safetensors`), so a
    resumed run averages what an uninterrupted one would. Every process keeps the same snapshots of its replicated parameters,
    which is why sharded (FSDP) training is refused.
    """

    def __init__(self, model, count):
        self.parameters = list(model.parameters())
        self.snapshots = deque(maxlen=count)

    def add(self):
        """Keep the current parameters (the oldest snapshot drops out once there are `count`)."""
        self.snapshots.append([p.detach().to("cpu", torch.float32, copy=True) for p in self.parameters])

    @contextmanager
    def swapped_in(self):
        """Inside the block the model holds the mean of the snapshots; afterwards its own weights again."""
        own = [p.detach().clone() for p in self.parameters]
        with torch.no_grad():
            for index, parameter in enumerate(self.parameters):
                mean = sum(snapshot[index] for snapshot in self.snapshots) / len(self.snapshots)
                parameter.copy_(mean)
        try:
            yield
        finally:
            with torch.no_grad():
                for parameter, weights in zip(self.parameters, own, strict=True):
                    parameter.copy_(weights)

    def state_dict(self):
        return {"snapshots": list(self.snapshots)}

    def load_state_dict(self, state):
        self.snapshots = deque(state["snapshots"], maxlen=self.snapshots.maxlen)


def weight_average(accelerator, model, count):
    """The `WeightAverage` of the last `count` evaluations, None for 0; refused under FSDP sharding."""
    if not count:
        return None
    if accelerator.distributed_type == DistributedType.FSDP:
        raise ValueError("--average_last keeps full copies of the weights: it does not work with FSDP sharding")
    return WeightAverage(model, count)
