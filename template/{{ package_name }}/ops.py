"""Pure tensor functions: no nn.Module, no state, no I/O.

Everything here takes tensors and returns tensors on the same device, so it can be used inside
forward methods, losses and the training loop alike.
"""

import torch
import torch.nn.functional as F


def one_hot(targets: torch.Tensor, num_classes: int, smoothing: float = 0.0) -> torch.Tensor:
    """Turn class indices (N,) into float targets (N, num_classes), optionally label-smoothed.

    With smoothing eps, the true class gets 1 - eps + eps / C and every class eps / C, the same
    convention as nn.CrossEntropyLoss(label_smoothing=eps).
    """
    out = F.one_hot(targets, num_classes).float()  # (N, C)
    if smoothing > 0.0:
        out = out * (1.0 - smoothing) + smoothing / num_classes
    return out


def mixup(
    images: torch.Tensor, soft_targets: torch.Tensor, lam: float, perm: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mix each sample with the sample perm[i]: lam * x + (1 - lam) * x[perm], same for targets.

    images is (N, C, H, W), soft_targets (N, K); both outputs keep those shapes.
    """
    mixed_images = lam * images + (1.0 - lam) * images[perm]
    mixed_targets = lam * soft_targets + (1.0 - lam) * soft_targets[perm]
    return mixed_images, mixed_targets


def cutmix(
    images: torch.Tensor, soft_targets: torch.Tensor, box: tuple[int, int, int, int], perm: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Paste the box (top, left, height, width) of image perm[i] into image i; mix targets by area.

    images is (N, C, H, W), soft_targets (N, K); both outputs keep those shapes. The targets
    get weight 1 - box area / image area for the image's own label, the rest for perm[i]'s.
    """
    top, left, height, width = box
    mixed = images.clone()
    mixed[:, :, top : top + height, left : left + width] = images[perm, :, top : top + height, left : left + width]
    lam = 1.0 - height * width / (images.shape[-2] * images.shape[-1])
    return mixed, lam * soft_targets + (1.0 - lam) * soft_targets[perm]


def accuracy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Fraction of rows whose arg-max matches the target index, as a 0-dim tensor (no sync)."""
    return (logits.argmax(dim=1) == targets).float().mean()


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


def pairwise_distance(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Euclidean distances (N, M) between the rows of x (N, D) and y (M, D)."""
    return torch.cdist(x, y, p=2.0)
