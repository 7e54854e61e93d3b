"""Networks: composed from the blocks in layers.py, or built around a torchvision model.

Each has a .backbone (images -> features) and a .head (features -> logits): --freeze-backbone and
--backbone-lr-scale act on the backbone, and fine-tuning from other weights keeps the head new.
"""

import torch
import torchvision
from torch import nn

from . import UsageError
from .layers import ConvBlock, ResBlock

IMAGENET_CLASSES = 1000  # the outputs of the last layer of every torchvision classifier


class ResNetClassifier(nn.Module):
    """A small residual network: stem, stages of (strided ConvBlock + ResBlocks), pooling, head.

    Images (N, in_channels, H, W) of any size >= 2 ** (len(widths) - 1) -> raw logits (N, num_classes).
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        widths: tuple[int, ...] = (16, 32, 64),
        blocks_per_stage: int = 1,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        # A plain list, unpacked into nn.Sequential: a bare list's modules would be invisible to .to() and optimizers.
        blocks: list[nn.Module] = [ConvBlock(in_channels, widths[0])]
        for i, width in enumerate(widths):
            if i > 0:
                blocks.append(ConvBlock(widths[i - 1], width, stride=2))
            blocks += [ResBlock(width) for _ in range(blocks_per_stage)]
        self.backbone = nn.Sequential(*blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten())  # (N, widths[-1])
        self.head = nn.Sequential(nn.Dropout(dropout), nn.Linear(widths[-1], num_classes))
        for module in self.modules():  # layers.py's blocks included: one that wants another start sets it after this
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
        nn.init.normal_(self.head[-1].weight, std=0.01)  # small logits to start from
        nn.init.zeros_(self.head[-1].bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map images (N, C, H, W) to logits (N, num_classes)."""
        return self.head(self.backbone(x))  # features (N, widths[-1]), then logits


class TorchvisionClassifier(nn.Module):
    """A torchvision classifier, built without weights, its last layer replaced by a head for `num_classes`.

    The backbone maps images (N, 3, image_size, image_size) to features (N, F), the head (dropout, linear)
    those to logits (N, num_classes). The head's dropout is `dropout`, or if None the one torchvision puts before
    the classifier (efficientnet_b0: 0.2; 0 where it has none). `image_size` matters only to vit_* and maxvit_t.
    """

    def __init__(self, name: str, num_classes: int, dropout: float | None = None, image_size: int = 224) -> None:
        super().__init__()
        options: dict = {}
        if name.startswith("vit_"):
            options["image_size"] = image_size
        elif name.startswith("maxvit_"):
            options["input_size"] = (image_size, image_size)
        elif name in ("googlenet", "inception_v3"):
            # No auxiliary heads; transform_input as their weights expect, always: the config alone rebuilds it.
            options.update(aux_logits=False, init_weights=True, transform_input=True)
        try:  # built, then one image through it: a size too small for its layers stops here, not at the first step
            self.backbone = torchvision.models.get_model(name, weights=None, **options)
            with torch.no_grad():
                self.backbone.eval()(torch.zeros(1, 3, image_size, image_size))
        except (ValueError, RuntimeError, AssertionError) as err:  # vit_* and maxvit_t refuse some sizes when built
            why = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise UsageError(f"--backbone {name} cannot be built for {image_size}x{image_size} images: {why}") from None
        self.backbone.train()
        # The last layer that maps to the ImageNet classes: Linear (fc, heads.head, ...) or squeezenet's 1x1 conv.
        self.classifier_name, final = [
            (key, module)
            for key, module in self.backbone.named_modules()
            if isinstance(module, nn.Linear | nn.Conv2d) and module.weight.shape[0] == IMAGENET_CLASSES
        ][-1]
        parent, _, attribute = self.classifier_name.rpartition(".")
        holder = self.backbone.get_submodule(parent)
        names = [key for key, _ in holder.named_children()]  # in the order forward() runs them, in torchvision
        previous = names[names.index(attribute) - 1] if names.index(attribute) > 0 else None
        if previous is not None and isinstance(getattr(holder, previous), nn.Dropout):  # efficientnet, vgg, googlenet
            # Its rate moves into the head: in the backbone, --freeze-backbone's eval mode would turn it off.
            dropout = getattr(holder, previous).p if dropout is None else dropout
            setattr(holder, previous, nn.Identity())
        setattr(holder, attribute, nn.Identity())
        features = final.weight.shape[1]  # a weight (out, in) or (out, in, 1, 1)
        self.head = nn.Sequential(nn.Dropout(dropout or 0.0), nn.Linear(features, num_classes))
        nn.init.normal_(self.head[-1].weight, std=0.01)  # as the builtin network's head; torchvision inits the rest
        nn.init.zeros_(self.head[-1].bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map images (N, 3, H, W) to logits (N, num_classes)."""
        return self.head(self.backbone(x))  # features (N, F), then logits
