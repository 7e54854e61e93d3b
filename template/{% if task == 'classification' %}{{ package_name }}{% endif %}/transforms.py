"""Preprocessing (what the network expects, saved in every checkpoint) and augmentation (how training varies it).

Augmentation draws from torch's generator, seeded per sample (samplers.Seeded) and per batch (BatchMix):
a run resumed mid-epoch, or with other --num-workers, sees exactly the same images.
"""

from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch.utils.data import default_collate
from torchvision.transforms import v2

from . import UsageError
from .harness.samplers import fixed_seed

AUTO_AUGMENT = ("none", "trivialaugment", "randaugment", "autoaugment", "augmix")


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
        object.__setattr__(self, "mean", tuple(self.mean))  # checkpoints and JSON give lists back
        object.__setattr__(self, "std", tuple(self.std))

    def to_dict(self) -> dict[str, Any]:
        """Plain types only, so torch.load(weights_only=True) can read it back."""
        return asdict(self)


def from_checkpoint(state: dict[str, Any]) -> Preprocessing:
    """The preprocessing a checkpoint was trained with (its --img-size alone, for checkpoints that predate it)."""
    if "preprocessing" in state:
        return Preprocessing(**state["preprocessing"])
    return Preprocessing(crop_size=state["args"]["img_size"])


@dataclass(frozen=True)
class Augmentation:
    """The random changes training makes to its images (train.py's augmentation flags)."""

    hflip: float = 0.5  # probability of a horizontal flip
    vflip: float = 0.0  # probability of a vertical flip
    resized_crop: tuple[float, float] | None = None  # RandomResizedCrop's scale range; None: crop at fixed scale
    auto_augment: str = "none"  # one of AUTO_AUGMENT
    magnitude: int = 9  # randaugment's magnitude, of 0-30
    erasing: float = 0.0  # probability of erasing a random rectangle

    def __post_init__(self) -> None:
        if self.resized_crop is not None:
            low, high = self.resized_crop
            object.__setattr__(self, "resized_crop", (low, high))  # JSON gives a list back
            if not 0 < low <= high <= 1:
                raise UsageError(f"--random-resized-crop {low} {high}: need 0 < MIN <= MAX <= 1")


def build_transforms(
    prep: Preprocessing, augment: Augmentation | None = None, gray: bool = False, sized: bool = False
) -> v2.Compose:
    """The pipeline from a PIL image or uint8 tensor to a normalised float (C, crop, crop), random with `augment`.

    `gray`: one-channel images, made three where prep.channels is 3. `sized`: uint8 tensors of the crop size
    already (the built-in shapes): the conversion and the resize, no-ops as costly as a flip, are left out.
    """
    interpolation = v2.InterpolationMode(prep.interpolation)
    size = (prep.crop_size, prep.crop_size)
    steps: list[Any] = [] if sized else [v2.ToImage()]
    if gray and prep.channels == 3:
        steps.append(v2.RGB())  # a pretrained network wants three channels: repeat the gray one
    if augment is not None and augment.resized_crop is not None:  # a random area and aspect ratio, resized
        steps.append(v2.RandomResizedCrop(size, augment.resized_crop, interpolation=interpolation, antialias=True))
    elif prep.resize_size is not None:  # the shorter side to resize_size, then a crop
        steps.append(v2.Resize(prep.resize_size, interpolation=interpolation, antialias=True))
        steps.append(v2.CenterCrop(size) if augment is None else v2.RandomCrop(size))
    elif not sized:  # the whole image squashed to the crop size
        steps.append(v2.Resize(size, interpolation=interpolation, antialias=True))
    if augment is not None:
        steps += [RandomFlip(p, dim) for p, dim in ((augment.hflip, -1), (augment.vflip, -2)) if p > 0]
        if augment.auto_augment == "randaugment":  # the policies work on uint8 images
            steps.append(v2.RandAugment(magnitude=augment.magnitude, interpolation=interpolation))
        elif augment.auto_augment != "none":  # autoaugment's policy: ImageNet's, torchvision's default
            policy = {"trivialaugment": v2.TrivialAugmentWide, "autoaugment": v2.AutoAugment, "augmix": v2.AugMix}
            steps.append(policy[augment.auto_augment](interpolation=interpolation))
    steps.append(Normalize(prep.mean, prep.std))
    if augment is not None and augment.erasing > 0:  # on the normalised image
        steps.append(v2.RandomErasing(augment.erasing))
    return v2.Compose(steps)


class RandomFlip:
    """Flip an image tensor (C, H, W) along `dim` (-1 horizontal, -2 vertical) with probability p.

    v2.RandomHorizontalFlip/RandomVerticalFlip's draw (torch.rand(1) < p), so the same images flip, without
    their per-call dispatch, which costs five times the flip itself on 32-pixel images.
    """

    def __init__(self, p: float, dim: int) -> None:
        self.p, self.dim = p, dim

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        """The image flipped, or the image itself."""
        return image.flip(self.dim) if torch.rand(1) < self.p else image


class Normalize:
    """uint8 image (C, H, W) -> float32 (image / 255 - mean) / std: v2.ToDtype(scale=True) and v2.Normalize in one.

    One fused multiply-add into a new tensor: on small images the pair's dispatch cost more than anything
    else a built-in training image went through. Float images are taken as in [0, 1].
    """

    def __init__(self, mean: tuple[float, ...], std: tuple[float, ...]) -> None:
        self.scale = 1.0 / torch.tensor(std).view(-1, 1, 1)  # (C or 1, 1, 1)
        self.shift = -torch.tensor(mean).view(-1, 1, 1) * self.scale  # (C or 1, 1, 1)
        self.uint8_scale = self.scale / 255

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        """A new float32 tensor (C, H, W); the input is left as it was."""
        image = image.as_subclass(torch.Tensor)  # a tv_tensors.Image would pay for its wrapper on every operation
        if image.dtype == torch.uint8:
            return torch.addcmul(self.shift, image, self.uint8_scale)  # shift + image * scale / 255
        return torch.addcmul(self.shift, image.float(), self.scale)


class BatchMix:
    """Collate Seeded items (image, label, seed) into (images (N, C, H, W), targets), mixing the batch when asked.

    With an alpha > 0, v2.MixUp or v2.CutMix (one at random when both are on) make the targets probabilities
    (N, num_classes), drawn from the batch's first seed; else they are class indices (N,).
    """

    def __init__(self, num_classes: int, mixup_alpha: float = 0.0, cutmix_alpha: float = 0.0) -> None:
        mixers = [v2.MixUp(alpha=mixup_alpha, num_classes=num_classes)] if mixup_alpha > 0 else []
        mixers += [v2.CutMix(alpha=cutmix_alpha, num_classes=num_classes)] if cutmix_alpha > 0 else []
        self.mix = v2.RandomChoice(mixers) if mixers else None

    def __call__(self, samples: list[tuple[torch.Tensor, int, int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Stack the images (N, C, H, W) and labels (N,), then mix them if mixing is on."""
        images, labels = default_collate([(image, label) for image, label, _ in samples])
        if self.mix is None:
            return images, labels
        with fixed_seed(samples[0][2]):
            return self.mix(images, labels)
