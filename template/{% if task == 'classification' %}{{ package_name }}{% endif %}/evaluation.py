"""Evaluation shared by train.py and test.py: one pass over a loader, then metrics."""

import contextlib
import itertools
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, default_collate

from . import UsageError
from .harness import runtime
from .ops import confusion_matrix, precision_recall_f1


@torch.no_grad()
def evaluate(
    model: nn.Module,
    loader: DataLoader,
    device: torch.device,
    num_classes: int,
    autocast: contextlib.AbstractContextManager | None = None,
    channels_last: bool = False,
    mistakes: int = 0,
) -> dict[str, torch.Tensor]:
    """Summed cross-entropy and confusion (for processes to add up) of the model over `loader`, in eval mode.

    With `mistakes` > 0 also the M <= mistakes most confidently wrong images, on the CPU, most confident first:
    "mistake_images" (M, C, H, W), "mistake_targets", "mistake_predictions", "mistake_confidence" (M,).
    """
    was_training = model.training
    model.eval()
    total = torch.float32 if device.type == "mps" else torch.float64  # MPS has no float64
    loss_sum = torch.zeros((), device=device, dtype=total)
    confusion = torch.zeros(num_classes, num_classes, device=device, dtype=torch.int64)
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    non_blocking = runtime.non_blocking(device)
    worst: dict[str, torch.Tensor] = {}  # the most confident wrong predictions so far, on the CPU
    for batch in loader:
        if batch is None:  # every image of this batch was unreadable (loaders.collate_readable)
            continue
        images, targets = batch
        images = images.to(device, non_blocking=non_blocking, memory_format=memory_format)  # (N, C, H, W)
        targets = targets.to(device, non_blocking=non_blocking)  # (N,)
        with autocast or contextlib.nullcontext():
            logits = model(images)  # (N, num_classes)
        loss_sum += F.cross_entropy(logits.float(), targets, reduction="sum")
        confusion += confusion_matrix(logits.argmax(dim=1), targets, num_classes)
        if mistakes > 0:
            worst = _most_confident_mistakes(worst, images, targets, logits, mistakes)
    model.train(was_training)
    return {"loss_sum": loss_sum, "confusion": confusion, **{f"mistake_{k}": v for k, v in worst.items()}}


def _most_confident_mistakes(
    worst: dict[str, torch.Tensor], images: torch.Tensor, targets: torch.Tensor, logits: torch.Tensor, count: int
) -> dict[str, torch.Tensor]:
    """The `count` most confident of `worst` and this batch's wrong predictions, with their images, on the CPU."""
    confidence, predictions = logits.float().softmax(dim=1).max(dim=1)  # (N,) each
    wrong = predictions != targets  # (N,) bool; indexing with it syncs the device: only when asked for
    batch = {"images": images, "targets": targets, "predictions": predictions, "confidence": confidence}
    batch = {name: value[wrong].cpu() for name, value in batch.items()}  # only the wrong ones leave the device
    if worst:
        batch = {name: torch.cat([worst[name], value]) for name, value in batch.items()}
    order = batch["confidence"].argsort(descending=True, stable=True)[:count]
    return {name: value[order] for name, value in batch.items()}


@torch.no_grad()
def predict(
    model: nn.Module,
    images: torch.Tensor,
    device: torch.device,
    autocast: contextlib.AbstractContextManager | None = None,
    channels_last: bool = False,
) -> torch.Tensor:
    """The model's class probabilities (N, num_classes), on the CPU, for images (N, C, H, W), in eval mode."""
    was_training = model.training
    model.eval()
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    with autocast or contextlib.nullcontext():
        logits = model(images.to(device, memory_format=memory_format))  # (N, num_classes)
    model.train(was_training)
    return logits.float().softmax(dim=1).cpu()


def preview_batch(dataset: Dataset, count: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """The same `count` readable items spread over `dataset` each time: images (N, C, H, W), labels (N,).

    Unreadable items (None) are passed over; UsageError if none is readable.
    """
    spread = torch.linspace(0, len(dataset) - 1, min(count, len(dataset))).round().long().unique().tolist()
    rest = (index for index in range(len(dataset)) if index not in spread)  # read only if some were unreadable
    items = (dataset[index] for index in itertools.chain(spread, rest))
    readable = list(itertools.islice((item for item in items if item is not None), count))
    if not readable:
        raise UsageError(f"none of the {len(dataset)} validation images can be read")
    return default_collate(readable)


def summarize(sums: dict[str, torch.Tensor], classes: list[str]) -> dict[str, Any]:
    """Mean loss, accuracy, and per-class precision, recall and F1 from evaluate()'s sums."""
    confusion = sums["confusion"].cpu()
    count = int(confusion.sum())
    precision, recall, f1 = precision_recall_f1(confusion)
    return {
        "samples": count,
        "loss": float(sums["loss_sum"]) / max(1, count),
        "accuracy": float(confusion.diag().sum()) / max(1, count),
        "per_class": {
            name: {"precision": float(p), "recall": float(r), "f1": float(f), "support": int(s)}
            for name, p, r, f, s in zip(classes, precision, recall, f1, confusion.sum(dim=1), strict=True)
        },
        "confusion_matrix": confusion.tolist(),
    }
