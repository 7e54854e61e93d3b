"""Evaluation shared by train.py and the scripts: one pass over a loader, then metrics; tiled restoration."""

import contextlib
import itertools
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, default_collate

from . import UsageError
from .harness import runtime
from .harness.checkpoint import unwrap
from .ops import psnr, ssim

METRICS = ("loss", "psnr", "ssim", "input_psnr", "input_ssim")
# BT.601 luma on the 16-235 scale of 255: MATLAB's rgb2ycbcr, not rounded, as BasicSR (papers' code) computes it.
LUMA_WEIGHTS = (65.481 / 255, 128.553 / 255, 24.966 / 255)
LUMA_OFFSET = 16 / 255
SSIM_WINDOW = 11  # ops.ssim's window: the smallest side it can score


@dataclass(frozen=True)
class Tiling:
    """How restore() cuts images: tiles of `size` pixels on the U-Net's grid (`multiple`), sharing `overlap` or more."""

    size: int = 256
    overlap: int = 32
    multiple: int = 1

    def __post_init__(self) -> None:
        if not self.size > 2 * self.overlap >= 0:
            raise UsageError(f"tiles need --tile > 2 * --overlap >= 0, not {self.size} and {self.overlap}")
        if self.size < self.overlap + self.multiple:  # tiles a grid step apart would leave pixels out or overlap less
            raise UsageError(f"--tile {self.size}: the U-Net's grid needs --tile >= --overlap + {self.multiple}")


@torch.no_grad()
def evaluate(
    model: nn.Module,
    loader: DataLoader,
    device: torch.device,
    autocast: contextlib.AbstractContextManager | None = None,
    channels_last: bool = False,
    *,
    tiling: Tiling | None = None,
    crop_border: int = 0,
    y_channel: bool = False,
) -> dict[str, torch.Tensor]:
    """Sums of METRICS and "samples" over `loader`'s (degraded, clean) batches, in eval mode: float64 on `device`.

    Scores restorations clamped to [0, 1] and degraded images as scored_view() shows them; skips None batches.
    (MPS, which has no float64: float32.)
    """
    was_training = model.training
    model.eval()
    total = torch.float32 if device.type == "mps" else torch.float64
    sums = {name: torch.zeros((), device=device, dtype=total) for name in (*METRICS, "samples")}
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    non_blocking = runtime.non_blocking(device)
    for batch in loader:
        if batch is None:  # every file of this batch was unreadable
            continue
        degraded, clean = (x.to(device, non_blocking=non_blocking, memory_format=memory_format) for x in batch)
        restored = restore(model, degraded, autocast, tiling).to(device)  # (N, 3, H, W) float32: the loss, metrics too
        sums["loss"] += unwrap(model).loss(restored, clean).to(total) * clean.shape[0]  # DataParallel has no .loss
        saved = restored.clamp(0.0, 1.0).mul(255).round().div(255)  # as its 8-bit PNG, which papers score
        views = [scored_view(x, crop_border, y_channel) for x in (saved, degraded, clean)]
        for prefix, images in (("", views[0]), ("input_", views[1])):
            sums[prefix + "psnr"] += psnr(images, views[2]).to(total).sum()
            sums[prefix + "ssim"] += ssim(images, views[2]).to(total).sum()
        sums["samples"] += clean.shape[0]  # a Python int: no device read
    model.train(was_training)
    return sums


def scored_view(images: torch.Tensor, crop_border: int = 0, y_channel: bool = False) -> torch.Tensor:
    """Images (N, 3, H, W) less `crop_border` pixels per side, as BT.601 luma (N, 1, H', W') with `y_channel`."""
    height, width = images.shape[-2:]
    if min(height, width) - 2 * crop_border < SSIM_WINDOW:
        less = f" less a {crop_border}-pixel border" if crop_border else ""
        raise UsageError(f"{width}x{height} images{less} are smaller than the {SSIM_WINDOW}x{SSIM_WINDOW} SSIM needs")
    images = images[..., crop_border : height - crop_border, crop_border : width - crop_border]  # (N, 3, H', W')
    if y_channel:
        weights = torch.tensor(LUMA_WEIGHTS, device=images.device, dtype=images.dtype).view(1, 3, 1, 1)
        images = (images * weights).sum(dim=1, keepdim=True) + LUMA_OFFSET  # (N, 1, H', W')
    return images


def summarize(sums: dict[str, torch.Tensor]) -> dict[str, float | int]:
    """Means of evaluate()'s sums, "psnr_gain" (psnr - input_psnr, dB) and "samples"; all 0.0 when no samples."""
    count = int(sums["samples"])  # the one device read of the whole evaluation
    means = {name: float(sums[name]) / max(1, count) for name in METRICS}
    return {"samples": count, **means, "psnr_gain": means["psnr"] - means["input_psnr"]}


