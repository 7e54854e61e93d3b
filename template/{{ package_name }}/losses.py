"""Losses, each an nn.Module so it moves with the model and can live inside it."""

import torch
import torch.nn.functional as F
from torch import nn

from .ops import one_hot


class SoftTargetCrossEntropy(nn.Module):
    """Cross-entropy that takes class indices (N,) or class probabilities (N, C).

    Probability targets are what mixup produces; index targets are label-smoothed by
    `label_smoothing` first. Returns the mean loss as a 0-dim tensor.
    """

    def __init__(self, label_smoothing: float = 0.0) -> None:
        super().__init__()
        self.label_smoothing = label_smoothing

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Compute the loss of logits (N, C) against targets (N,) or (N, C)."""
        if targets.dim() == 1:
            targets = one_hot(targets, logits.shape[1], self.label_smoothing)
        log_probs = F.log_softmax(logits.float(), dim=1)  # float: stable under autocast
        return -(targets * log_probs).sum(dim=1).mean()


class FocalLoss(nn.Module):
    """Focal loss (Lin et al., 2017): cross-entropy scaled by (1 - p_true) ** gamma.

    It down-weights examples the model already gets right; gamma = 0 is plain cross-entropy.
    Takes class indices (N,) or probabilities (N, C) like SoftTargetCrossEntropy.
    """

    def __init__(self, gamma: float = 2.0, label_smoothing: float = 0.0) -> None:
        super().__init__()
        self.gamma = gamma
        self.label_smoothing = label_smoothing

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Compute the loss of logits (N, C) against targets (N,) or (N, C)."""
        if targets.dim() == 1:
            targets = one_hot(targets, logits.shape[1], self.label_smoothing)
        log_probs = F.log_softmax(logits.float(), dim=1)  # (N, C)
        weight = (1.0 - log_probs.exp()).pow(self.gamma)  # (N, C), small where p is high
        return -(targets * weight * log_probs).sum(dim=1).mean()
