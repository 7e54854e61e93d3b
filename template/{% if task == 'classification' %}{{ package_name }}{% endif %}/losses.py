"""Losses beyond torch's own, each an nn.Module so it moves with the model and can live inside it.

Like nn.CrossEntropyLoss, they take class indices (N,) or class probabilities (N, C), which mixup
and cutmix produce, and label-smooth either kind by `label_smoothing`.
"""

import torch
import torch.nn.functional as F
from torch import nn

from .ops import smooth_labels


class FocalLoss(nn.Module):
    """Focal loss (Lin et al., 2017): cross-entropy scaled by (1 - p) ** gamma; the mean, 0-dim.

    It down-weights examples the model already gets right; gamma = 0 is plain cross-entropy.
    The loss and its gradient are finite for every gamma >= 0, even where p == 1, for float32 logits.
    """

    min_one_minus_p = 1e-12  # the weight's floor; see forward()

    def __init__(self, gamma: float = 2.0, label_smoothing: float = 0.0) -> None:
        super().__init__()
        self.gamma = gamma
        self.label_smoothing = label_smoothing

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Compute the loss of logits (N, C) against targets (N,) or (N, C)."""
        targets = smooth_labels(targets, logits.shape[1], self.label_smoothing)  # (N, C)
        log_probs = F.log_softmax(logits, dim=1)  # (N, C)
        # 1 - p as -expm1(log p) keeps its precision where p is near 1. The clamp keeps the
        # derivative of pow, gamma * (1 - p) ** (gamma - 1), finite for 0 < gamma < 1: at p == 1
        # it is infinite, and infinity times log p == 0 makes the gradient NaN. The clamp changes
        # only terms with 1 - p < 1e-12, where -log p is about 1 - p: such a term is below
        # 1e-12 ** (1 + gamma) with or without it, so the loss moves by less than 1e-12.
        one_minus_p = (-torch.expm1(log_probs)).clamp(min=self.min_one_minus_p)  # (N, C)
        weight = one_minus_p.pow(self.gamma)  # (N, C), small where p is high
        return -(targets * weight * log_probs).sum(dim=1).mean()