@torch.no_grad()
def predict(
    model: nn.Module,
    images: torch.Tensor,
    device: torch.device,
    autocast: contextlib.AbstractContextManager | None = None,
    channels_last: bool = False,
    tiling: Tiling | None = None,
) -> torch.Tensor:
    """restore()'s result in eval mode (then the model's mode back) on the CPU, in [0, 1]; NaN where not finite."""
    was_training = model.training
    model.eval()
    if tiling is None:  # in tiles, only one tile at a time is on the device
        images = images.to(device, memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    restored = restore(model, images, autocast, tiling, device)  # (N, 3, H, W)
    model.train(was_training)
    return restored.clamp(0.0, 1.0).where(restored.isfinite(), torch.nan).cpu()  # an overflow stays one: train.py's


def preview_batch(dataset: Dataset, count: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """first_readable()'s items stacked, (degraded, clean), each (N, 3, H, W): the same every epoch, one size."""
    return tuple(default_collate(first_readable(dataset, count)))


def first_readable(dataset: Dataset, count: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The first `count` items of `dataset` that are not None (unreadable files); UsageError if no item can be read."""
    readable = (item for item in map(dataset.__getitem__, range(len(dataset))) if item is not None)
    items = list(itertools.islice(readable, count))  # reads no item past the count-th readable one
    if not items:
        raise UsageError(f"none of the {len(dataset)} validation images can be read")
    return items


@torch.no_grad()
def restore(
    model: nn.Module,
    images: torch.Tensor,
    autocast: contextlib.AbstractContextManager | None = None,
    tiling: Tiling | None = None,
    device: torch.device | None = None,
) -> torch.Tensor:
    """The model's restorations of degraded `images` (N, 3, H, W), float32, not clamped; call it in eval mode.

    Whole, on the images' device; or with `tiling`, one tile at a time on `device` (default: the
    images'), the result on the CPU. Overlaps are blended, not cropped, so no seam shows: near a
    neighbour a tile's weight falls linearly towards its edge, where the model saw padding.
    """
    autocast = autocast or contextlib.nullcontext()
    if tiling is None:
        with autocast:
            return model(images).float()
    height, width = images.shape[-2:]
    total = torch.zeros(images.shape)  # (N, 3, H, W) weighted sum of the tiles' outputs, on the CPU
    weights = torch.zeros(height, width)
    for top, tile_height in _tiles(height, tiling):
        for left, tile_width in _tiles(width, tiling):
            rows, columns = slice(top, top + tile_height), slice(left, left + tile_width)
            with autocast:
                restored = model(images[..., rows, columns].to(device or images.device))  # (N, 3, h, w)
            ramps = _ramp(top, tile_height, height, tiling.overlap), _ramp(left, tile_width, width, tiling.overlap)
            weight = ramps[0][:, None] * ramps[1]  # (h, w)
            total[..., rows, columns] += weight * restored.float().cpu()
            weights[rows, columns] += weight
    return total / weights


def _tiles(size: int, tiling: Tiling) -> list[tuple[int, int]]:
    """(start, length) of the fewest tiles along one side: starts on the grid, evenly spread, the last to the end.

    The last tile may be one grid step longer than tiling.size, sparing a tile a grid step after its neighbour.
    """
    tile, multiple = tiling.size, tiling.multiple
    stride = max(1, (tile - tiling.overlap) // multiple)  # in grid steps: the farthest apart two starts may be
    first = -(-(size - tile - multiple) // multiple)  # the earliest grid start a last tile reaches the end from
    gaps = max(0, -(-first // stride))  # tiles - 1
    if gaps == 0:
        return [(0, size)]
    last = min((size - tile) // multiple, gaps * stride)  # the last tile as near tiling.size long as the count allows
    starts = [i * last // gaps * multiple for i in range(gaps + 1)]  # neighbours a whole number of steps apart
    return [(start, tile) for start in starts[:-1]] + [(starts[-1], size - starts[-1])]


def _ramp(start: int, length: int, size: int, overlap: int) -> torch.Tensor:
    """A tile's weight (length,) along one side: 1, falling to 1 / (2 overlap) next to a neighbour; never 0."""
    weight = torch.ones(length)
    if overlap == 0:
        return weight
    rise = (torch.arange(overlap) + 0.5) / overlap  # (overlap,) from the tile's edge inward
    if start > 0:  # a neighbour before this tile
        weight[:overlap] = rise
    if start + length < size:  # a neighbour after it
        weight[-overlap:] = rise.flip(0)
    return weight
