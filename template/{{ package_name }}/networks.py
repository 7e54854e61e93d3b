"""Networks composed from the blocks in layers.py."""

import torch
from torch import nn

from .layers import ConvBlock, GlobalAvgPool, ResBlock


class ResNetClassifier(nn.Module):
    """A small residual network: stem, stages of (strided ConvBlock + ResBlocks), pooling, head.

    Input (N, in_channels, H, W) of any size >= 2 ** (len(widths) - 1); output logits
    (N, num_classes). The network returns raw logits: the loss applies log-softmax itself.
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
        # Build a plain list of blocks, then unpack it into nn.Sequential so every block is
        # registered (a bare Python list of modules would be invisible to .to() and the optimizer).
        blocks: list[nn.Module] = [ConvBlock(in_channels, widths[0])]
        for i, width in enumerate(widths):
            if i > 0:
                blocks.append(ConvBlock(widths[i - 1], width, stride=2))
            blocks += [ResBlock(width) for _ in range(blocks_per_stage)]
        self.backbone = nn.Sequential(*blocks, GlobalAvgPool())
        self.head = nn.Sequential(nn.Dropout(dropout), nn.Linear(widths[-1], num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map images (N, C, H, W) to logits (N, num_classes)."""
        features = self.backbone(x)  # (N, widths[-1])
        return self.head(features)
