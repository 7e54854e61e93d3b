"""The dataset module: datasets and loaders (their transforms: transforms.py; samplers: samplers.py).

Three sources, chosen with train.py's --dataset:
  shapes        built-in synthetic coloured shapes; no download, learnable in about a minute
  imagefolder   DIR/train/<class>/*.jpg and DIR/val/<class>/*.jpg (selected by --data-dir DIR alone);
                files that cannot be read are skipped (images.py)
  cifar10, mnist, fashionmnist   torchvision datasets under --data-dir, fetched only with --download
"""

import contextlib
import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import torch
from prefetch_generator import BackgroundGenerator
from torch.utils.data import DataLoader, Dataset, Sampler, default_collate
from torchvision import datasets
from torchvision.transforms import v2

from . import UsageError
from .images import ImageFiles
from .samplers import Seeded, SeededSampler, ShardSampler, ShuffleSampler
from .shapes import SHAPES, SyntheticShapes
from .transforms import Augmentation, BatchMix, Preprocessing, build_transforms

DATASETS = ("shapes", "imagefolder", "cifar10", "mnist", "fashionmnist")
TORCHVISION_DATASETS = {
    "cifar10": (datasets.CIFAR10, 3),
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
    """Build the train split (augmented as `augment` says, if given) or the validation split, and only that one.

    Only this split's files are read: evaluating needs no training data. Images are preprocessed
    as `prep` says. Raises UsageError on a missing or empty source. An image folder's unreadable
    files are skipped (training reads the next file in their place), or with `strict` raise
    images.UnreadableImageError.
    """
    if download and name not in TORCHVISION_DATASETS:
        raise UsageError("--download applies only to --dataset cifar10, mnist or fashionmnist")
    gray = name in TORCHVISION_DATASETS and TORCHVISION_DATASETS[name][1] == 1
    transform = build_transforms(prep, augment if train else None, gray=gray, sized=name == "shapes")
    if name == "shapes":
        # Distinct seeds per split, so no validation image is a training image.
        size, split_seed = (train_size, 2 * seed) if train else (val_size, 2 * seed + 1)
        return Split(SyntheticShapes(size, prep.crop_size, seed=split_seed, transform=transform), list(SHAPES), 3)
    if data_dir is None:
        raise UsageError(f"--dataset {name} needs --data-dir")
    if name == "imagefolder":
        folder = _image_folder(data_dir / ("train" if train else "val"), transform, strict, substitute=train)
        return Split(folder, folder.classes, 3)
    if name in TORCHVISION_DATASETS:
        split = _torchvision_split(name, data_dir, train, transform, download)
        return split._replace(in_channels=prep.channels or split.in_channels)
    raise UsageError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")


def build_datasets(
    name: str,
    data_dir: Path | None,
    prep: Preprocessing,
    *,
    augment: Augmentation | None = None,
    download: bool = False,
    strict: bool = False,
    seed: int = 0,
    train_size: int = 12_000,
    val_size: int = 2_000,
) -> DataSplits:
    """Build the train (augmented) and validation splits with build_split(); they must have the same classes."""
    options = {"download": download, "strict": strict, "seed": seed, "train_size": train_size, "val_size": val_size}
    train = build_split(name, data_dir, prep, train=True, augment=augment or Augmentation(), **options)
    val = build_split(name, data_dir, prep, train=False, **options)
    if train.classes != val.classes:
        raise UsageError(f"{data_dir}/train and {data_dir}/val have different class folders")
    return DataSplits(train.dataset, val.dataset, train.classes, train.in_channels)


def _torchvision_split(name: str, data_dir: Path, train: bool, transform: v2.Compose, download: bool) -> Split:
    """A torchvision dataset's split; a failed download leaves data_dir as it was, bar partial files."""
    cls, channels = TORCHVISION_DATASETS[name]
    before = _folders(data_dir) if download else set()
    try:
        dataset = cls(str(data_dir), train=train, transform=transform, download=download)
    except (OSError, RuntimeError) as err:  # a URLError is an OSError; MNIST reports it as a RuntimeError
        if not download:  # torchvision's "Dataset not found or corrupted"
            raise UsageError(f"{name} not found under {data_dir}; pass --download to fetch it ({err})") from None
        _remove_new_empty_folders(data_dir, before)
        # The last line is the error itself: MNIST's message first names the file and each mirror tried.
        reason = (str(err).strip().splitlines() or [type(err).__name__])[-1]
        raise UsageError(
            f"the download of {name} failed ({reason}); check the network, or put the files under {data_dir} yourself"
        ) from None
    return Split(dataset, list(dataset.classes), channels)


def _folders(data_dir: Path) -> set[Path]:
    """The folders that exist now among data_dir, its parents and everything under it."""
    under = [path for path in data_dir.rglob("*") if path.is_dir()] if data_dir.is_dir() else []
    return {path for path in (data_dir, *data_dir.parents) if path.is_dir()} | set(under)


def _remove_new_empty_folders(data_dir: Path, before: set[Path]) -> None:
    """Remove the folders made since `before` (by a failed download) that are empty, deepest first."""
    for folder in sorted(_folders(data_dir) - before, key=lambda path: len(path.parts), reverse=True):
        with contextlib.suppress(OSError):  # rmdir refuses a folder with a file in it: that folder stays
            folder.rmdir()


def _image_folder(root: Path, transform: v2.Compose, strict: bool, substitute: bool) -> ImageFiles:
    if not root.is_dir():
        raise UsageError(f"image folder {root} does not exist (expected DIR/train/<class>/ and DIR/val/<class>/)")
    try:
        return ImageFiles(str(root), transform, strict=strict, substitute=substitute)
    except FileNotFoundError as err:  # no class folders, or no images in them
        raise UsageError(f"image folder {root} has no images: {err}") from None


def build_loader(
    dataset: Dataset,
    batch_size: int,
    *,
    sampler: Sampler | None = None,
    train: bool = False,
    num_workers: int = 0,
    pin_memory: bool = False,
    collate_fn: BatchMix | None = None,
) -> DataLoader:
    """Wrap a dataset in a DataLoader.

    Training drops the last incomplete batch (a batch of one breaks batch norm); evaluation
    keeps every sample that can be read (collate_readable), in order unless a sampler is given.
    The loader's own generator seeds its workers, so creating an iterator draws nothing from
    torch's global generator.
    """
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        drop_last=train,
        num_workers=num_workers,
        pin_memory=pin_memory,
        collate_fn=collate_fn or (None if train else collate_readable),
        generator=torch.Generator().manual_seed(0),
        # Workers stay alive across epochs instead of being forked again each epoch.
        persistent_workers=num_workers > 0,
    )


