"""The training loss: label-smoothed cross-entropy summed over the target tokens."""

import torch
import torch.nn.functional as F
from common.losses import token_loss


def test_label_smoothed_loss_matches_its_definition():
    logits = torch.randn(2, 5, 11)
    labels = torch.randint(0, 11, (2, 5))
    labels[1, 3:] = -100
    loss, count = token_loss(logits, labels, label_smoothing=0.0)
    assert count == 8
    torch.testing.assert_close(loss, F.cross_entropy(logits[labels != -100], labels[labels != -100], reduction="sum"))
    smoothed, _ = token_loss(logits, labels, label_smoothing=0.1)
    log_probs = logits[labels != -100].log_softmax(-1)
    nll = -log_probs.gather(1, labels[labels != -100, None]).sum()
    torch.testing.assert_close(smoothed, 0.9 * nll + 0.1 * (-log_probs.mean(-1)).sum())
