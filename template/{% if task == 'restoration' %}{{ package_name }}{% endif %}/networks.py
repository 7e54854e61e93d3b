"""Networks: a U-Net composed from the blocks in layers.py, and a frozen VGG16 feature extractor.

The restoring network has `multiple`: what its input's height and width must be multiples of (1 for any size).
The model file pads to it, and the scripts tile by it (test.py, predict.py, export.py read model.network.multiple).
"""

import torch
import torchvision
from torch import nn

from . import UsageError
from .layers import ConvBlock, Down, ResBlock, Up


class UNet(nn.Module):
    """A U-Net: stem, one Down per further width, Ups back with skip connections, 1x1 output conv.

    (N, in_channels, H, W) -> (N, out_channels, H, W), H and W multiples of `multiple`, 2 ** (len(widths) - 1).
    The output convolution starts at zero: the model adds the output to its input, so untrained it is the identity.
    """

    def __init__(self, in_channels: int, out_channels: int, widths: tuple[int, ...], blocks_per_stage: int = 1) -> None:
        super().__init__()
        if not widths:
            raise UsageError("UNet needs at least one width")
        self.multiple = 2 ** (len(widths) - 1)
        self.stem = nn.Sequential(
            ConvBlock(in_channels, widths[0]), *[ResBlock(widths[0]) for _ in range(blocks_per_stage)]
        )
        self.downs = nn.ModuleList(Down(widths[i - 1], widths[i], blocks_per_stage) for i in range(1, len(widths)))
        # The Ups run from the coarsest level back up: Up i merges width i with the skip of width i - 1.
        self.ups = nn.ModuleList(
            Up(widths[i], widths[i - 1], widths[i - 1], blocks_per_stage) for i in reversed(range(1, len(widths)))
        )
        self.head = nn.Conv2d(widths[0], out_channels, kernel_size=1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map images (N, in_channels, H, W) to (N, out_channels, H, W)."""
        height, width = x.shape[-2:]
        if height % self.multiple or width % self.multiple:
            raise UsageError(f"UNet input size {height}x{width} is not a multiple of {self.multiple}; pad the image")
        x = self.stem(x)  # (N, widths[0], H, W)
        skips = []  # the input of each Down, finest first: what the matching Up gets back
        for down in self.downs:
            skips.append(x)
            x = down(x)  # (N, widths[i], H / 2**i, W / 2**i)
        for up, skip in zip(self.ups, reversed(skips), strict=True):
            x = up(x, skip)  # (N, widths[i - 1], H / 2**(i - 1), W / 2**(i - 1))
        return self.head(x)  # (N, out_channels, H, W)


class VGGFeatures(nn.Module):
    """A frozen VGG16 with several outputs, for perceptual losses: the activations at relu1_2 ... relu4_3.

    torchvision's VGG16 features cut into nn.Sequential slices, slice i features[ends[i - 1]:ends[i]];
    `state` is torchvision's VGG16 state_dict (else random weights). No parameter requires grad, and
    train() keeps it in eval mode.
    """

    def __init__(self, state: dict[str, torch.Tensor] | None = None, ends: tuple[int, ...] = (4, 9, 16, 23)) -> None:
        super().__init__()
        features = torchvision.models.vgg.make_layers(torchvision.models.vgg.cfgs["D"])  # indices as torchvision's
        if state is not None:
            features.load_state_dict(
                {key.removeprefix("features."): value for key, value in state.items() if key.startswith("features.")}
            )
        self.slices = nn.ModuleList(features[start:end] for start, end in zip([0, *ends[:-1]], ends, strict=True))
        self.requires_grad_(False)
        self.train(False)

    def train(self, mode: bool = True) -> "VGGFeatures":
        """Stay in eval mode whatever `mode` is: this network is frozen."""
        return super().train(False)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Map images (N, 3, H, W) to one feature map per slice, shallowest first."""
        outputs = []
        for block in self.slices:
            x = block(x)  # (N, C_i, H_i, W_i): each max-pool in the slice halves H and W
            outputs.append(x)
        return outputs
