"""Evaluation shared by train.py and test.py: one pass over a loader, then metrics."""

import contextlib
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from .ops import confusion_matrix, precision_recall_f1


@torch.no_grad()
def evaluate(
    model: nn.Module,
    loader: DataLoader,
    device: torch.device,
    num_classes: int,
    autocast: contextlib.AbstractContextManager | None = None,
    channels_last: bool = False,
) -> dict[str, torch.Tensor]:
    """Run the model over `loader` in eval mode; return summed cross-entropy and confusion matrix.

    Sums rather than means, so several processes can add theirs up before summarize(). The
    model's train/eval mode is restored on return.
    """
    was_training = model.training
    model.eval()
    loss_sum = torch.zeros((), device=device, dtype=torch.float64)
    confusion = torch.zeros(num_classes, num_classes, device=device, dtype=torch.int64)
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    for batch in loader:
        if batch is None:  # every image of this batch was unreadable (data.collate_readable)
            continue
        images, targets = batch
        images = images.to(device, non_blocking=True, memory_format=memory_format)  # (N, C, H, W)
        targets = targets.to(device, non_blocking=True)  # (N,)
        with autocast or contextlib.nullcontext():
            logits = model(images)  # (N, num_classes)
        loss_sum += nn.functional.cross_entropy(logits.float(), targets, reduction="sum")
        confusion += confusion_matrix(logits.argmax(dim=1), targets, num_classes)
    model.train(was_training)
    return {"loss_sum": loss_sum, "confusion": confusion}


def summarize(sums: dict[str, torch.Tensor], class_names: list[str] | None = None) -> dict[str, Any]:
    """Mean loss, accuracy, and per-class precision, recall and F1 from evaluate()'s sums."""
    confusion = sums["confusion"].cpu()
    count = int(confusion.sum())
    precision, recall, f1 = precision_recall_f1(confusion)
    names = class_names or [str(i) for i in range(confusion.shape[0])]
    return {
        "samples": count,
        "loss": float(sums["loss_sum"]) / max(1, count),
        "accuracy": float(confusion.diag().sum()) / max(1, count),
        "per_class": {
            name: {"precision": float(p), "recall": float(r), "f1": float(f), "support": int(s)}
            for name, p, r, f, s in zip(names, precision, recall, f1, confusion.sum(dim=1), strict=True)
        },
        "confusion_matrix": confusion.tolist(),
    }
