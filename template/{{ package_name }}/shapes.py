"""The built-in dataset: coloured shapes on noise, drawn from a seed; no download, no files.

Six classes a small network learns to about 99% in a few minutes on a CPU.
"""

import torch
from torch.utils.data import Dataset
from torchvision.transforms import v2

SHAPES = ("circle", "square", "triangle", "cross", "ring", "diamond")
MAX_RENDERED_BYTES = 256 * 2**20  # a split that fits is drawn once, up front; a larger one on each access


class SyntheticShapes(Dataset):
    """Item i: (uint8 image (3, S, S), label i % 6), a coloured shape on a noisy background from (seed, i) alone.

    Drawing costs more than a small network's step, so a split within MAX_RENDERED_BYTES is drawn once,
    up front. `textures`: render_shape's noise, gradient, stripes.
    """

    def __init__(
        self, size: int, img_size: int, seed: int, transform: v2.Transform | None = None, **textures: float
    ) -> None:
        self.size, self.img_size, self.seed, self.transform, self.textures = size, img_size, seed, transform, textures
        self.classes = list(SHAPES)
        fits = size * 3 * img_size * img_size <= MAX_RENDERED_BYTES
        self.images = torch.stack([self.render(index) for index in range(size)]) if fits else None  # (N, 3, S, S)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image = self.render(index) if self.images is None else self.images[index].clone()  # no transform writes in it
        return image if self.transform is None else self.transform(image), index % len(SHAPES)

    def render(self, index: int) -> torch.Tensor:
        """Draw item `index`'s image, uint8 (3, S, S), from its own generator."""
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        return render_shape(SHAPES[index % len(SHAPES)], self.img_size, gen, **self.textures)


def render_shape(
    shape: str, img_size: int, gen: torch.Generator, *, noise: float = 0.2, gradient: float = 0.0, stripes: float = 0.0
) -> torch.Tensor:
    """Draw one shape with a random centre, size and colour; returns uint8 (3, img_size, img_size).

    `noise`: the std of white noise over the image. `gradient`: the background's change in brightness across
    the image. `stripes`: the amplitude of stripes on the shape (3 to 8 pixels apart). Directions are random.
    """

    def uniform(low: float, high: float) -> float:
        return low + (high - low) * torch.rand((), generator=gen).item()

    radius = uniform(0.15, 0.4) * img_size
    cx, cy = uniform(radius, img_size - radius), uniform(radius, img_size - radius)
    coords = torch.arange(img_size, dtype=torch.float32) + 0.5
    dy, dx = coords[:, None] - cy, coords[None, :] - cx  # (S, 1), (1, S): broadcast to (S, S)
    dist2 = dx**2 + dy**2
    if shape == "circle":
        mask = dist2 <= radius**2
    elif shape == "ring":
        mask = (dist2 <= radius**2) & (dist2 >= (0.6 * radius) ** 2)
    elif shape == "square":
        mask = (dx.abs() <= 0.85 * radius) & (dy.abs() <= 0.85 * radius)
    elif shape == "diamond":
        mask = dx.abs() + dy.abs() <= 1.1 * radius
    elif shape == "cross":
        arm = radius / 3
        mask = ((dx.abs() <= arm) & (dy.abs() <= radius)) | ((dy.abs() <= arm) & (dx.abs() <= radius))
    elif shape == "triangle":  # apex up: half-width grows from 0 at the top to radius at the bottom
        mask = (dy >= -radius) & (dy <= radius) & (dx.abs() <= (dy + radius) / 2)
    else:
        raise ValueError(f"unknown shape {shape!r}; expected one of {SHAPES}")
    background = torch.rand(3, 1, 1, generator=gen)
    # Any colour, but at least 0.3 away from the background in every channel: visible, not trivial.
    foreground = (background + 0.3 + 0.4 * torch.rand(3, 1, 1, generator=gen)) % 1.0
    if gradient > 0:  # the background brightens by about `gradient` across the image, in a random direction
        angle = torch.tensor(uniform(0, 2 * torch.pi))
        centred = coords / img_size - 0.5  # (S,): -0.5 .. 0.5
        background = background + gradient * (centred[None, :] * angle.cos() + centred[:, None] * angle.sin())
    if stripes > 0:
        theta, period = torch.tensor(uniform(0, torch.pi)), uniform(3.0, 8.0)
        wave = torch.sin(2 * torch.pi * (dx * theta.cos() + dy * theta.sin()) / period)  # (S, S)
        foreground = foreground + stripes * wave  # (3, S, S)
    image = torch.where(mask, foreground, background)  # (3, S, S)
    if noise > 0:
        image = image + noise * torch.randn(3, img_size, img_size, generator=gen)
    return (image.clamp(0, 1) * 255).round().to(torch.uint8)
