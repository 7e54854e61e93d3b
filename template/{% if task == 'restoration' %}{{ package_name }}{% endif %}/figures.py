"""Pictures of what the model does, for a person to look at: degraded | restored | clean, row by row."""

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from PIL import ImageDraw
from torchvision.transforms.v2.functional import pil_to_tensor, to_pil_image
from torchvision.utils import make_grid

GAP = 4  # pixels of white between panels and around each row
CAPTION = 14  # pixels for the caption line under each row
MIN_SIDE = 96  # pixels: smaller images are enlarged by a whole factor up to this, so that a person can see them


def captions(count: int, psnrs: tuple[Sequence[float], Sequence[float]] | None = None) -> list[str]:
    """The caption of each of `count` rows; with psnrs = (input PSNRs, restored PSNRs) in dB, both and the gain."""
    if psnrs is None:
        return ["input | restored | clean"] * count
    before, after = ([float(value) for value in values] for values in psnrs)
    if not len(before) == len(after) == count:
        raise ValueError(f"psnrs need {count} values each, got {len(before)} and {len(after)}")
    return [f"input {b:.2f} dB -> {a:.2f} dB ({a - b:+z.2f})" for b, a in zip(before, after, strict=True)]


def strips(
    degraded: torch.Tensor,
    restored: torch.Tensor,
    clean: torch.Tensor,
    psnrs: tuple[Sequence[float], Sequence[float]] | None = None,
) -> torch.Tensor:
    """One row per image (N, 3, H, W) in [0, 1], degraded | restored | clean, captioned: RGB uint8 (3, H', W').

    Panels are enlarged (nearest) by the least whole factor that brings the longer side to MIN_SIDE;
    panel k of row i starts at x = GAP + k * (w + GAP), y = GAP + i * (h + CAPTION + GAP), its caption
    at y + h. A long caption widens the picture.
    """
    factor = max(1, -(-MIN_SIDE // max(degraded.shape[-2:])))  # ceiling division
    panels = torch.stack([degraded, restored, clean], dim=1).flatten(0, 1).detach().float().cpu()  # (3N, 3, H, W)
    panels = (panels.clamp(0.0, 1.0) * 255).round().to(torch.uint8)  # row by row
    panels = panels.repeat_interleave(factor, -2).repeat_interleave(factor, -1)  # (3N, 3, h, w): nearest, enlarged
    height = panels.shape[-2]
    grid = make_grid(F.pad(panels, (0, 0, 0, CAPTION), value=255), nrow=3, padding=GAP, pad_value=255)
    lines = captions(len(degraded), psnrs)
    draw = ImageDraw.Draw(to_pil_image(grid))
    text_width = int(max(draw.textlength(line) for line in lines)) + 1
    picture = to_pil_image(F.pad(grid, (0, max(0, GAP + text_width - grid.shape[-1])), value=255))  # room for text
    draw = ImageDraw.Draw(picture)
    for row, line in enumerate(lines):
        draw.text((GAP, GAP + row * (height + CAPTION + GAP) + height + 1), line, fill=(0, 0, 0))
    return pil_to_tensor(picture)  # (3, H', W') uint8
