"""Optimizer parameter groups and learning-rate schedules."""

import math

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR, LRScheduler, ReduceLROnPlateau

from . import UsageError

SCHEDULERS = ("none", "step", "cosine", "plateau")


def param_groups(
    model: nn.Module, backbone: nn.Module, lr: float, weight_decay: float, backbone_lr_scale: float = 1.0
) -> list[dict]:
    """Split trainable parameters into groups by (backbone or head) x (decayed or not).

    Biases and normalisation weights (every parameter with fewer than 2 dimensions) get no
    weight decay: shrinking them towards zero only hurts. Backbone parameters train at
    lr * backbone_lr_scale, which fine-tuning sets below 1. Head groups come first, so
    group 0 always runs at `lr` itself.
    """
    backbone_ids = {id(p) for p in backbone.parameters()}
    groups: dict[tuple[bool, bool], list[nn.Parameter]] = {}
    for param in model.parameters():
        if param.requires_grad:
            key = (id(param) in backbone_ids, param.ndim >= 2)
            groups.setdefault(key, []).append(param)
    return [
        {
            "params": params,
            "lr": lr * (backbone_lr_scale if in_backbone else 1.0),
            "weight_decay": weight_decay if decayed else 0.0,
        }
        for (in_backbone, decayed), params in sorted(groups.items())
    ]


def build_optimizer(groups: list[dict], name: str, lr: float, momentum: float = 0.9) -> torch.optim.Optimizer:
    """AdamW, or SGD with Nesterov momentum, over parameter groups from param_groups()."""
    if name == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=momentum, nesterov=momentum > 0)
    if name == "adamw":
        return torch.optim.AdamW(groups, lr=lr)
    raise UsageError(f"unknown optimizer {name!r}; choose adamw or sgd")


def build_scheduler(
    optimizer: torch.optim.Optimizer,
    name: str,
    *,
    epochs: int,
    steps_per_epoch: int,
    warmup_epochs: float | None = None,
    step_epochs: int = 30,
    gamma: float = 0.1,
    patience: int = 5,
) -> LRScheduler | ReduceLROnPlateau:
    """The schedule for --scheduler.

    none, step and cosine are stepped once per optimizer step (after optimizer.step()), with
    a linear warm-up over the first warmup_epochs (half an epoch if None); plateau is stepped
    once per epoch with the validation accuracy and cuts the rate by gamma after `patience`
    epochs without progress.
    """
    if name == "plateau":
        if warmup_epochs:
            raise UsageError("--scheduler plateau has no warm-up; leave out --warmup-epochs")
        return ReduceLROnPlateau(optimizer, mode="max", factor=gamma, patience=patience)
    total = epochs * steps_per_epoch
    warmup = round((0.5 if warmup_epochs is None else warmup_epochs) * steps_per_epoch)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if name == "cosine":
            progress = (step - warmup) / max(1, total - warmup)
            return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
        if name == "step":
            return gamma ** (step // (step_epochs * steps_per_epoch))
        return 1.0

    return LambdaLR(optimizer, factor)
