"""Losses, each an nn.Module so it moves with the model and can live inside it."""

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torchvision.transforms.v2.functional import normalize

from . import UsageError
from .networks import VGGFeatures

# The statistics torchvision's ImageNet weights were trained with; images here are plain [0, 1].
IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]


class CharbonnierLoss(nn.Module):
    """Charbonnier loss, a smooth L1: mean of sqrt((pred - target) ** 2 + eps ** 2), a float32 0-dim tensor.

    Its gradient is 0 where pred == target (L1's jumps there); for errors much larger than eps it is L1.
    """

    def __init__(self, eps: float = 1e-3) -> None:
        super().__init__()
        self.eps = eps

    def forward(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Compute the loss of pred against target, both of one shape."""
        diff = pred.float() - target.float()
        return torch.sqrt(diff * diff + self.eps**2).mean()


class VGGPerceptualLoss(nn.Module):
    """Perceptual loss: sum_i layer_weights[i] * mean |f_i(pred) - f_i(target)| over VGG feature maps f_i.

    Images (N, 3, H, W) in [0, 1], ImageNet-normalised here; a float32 0-dim tensor. The frozen VGG is a
    submodule (.to() and DDP carry it) left out of state_dict() and, needing no grad, out of optimizers.
    """

    def __init__(self, features: VGGFeatures, layer_weights: Sequence[float] | None = None) -> None:
        super().__init__()
        count = len(features.slices)
        self.layer_weights = (1.0,) * count if layer_weights is None else tuple(map(float, layer_weights))
        if len(self.layer_weights) != count:
            raise UsageError(f"got {len(self.layer_weights)} perceptual layer weights for {count} VGG layers")
        self.features = features
        self.register_state_dict_post_hook(_drop_features)
        self.register_load_state_dict_post_hook(_allow_missing_features)

    def forward(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Compute the loss of pred (N, 3, H, W) against target (N, 3, H, W), both in [0, 1]."""
        pred_features = self.features(normalize(pred, IMAGENET_MEAN, IMAGENET_STD))  # list of (N, C_i, H_i, W_i)
        with torch.no_grad():
            target_features = self.features(normalize(target, IMAGENET_MEAN, IMAGENET_STD))
        losses = [F.l1_loss(fp.float(), ft.float()) for fp, ft in zip(pred_features, target_features, strict=True)]
        return sum(weight * loss for weight, loss in zip(self.layer_weights, losses, strict=True))


def _drop_features(module: nn.Module, state_dict: dict[str, Any], prefix: str, local_metadata: Any) -> None:
    """state_dict() hook: leave the frozen VGG's tensors out of checkpoints."""
    for key in [key for key in state_dict if key.startswith(prefix + "features.")]:
        del state_dict[key]


def _allow_missing_features(module: nn.Module, incompatible: Any) -> None:
    """load_state_dict() hook: a state without the VGG's tensors (see _drop_features) loads strictly."""
    incompatible.missing_keys[:] = [key for key in incompatible.missing_keys if ".features.slices." not in f".{key}"]
