"""Pure tensor functions: no nn.Module, no state, no I/O.

Everything here takes tensors and returns tensors on the same device, so it can be used inside
forward methods, losses and the training loop alike.
"""

import torch
import torch.nn.functional as F


def smooth_labels(targets: torch.Tensor, num_classes: int, smoothing: float = 0.0) -> torch.Tensor:
    """Class indices (N,) or class probabilities (N, C) as probabilities (N, C), label-smoothed.

    With smoothing eps every class gets eps / C and the rest stays where it was (1 - eps + eps / C
    for a true class), the convention of nn.CrossEntropyLoss(label_smoothing=eps). Smoothing
    commutes with mixup and cutmix: smoothing mixed targets equals mixing smoothed ones.
    """
    if targets.dim() == 1:
        targets = F.one_hot(targets, num_classes).float()  # (N, C)
    return targets * (1.0 - smoothing) + smoothing / num_classes


def confusion_matrix(preds: torch.Tensor, targets: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Counts (num_classes, num_classes) with rows = true class and columns = predicted class."""
    flat = targets * num_classes + preds  # (N,) index into the flattened matrix
    return torch.bincount(flat, minlength=num_classes * num_classes).reshape(num_classes, num_classes)


def precision_recall_f1(confusion: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-class precision, recall and F1 (each (C,)) from a confusion matrix; 0 where undefined."""
    confusion = confusion.double()
    true_pos = confusion.diag()
    predicted = confusion.sum(dim=0)  # column sums: how often each class was predicted
    actual = confusion.sum(dim=1)  # row sums: how often each class occurs
    precision = torch.where(predicted > 0, true_pos / predicted.clamp(min=1), 0.0)
    recall = torch.where(actual > 0, true_pos / actual.clamp(min=1), 0.0)
    denom = precision + recall
    f1 = torch.where(denom > 0, 2 * precision * recall / denom.clamp(min=1e-12), 0.0)
    return precision, recall, f1
