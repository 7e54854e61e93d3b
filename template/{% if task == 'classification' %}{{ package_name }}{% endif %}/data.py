"""The dataset module: the datasets training and evaluation read (transforms: transforms.py).

Three sources, chosen with train.py's --dataset:
  shapes        built-in synthetic coloured shapes; no download, learnable in about a minute
  imagefolder   DIR/train/<class>/*.jpg and DIR/val/<class>/*.jpg (selected by --data-dir DIR alone);
                files that cannot be read are skipped (images.py)
  cifar10, mnist, fashionmnist   torchvision datasets under --data-dir, fetched only with --download
The loaders are harness.loaders.build_split_loaders(), with transforms.BatchMix to collate training batches.
"""

import contextlib
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch.utils.data import Dataset
from torchvision import datasets
from torchvision.transforms import v2

from . import UsageError
from .harness.images import SkipsUnreadable
from .shapes import SHAPES, SyntheticShapes
from .transforms import Augmentation, Preprocessing, build_transforms

DATASETS = ("shapes", "imagefolder", "cifar10", "mnist", "fashionmnist")
TORCHVISION_DATASETS = {
    "cifar10": (datasets.CIFAR10, 3),  # the class and its images' channels
    "mnist": (datasets.MNIST, 1),
    "fashionmnist": (datasets.FashionMNIST, 1),
}


class Split(NamedTuple):
    """One dataset split plus what the model needs to know about it."""

    dataset: Dataset
    classes: list[str]
    in_channels: int


class DataSplits(NamedTuple):
    """The train and validation datasets plus what the model needs to know about them."""

    train: Dataset
    val: Dataset
    classes: list[str]
    in_channels: int


class ImageFiles(SkipsUnreadable, datasets.ImageFolder):
    """ROOT/<class>/<image> as (image, class index) items; unreadable files are skipped as SkipsUnreadable says."""

    def __init__(self, root: str, transform: v2.Compose, *, strict: bool = False, substitute: bool = False) -> None:
        super().__init__(root, transform=transform)
        self.track_unreadable(len(self.samples), strict=strict, substitute=substitute)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int] | None:
        return self.first_readable(index, self._read)

    def _read(self, index: int) -> tuple[torch.Tensor, int] | None:
        path, label = self.samples[index]
        image = self.open_file(index, path)
        return None if image is None else (self.transform(image), label)


def dataset_name(name: str | None, data_dir: Path | None) -> str:
    """The dataset to use: `name` if given, else imagefolder when there is a data dir, else shapes."""
    if name is not None:
        return name
    return "imagefolder" if data_dir is not None else "shapes"


def build_split(
    name: str,
    data_dir: Path | None,
    prep: Preprocessing,
    train: bool,
    *,
    augment: Augmentation | None = None,
    download: bool = False,
    strict: bool = False,
    seed: int = 0,
    train_size: int = 12_000,
    val_size: int = 2_000,
) -> Split:
    """The train split (augmented as `augment` says) or the validation split, preprocessed as `prep` says.

    Only this split's files are read: evaluating needs no training data. Raises UsageError on a
    missing or empty source. `strict`: an unreadable image file raises images.UnreadableImageError.
    """
    if download and name not in TORCHVISION_DATASETS:
        raise UsageError("--download applies only to --dataset cifar10, mnist or fashionmnist")
    channels = TORCHVISION_DATASETS[name][1] if name in TORCHVISION_DATASETS else 3
    transform = build_transforms(prep, augment if train else None, gray=channels == 1, sized=name == "shapes")
    if name == "shapes":
        # Distinct seeds per split, so no validation image is a training image.
        size, split_seed = (train_size, 2 * seed) if train else (val_size, 2 * seed + 1)
        return Split(SyntheticShapes(size, prep.crop_size, seed=split_seed, transform=transform), list(SHAPES), 3)
    if name not in DATASETS:
        raise UsageError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
    if data_dir is None:
        raise UsageError(f"--dataset {name} needs --data-dir")
    if name == "imagefolder":
        root = data_dir / ("train" if train else "val")
        if not root.is_dir():
            raise UsageError(f"image folder {root} does not exist (expected DIR/train/<class>/ and DIR/val/<class>/)")
        try:
            folder = ImageFiles(str(root), transform, strict=strict, substitute=train)
        except FileNotFoundError as err:  # no class folders, or no images in them
            raise UsageError(f"image folder {root} has no images: {err}") from None
        return Split(folder, folder.classes, 3)
    dataset = _torchvision_dataset(name, data_dir, train, transform, download)
    return Split(dataset, list(dataset.classes), prep.channels or channels)


def build_datasets(name: str, data_dir: Path | None, prep: Preprocessing, **options: Any) -> DataSplits:
    """The train and validation splits, built by build_split() with its keyword `options`; with the same classes."""
    train = build_split(name, data_dir, prep, train=True, **options)
    val = build_split(name, data_dir, prep, train=False, **options)
    if train.classes != val.classes:
        raise UsageError(f"{data_dir}/train and {data_dir}/val have different class folders")
    return DataSplits(train.dataset, val.dataset, train.classes, train.in_channels)


def _torchvision_dataset(name: str, data_dir: Path, train: bool, transform: v2.Compose, download: bool) -> Dataset:
    """A torchvision dataset's split; a failed download leaves data_dir as it was, bar partial files."""

    def folders() -> set[Path]:  # the folders among data_dir, its parents and everything under it
        under = [path for path in data_dir.rglob("*") if path.is_dir()] if data_dir.is_dir() else []
        return {path for path in (data_dir, *data_dir.parents) if path.is_dir()} | set(under)

    before = folders() if download else set()
    try:
        return TORCHVISION_DATASETS[name][0](str(data_dir), train=train, transform=transform, download=download)
    except (OSError, RuntimeError) as err:  # a URLError is an OSError; MNIST reports it as a RuntimeError
        if not download:  # torchvision's "Dataset not found or corrupted"
            raise UsageError(f"{name} not found under {data_dir}; pass --download to fetch it ({err})") from None
        for folder in sorted(folders() - before, key=lambda path: len(path.parts), reverse=True):  # deepest first
            with contextlib.suppress(OSError):  # rmdir refuses a folder with a file in it: that folder stays
                folder.rmdir()
        # The last line is the error itself: MNIST's message first names the file and each mirror tried.
        reason = (str(err).strip().splitlines() or [type(err).__name__])[-1]
        raise UsageError(
            f"the download of {name} failed ({reason}); check the network, or put the files under {data_dir} yourself"
        ) from None
