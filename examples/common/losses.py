"""The losses: summed token cross-entropy for training, per-sequence NLL and the validation loss
over a whole split for evaluation."""

import math

import torch
import torch.nn.functional as F


def token_loss(logits, labels, label_smoothing=0.0):
    """Summed (label-smoothed) cross-entropy over the positions where `labels` != -100.

    logits: (B, T, V); labels: (B, T). Returns (loss_sum, token_count), both 0-d tensors. The
    smoothed loss is (1 - eps) * NLL + eps * the mean over the vocabulary of -log p, in float32.
    """
    loss = F.cross_entropy(
        logits.flatten(0, 1).float(),
        labels.flatten(),
        ignore_index=-100,
        label_smoothing=label_smoothing,
        reduction="sum",
    )
    return loss, labels.ne(-100).sum()


def sequence_nll(logits, labels):
    """(B,) summed negative log-likelihood of each sequence's target tokens.

    logits: (B, T, V); labels: (B, T) with -100 where nothing is predicted.
    """
    # (B*T, V) rows, as in training: cross_entropy over a transposed (B, V, T) view is far slower.
    losses = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), reduction="none")  # 0 where -100
    return losses.view_as(labels).sum(1)


class LossMeter:
    """Validation loss over all tokens of a split, gathered from every process.

    `gather_for_metrics` drops the duplicates that even batches add at the end of a sharded split,
    so the result is the same on any number of processes: call `add` once per loader batch.
    """

    def __init__(self, accelerator):
        self.accelerator = accelerator
        self.nll, self.tokens = [], []

    def add(self, nll, labels):
        """nll: (B,) the batch's `sequence_nll`; labels: (B, T) with -100 where nothing is predicted."""
        self.nll.append(self.accelerator.gather_for_metrics(nll))
        self.tokens.append(self.accelerator.gather_for_metrics(labels.ne(-100).sum(1)))

    def result(self):
        """{"valid_loss": mean loss per target token, "valid_ppl": its exponential}."""
        loss = (torch.cat(self.nll).sum() / torch.cat(self.tokens).sum()).item()
        return {"valid_loss": loss, "valid_ppl": math.exp(min(loss, 50))}
