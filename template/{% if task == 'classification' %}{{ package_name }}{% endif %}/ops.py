"""Pure tensor functions (no module, state or I/O), for forward methods, losses and the loop alike."""

import torch
import torch.nn.functional as F


def smooth_labels(targets: torch.Tensor, num_classes: int, smoothing: float = 0.0) -> torch.Tensor:
    """Class indices (N,) or probabilities (N, C) as probabilities (N, C), smoothed as nn.CrossEntropyLoss does.

    Every class gets smoothing / C on top of (1 - smoothing) times its share; smoothing commutes with mixup.
    """
    if targets.dim() == 1:
        targets = F.one_hot(targets, num_classes).float()  # (N, C)
    return targets * (1.0 - smoothing) + smoothing / num_classes


def confusion_matrix(preds: torch.Tensor, targets: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Counts (num_classes, num_classes) with rows = true class and columns = predicted class."""
    flat = (targets * num_classes + preds).long()  # (N,) index into the flattened matrix
    counts = torch.zeros(num_classes * num_classes, dtype=torch.long, device=flat.device)
    # Not torch.bincount: on a GPU it reads the indices' range back to the host, a wait at every batch.
    return counts.index_add_(0, flat, torch.ones_like(flat)).reshape(num_classes, num_classes)


def precision_recall_f1(confusion: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-class precision, recall and F1 (each (C,)) from a confusion matrix; 0 where undefined."""
    confusion = confusion.double()
    true_pos = confusion.diag()  # (C,): at most its column and row sums, so where they are 0 (clamped to 1) it gives 0
    precision = true_pos / confusion.sum(dim=0).clamp(min=1)  # column sums: how often each class was predicted
    recall = true_pos / confusion.sum(dim=1).clamp(min=1)  # row sums: how often each class occurs
    f1 = 2 * precision * recall / (precision + recall).clamp(min=1e-12)  # precision + recall: 0, or far above 1e-12
    return precision, recall, f1
