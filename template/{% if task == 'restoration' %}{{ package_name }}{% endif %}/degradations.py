"""Degradations: what turns a clean image into the one the restorer learns to repair.

Only noise and mix draw random numbers, from torch's global generator (seeded per sample: samplers.py).
"""

import io
import math
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch
from PIL import Image
from torchvision.transforms.v2 import InterpolationMode
from torchvision.transforms.v2.functional import gaussian_blur, pil_to_tensor, resize

from . import UsageError

DEGRADATIONS = ("noise", "blur", "downscale", "jpeg", "mix")
MIXED = tuple(kind for kind in DEGRADATIONS if kind != "mix")  # what "mix" chooses from, one per image


@dataclass(frozen=True)
class Degradation:
    """Which degradation (`kind`, one of DEGRADATIONS) and how strong each one is; "mix" picks one of the others."""

    kind: str = "noise"
    noise_sigma: float = 0.1  # std of the added Gaussian noise, on the [0, 1] scale
    blur_sigma: float = 1.5  # std of the Gaussian blur, in pixels
    scale: int = 2  # downscale shrinks by this whole factor and enlarges back (bicubic both ways)
    jpeg_quality: int = 30  # the JPEG encoder's quality, 1 (worst) to 95

    def __post_init__(self) -> None:
        if self.kind not in DEGRADATIONS:
            raise UsageError(f"unknown degradation {self.kind!r}; choose one of {', '.join(DEGRADATIONS)}")
        for flag, value, ok, need in (
            ("--noise-sigma", self.noise_sigma, self.noise_sigma > 0, "a standard deviation > 0"),  # NaN fails too
            ("--blur-sigma", self.blur_sigma, self.blur_sigma > 0, "a standard deviation > 0"),
            ("--scale", self.scale, isinstance(self.scale, int) and self.scale >= 2, "a whole factor >= 2"),
            ("--jpeg-quality", self.jpeg_quality, self.jpeg_quality in range(1, 96), "a whole number from 1 to 95"),
        ):
            if not ok:
                raise UsageError(f"{flag} {value}: need {need}")

    def to_dict(self) -> dict[str, Any]:
        """Plain types only, so torch.load(weights_only=True) can read it back: Degradation(**d.to_dict()) == d."""
        return asdict(self)


def degrade(clean: torch.Tensor, d: Degradation) -> torch.Tensor:
    """`clean` (3, H, W) in [0, 1] degraded as `d` says: float32 (3, H, W), clamped to [0, 1]."""
    clean = clean.float()
    if d.kind == "mix":
        d = replace(d, kind=MIXED[int(torch.randint(len(MIXED), ()))])
    if d.kind == "noise":
        degraded = clean + d.noise_sigma * torch.randn(clean.shape)  # (3, H, W)
    elif d.kind == "blur":
        # The kernel reaches 3 sigma either side, cut to what reflecting a small image's edges allows.
        radii = [min(math.ceil(3 * d.blur_sigma), side - 1) for side in clean.shape[:0:-1]]  # (x, y)
        degraded = gaussian_blur(clean, [2 * radius + 1 for radius in radii], [d.blur_sigma] * 2)
    elif d.kind == "downscale":
        # Antialiased bicubic down to (H // scale, W // scale), at least one pixel, and back up to (H, W).
        size = list(clean.shape[-2:])
        small = resize(clean, [max(1, side // d.scale) for side in size], InterpolationMode.BICUBIC, antialias=True)
        degraded = resize(small, size, InterpolationMode.BICUBIC, antialias=True)  # may overshoot [0, 1] at edges
    elif d.kind == "jpeg":  # PIL's JPEG codec (4:2:0 chroma), in memory
        pixels = (clean.clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0)  # (H, W, 3) uint8
        buffer = io.BytesIO()
        Image.fromarray(pixels.numpy()).save(buffer, "JPEG", quality=d.jpeg_quality)
        with Image.open(buffer) as decoded:
            degraded = pil_to_tensor(decoded.convert("RGB")).float() / 255  # (3, H, W), multiples of 1 / 255
    else:  # a kind added to DEGRADATIONS without its branch here
        raise ValueError(f"degrade() has no branch for the degradation {d.kind!r}")
    return degraded.clamp(0, 1)
