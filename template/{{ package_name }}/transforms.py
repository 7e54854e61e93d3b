"""Image preprocessing: the size and statistics a network expects, and the train and eval pipelines.

A Preprocessing is decided once, when a run starts (from pretrained weights, or the built-in
defaults), saved in every checkpoint, and read back by test.py, predict.py and export.py, so
every script feeds the model exactly what training fed it.
"""

from dataclasses import asdict, dataclass
from typing import Any

import torch
from torchvision.transforms import v2

INTERPOLATIONS = {mode.value: mode for mode in v2.InterpolationMode}


@dataclass(frozen=True)
class Preprocessing:
    """How an image becomes the model's input (C, crop_size, crop_size)."""

    crop_size: int  # the model sees crop_size x crop_size images
    resize_size: int | None = None  # None: squash the whole image to crop_size; else the shorter side, then crop
    mean: tuple[float, ...] = (0.5,)  # one value applies to every channel
    std: tuple[float, ...] = (0.5,)
    interpolation: str = "bilinear"  # a torchvision InterpolationMode value
    channels: int | None = None  # convert images to this many channels (3 for torchvision backbones); None: keep

    def __post_init__(self) -> None:
        # Checkpoints and JSON give lists back; keep the dataclass comparable.
        object.__setattr__(self, "mean", tuple(self.mean))
        object.__setattr__(self, "std", tuple(self.std))

    def to_dict(self) -> dict[str, Any]:
        """Plain types only, so torch.load(weights_only=True) can read it back."""
        return asdict(self)

    def resized(self, crop_size: int) -> "Preprocessing":
        """The same pipeline at another crop size; the resize keeps its ratio to the crop (232/224 -> 37/32)."""
        resize = None if self.resize_size is None else round(crop_size * self.resize_size / self.crop_size)
        return Preprocessing(crop_size, resize, self.mean, self.std, self.interpolation, self.channels)


def build_transforms(prep: Preprocessing, train: bool, gray: bool = False) -> v2.Compose:
    """The pipeline from a PIL image or uint8 tensor to a normalised float tensor (C, crop, crop).

    Evaluation resizes (the whole image to the crop size, or the shorter side to resize_size and
    then the centre crop). Training takes a random crop of the same scale instead of the centre,
    and flips horizontally. `gray`: the source images have one channel, converted to
    prep.channels when that is 3.
    """
    interpolation = INTERPOLATIONS[prep.interpolation]
    steps: list[v2.Transform] = [v2.ToImage()]
    if gray and prep.channels == 3:
        steps.append(v2.RGB())  # a pretrained network wants three channels: repeat the gray one
    if prep.resize_size is None:
        steps.append(v2.Resize((prep.crop_size, prep.crop_size), interpolation=interpolation, antialias=True))
    else:
        steps.append(v2.Resize(prep.resize_size, interpolation=interpolation, antialias=True))
        steps.append(v2.RandomCrop(prep.crop_size) if train else v2.CenterCrop(prep.crop_size))
    if train:
        steps.append(v2.RandomHorizontalFlip())
    steps += [v2.ToDtype(torch.float32, scale=True), v2.Normalize(list(prep.mean), list(prep.std))]
    return v2.Compose(steps)


def from_weights(transforms: Any, channels: int = 3) -> Preprocessing:
    """The evaluation preprocessing of torchvision weights, from their `weights.transforms()`."""
    return Preprocessing(
        crop_size=transforms.crop_size[0],
        resize_size=transforms.resize_size[0],
        mean=tuple(transforms.mean),
        std=tuple(transforms.std),
        interpolation=transforms.interpolation.value,
        channels=channels,
    )


def from_checkpoint(state: dict[str, Any]) -> Preprocessing:
    """The preprocessing a checkpoint was trained with (its --img-size alone, for checkpoints that predate it)."""
    if "preprocessing" in state:
        return Preprocessing(**state["preprocessing"])
    return Preprocessing(crop_size=state["args"]["img_size"])