def build_loaders(
    splits: DataSplits,
    batch_size: int,
    *,
    seed: int,
    num_workers: int = 0,
    pin_memory: bool = False,
    mixup_alpha: float = 0.0,
    cutmix_alpha: float = 0.0,
    label_smoothing: float = 0.0,
    rank: int = 0,
    world_size: int = 1,
) -> tuple[DataLoader, DataLoader]:
    """Training loader (a new shuffle each epoch, seeded augmentation, optional mixup/cutmix) and validation loader.

    With world_size > 1 each process gets its share: training batches padded to the same
    count on every rank, validation split without padding so each sample is counted once.
    label_smoothing applies to mixed targets; without mixing the loss smooths the labels itself.
    """
    mix = BatchMix(len(splits.classes), mixup_alpha, cutmix_alpha, label_smoothing)
    train_sampler = ShuffleSampler(len(splits.train), seed, rank, world_size)
    val_sampler = ShardSampler(len(splits.val), rank, world_size) if world_size > 1 else None
    common = {"num_workers": num_workers, "pin_memory": pin_memory}
    seeded, sampler = Seeded(splits.train), SeededSampler(train_sampler)  # items (image, label, seed)
    train = build_loader(seeded, batch_size, sampler=sampler, train=True, collate_fn=mix, **common)
    val = build_loader(splits.val, batch_size, sampler=val_sampler, **common)
    if len(train) == 0:  # the last partial batch is dropped: a share smaller than a batch gives none
        if world_size == 1:
            raise UsageError(f"the training set has {len(splits.train)} images, fewer than one batch of {batch_size}")
        raise UsageError(
            f"the training set has {len(splits.train)} images, {train_sampler.per_rank} per process, "
            f"fewer than one batch of {batch_size} (--batch-size is per process)"
        )
    return train, val


def collate_readable(items: list[tuple[torch.Tensor, int] | None]) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Stack the items that are not None (unreadable files); None when none is left."""
    readable = [item for item in items if item is not None]
    return default_collate(readable) if readable else None


def unreadable_flags(loader: DataLoader) -> torch.Tensor:
    """A flag per file of the loader's dataset, set for the files found unreadable so far ((0,) if it has no files)."""
    dataset = loader.dataset.dataset if isinstance(loader.dataset, Seeded) else loader.dataset
    return dataset.unreadable if isinstance(dataset, ImageFiles) else torch.zeros(0, dtype=torch.bool)


class _Failure(NamedTuple):
    error: BaseException


def prefetch_depth(requested: int | None, device: torch.device, num_workers: int) -> int:
    """Batches the BackgroundGenerator thread loads ahead: `requested`, else 2 where the thread pays, else 0.

    It pays on a GPU with num_workers 0: the loop's thread would load each batch while the GPU
    waits. On the CPU, torch's compute threads already use every core and a loading thread only
    competes with them (it made the loop 6-20 % slower on 2 cores); with DataLoader workers, other
    processes already load ahead.
    """
    if requested is not None:
        return requested
    return 2 if device.type != "cpu" and num_workers == 0 else 0


@contextlib.contextmanager
def background_batches(loader: DataLoader, depth: int) -> Iterator[Iterator]:
    """Iterate `loader` in a BackgroundGenerator thread that keeps `depth` batches ready.

    depth 0 iterates in the caller's thread. On exit, even after a `break` or an exception,
    the thread is stopped and joined, so no thread or loader iterator is left behind; an
    error raised while loading is re-raised in the caller instead of hanging it.
    """
    if depth == 0:
        yield iter(loader)
        return
    stop = threading.Event()

    def produce() -> Iterator:
        try:
            for batch in loader:
                if stop.is_set():
                    return
                yield batch
        except Exception as err:  # noqa: BLE001 - handed to the consumer, which re-raises it
            yield _Failure(err)

    thread = BackgroundGenerator(produce(), max_prefetch=depth)

    def consume() -> Iterator:
        for item in thread:
            if isinstance(item, _Failure):
                raise item.error
            yield item

    try:
        yield consume()
    finally:
        stop.set()
        while thread.is_alive():  # take batches so a pending put returns and the producer sees `stop`
            with contextlib.suppress(queue.Empty):
                thread.queue.get(timeout=0.05)
        thread.join()
