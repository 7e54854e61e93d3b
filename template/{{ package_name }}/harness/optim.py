"""Optimizer parameter groups, learning-rate schedules, and a moving average of the weights."""

import math

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR, LRScheduler, ReduceLROnPlateau
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from . import UsageError

SCHEDULERS = ("none", "step", "cosine", "plateau")


def param_groups(
    model: nn.Module, backbone: nn.Module | None, lr: float, weight_decay: float, backbone_lr_scale: float = 1.0
) -> list[dict]:
    """Split trainable parameters (frozen ones are in no group) by (backbone or head) x (decayed or not).

    Biases and norm weights (ndim < 2) get no weight decay; `backbone` (or None) trains at lr * backbone_lr_scale.
    Head groups come first, so group 0 runs at `lr` itself.
    """
    backbone_ids = {id(p) for p in backbone.parameters()} if backbone is not None else set()
    groups: dict[tuple[bool, bool], list[nn.Parameter]] = {}  # (in the backbone, decayed): parameters
    for param in model.parameters():
        if param.requires_grad:
            groups.setdefault((id(param) in backbone_ids, param.ndim >= 2), []).append(param)
    return [
        {"params": params, "lr": lr * backbone_lr_scale if in_backbone else lr, "weight_decay": weight_decay * decayed}
        for (in_backbone, decayed), params in sorted(groups.items())
    ]


def build_optimizer(groups: list[dict], name: str, lr: float, momentum: float = 0.9) -> torch.optim.Optimizer:
    """AdamW, SGD with momentum, or SGD with Nesterov momentum (as torchvision names them), over param_groups()."""
    if name == "sgd_nesterov" and momentum == 0:
        raise UsageError("--optimizer sgd_nesterov needs a --momentum above 0")
    if name in ("sgd", "sgd_nesterov"):
        return torch.optim.SGD(groups, lr=lr, momentum=momentum, nesterov=name == "sgd_nesterov")
    if name == "adamw":
        return torch.optim.AdamW(groups, lr=lr)
    raise UsageError(f"unknown optimizer {name!r}; choose adamw, sgd or sgd_nesterov")


OPTIMIZERS = ("adamw", "sgd", "sgd_nesterov")
WEIGHT_DECAY = {"adamw": 0.05, "sgd": 1e-4, "sgd_nesterov": 1e-4}  # torchvision's: decoupled decay and L2 differ


def default_warmup(name: str) -> float:
    """--warmup-epochs' default for scheduler `name`: half an epoch, none with plateau (which has no warm-up)."""
    return 0.0 if name == "plateau" else 0.5


def plateau_patience(early_stop: int | None) -> int:
    """--plateau-patience's default: 5, or two less than an early-stop --patience, so that the rate drops before."""
    return 5 if not early_stop else max(0, min(5, early_stop - 2))


def build_scheduler(
    optimizer: torch.optim.Optimizer,
    name: str,
    *,
    epochs: int,
    steps_per_epoch: int,
    warmup_epochs: float | None = None,
    step_epochs: int = 30,
    gamma: float = 0.1,
    patience: int | None = None,
    early_stop: int | None = None,
    mode: str = "max",
) -> LRScheduler | ReduceLROnPlateau:
    """The schedule for --scheduler.

    none, step and cosine: stepped after each optimizer step, with a linear warm-up over warmup_epochs (half an
    epoch if None); step decays every step_epochs counted from the first step, warm-up included. plateau: stepped
    once per epoch with the validation score, lowered by an epoch without progress (any gain is, as for best.pt)
    that follows `patience` others (plateau_patience(early_stop) if None); `mode`: max when higher is better.
    One LambdaLR (not a SequentialLR, which saves its curve's length): a resumed run may change --epochs.
    """
    if name == "plateau":
        if warmup_epochs:
            raise UsageError("--scheduler plateau has no warm-up; leave out --warmup-epochs")
        patience = plateau_patience(early_stop) if patience is None else patience
        return ReduceLROnPlateau(optimizer, mode=mode, factor=gamma, patience=patience, threshold=0.0)
    total = epochs * steps_per_epoch
    warmup = round((default_warmup(name) if warmup_epochs is None else warmup_epochs) * steps_per_epoch)
    if warmup > total:
        raise UsageError(f"--warmup-epochs {warmup_epochs} is longer than the run's {epochs}: --lr is never reached")

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


class EMA(AveragedModel):
    """Exponential moving average of a model's parameters and buffers: torch's AveragedModel with its EMA rule.

    update() on every `every`-th step: ema = decay * ema + (1 - decay) * weights; the first copies the weights.
    `module` is the average (eval mode, no gradients), `n_averaged` the number of updates.
    """

    def __init__(self, model: nn.Module, decay: float, every: int = 1) -> None:
        super().__init__(model, multi_avg_fn=get_ema_multi_avg_fn(decay), use_buffers=True)
        self.module.eval().requires_grad_(False)
        self.every = every

    def update(self, model: nn.Module, step: int) -> None:
        """Average `model` (bare or wrapped: same parameters in the same order) in, if `step` is an update step.

        AveragedModel.update_parameters()'s rule, without its copy of the count (on the CPU) to the GPU at every
        update: a copy that waits until the GPU has run all the work queued before it.
        """
        if step % self.every:
            return
        ours, theirs = [*self.module.parameters(), *self.module.buffers()], [*model.parameters(), *model.buffers()]
        pairs = [(mine, other.detach()) for mine, other in zip(ours, theirs, strict=True)]
        if self.n_averaged == 0:  # the first update copies
            for mine, other in pairs:
                mine.copy_(other)
        else:  # the EMA rule, which takes floats and the rest (batch norm's counts) apart
            for floating in (True, False):
                if kind := [pair for pair in pairs if pair[0].is_floating_point() == floating]:
                    self.multi_avg_fn([mine for mine, _ in kind], [other for _, other in kind], None)
        self.n_averaged += 1
