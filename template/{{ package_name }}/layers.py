"""Small reusable building blocks. Networks in networks.py are assembled from these."""

import torch
from torch import nn


class ConvBlock(nn.Module):
    """3x3 convolution, batch norm, ReLU: (N, C_in, H, W) -> (N, C_out, H / stride, W / stride)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1) -> None:
        super().__init__()
        # No conv bias: the batch norm right after it has its own shift.
        self.block = nn.Sequential(
            nn.Conv2d(in_channels, out_channels, kernel_size=3, stride=stride, padding=1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the block."""
        return self.block(x)


class ResBlock(nn.Module):
    """Two 3x3 convolutions with an identity skip connection; keeps the shape (N, C, H, W)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(channels, channels, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(channels),
            nn.ReLU(inplace=True),
            nn.Conv2d(channels, channels, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(channels),
        )
        # Start the residual branch at zero, so the block begins as the identity and deep
        # stacks train from the first step (Goyal et al., 2017).
        nn.init.zeros_(self.body[-1].weight)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return relu(x + body(x)); the skip is written here, not hidden in a container."""
        return self.act(x + self.body(x))


class GlobalAvgPool(nn.Module):
    """Average over the spatial dimensions: (N, C, H, W) -> (N, C), whatever H and W are."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Pool and flatten."""
        return x.mean(dim=(2, 3))
