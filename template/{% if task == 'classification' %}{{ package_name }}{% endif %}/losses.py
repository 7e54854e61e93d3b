"""Losses beyond torch's own: nn.Modules that take class indices (N,) or probabilities (N, C), as torch's do."""

import torch
import torch.nn.functional as F
from torch import nn

from .ops import smooth_labels


class FocalLoss(nn.Module):
    """Focal loss (Lin et al., 2017): cross-entropy scaled by (1 - p) ** gamma, averaged (0-dim).

    gamma = 0 is cross-entropy. Loss and gradient stay finite for every gamma >= 0, even where p == 1 (float32).
    """

    def __init__(self, gamma: float = 2.0, label_smoothing: float = 0.0) -> None:
        super().__init__()
        self.gamma = gamma
        self.label_smoothing = label_smoothing

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Compute the loss of logits (N, C) against targets (N,) or (N, C)."""
        targets = smooth_labels(targets, logits.shape[1], self.label_smoothing)  # (N, C)
        log_probs = F.log_softmax(logits, dim=1)  # (N, C)
        # -expm1(log p) keeps 1 - p precise near p = 1. The clamp keeps pow's derivative finite for 0 < gamma < 1
        # (at p == 1 it is infinite, times log p == 0: NaN); it moves the loss by less than 1e-12.
        one_minus_p = (-torch.expm1(log_probs)).clamp(min=1e-12)  # (N, C)
        weight = one_minus_p.pow(self.gamma)  # (N, C), small where p is high
        return -(targets * weight * log_probs).sum(dim=1).mean()
