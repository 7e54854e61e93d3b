"""The dataset module: (degraded, clean) float32 pairs in [0, 1] of the built-in shapes or of image files.

Every random draw comes from torch's global generator, seeded per item (samplers.py).
"""

import os
import zlib
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset, default_collate
from torchvision.transforms import v2
from torchvision.transforms.v2 import InterpolationMode
from torchvision.transforms.v2.functional import resize

from . import UsageError
from .degradations import Degradation, degrade
from .harness.images import IMAGE_EXTENSIONS, SkipsUnreadable, is_hidden, list_images
from .harness.samplers import fixed_seed, hold_out, sample_seed
from .shapes import SyntheticShapes

CLEAN_GRADIENT = 0.6  # how much the built-in images' background brightens across the image
CLEAN_STRIPES = 0.15  # the amplitude of the striped texture on their shapes
SHAPES_SIZE, PHOTO_PATCH_SIZE = 32, 64  # pixels: --patch-size's defaults, without and with --data-dir
PATCHES_PER_EPOCH = 1024  # --data-dir: training crops an epoch (at least one per image), as restoration codebases count
SPLIT_NAMES = {"train", "training", "val", "valid", "validation", "test", "testing"}  # folder names, any case
PAIR_NAMES = {"clean", "noisy", "input", "target", "gt", "lq", "hq", "lr", "hr", "blur", "blurry", "sharp", "degraded"}
FLIPS = v2.Compose([v2.RandomHorizontalFlip(), v2.RandomVerticalFlip()])  # each with probability 1/2


def degraded_pair(clean: torch.Tensor, d: Degradation, train: bool, val_seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(degraded, clean) from `clean` (3, S, S): flipped at random in training; in validation unflipped, seeded."""
    if not train:
        with fixed_seed(val_seed):
            return degrade(clean, d), clean
    clean = FLIPS(clean)  # (3, S, S)
    return degrade(clean, d), clean


def to_float(image: torch.Tensor) -> torch.Tensor:
    """A uint8 image (C, H, W), as images.read_image() gives it, as a float tensor (C, H, W) in [0, 1]."""
    return image.float() / 255


class DegradedShapes(Dataset):
    """SyntheticShapes' images as (degraded, clean) items; item i depends only on (seed, i)."""

    def __init__(self, size: int, img_size: int, seed: int, degradation: Degradation, train: bool) -> None:
        # No white noise (it could not be told from the noise to remove): slopes, edges and stripes instead.
        self.shapes = SyntheticShapes(size, img_size, seed, noise=0.0, gradient=CLEAN_GRADIENT, stripes=CLEAN_STRIPES)
        self.seed, self.degradation, self.train = seed, degradation, train

    def __len__(self) -> int:
        return len(self.shapes)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        clean = to_float(self.shapes[index][0])  # (3, S, S)
        return degraded_pair(clean, self.degradation, self.train, sample_seed(self.seed, 0, index))


def image_files(root: Path) -> list[str]:
    """Every image file under `root` (any nesting), sorted; UsageError if `root` is no folder or holds none."""
    if not root.is_dir():
        what = "is a file, not a folder" if root.exists() else "does not exist"
        raise UsageError(f"image folder {root} {what} (expected image files, or DIR/train/ and DIR/val/)")
    paths = [str(path) for path in list_images(root)]
    if not paths:
        raise UsageError(f"image folder {root} has no images (none of {' '.join(IMAGE_EXTENSIONS)} under it)")
    return paths


def held_out_images(data_dir: Path, fraction: float) -> list[str]:
    """`fraction` of data_dir's images (relative paths, samplers.hold_out), to validate; [] if it has train/ or val/.

    UsageError for folders named like other splits (valid/, Train/) or like pairs (noisy/ and clean/).
    """
    folders = sorted(path.name for path in data_dir.glob("*") if path.is_dir() and not is_hidden(path.name))
    splits = [(data_dir / split).is_dir() for split in ("train", "val")]
    if folders and {name.lower() for name in folders} <= SPLIT_NAMES and not all(splits):  # train/ and valid/, say
        raise UsageError(f"{data_dir} holds {', '.join(folders)}: name the splits train/ and val/")
    if any(splits):
        for split in ("train", "val"):
            refuse_pairs(data_dir / split)
        return []
    refuse_pairs(data_dir)
    paths = [Path(path).relative_to(data_dir).as_posix() for path in image_files(data_dir)]
    if len(paths) < 2:
        raise UsageError(f"{data_dir} has 1 image: holding out a validation split needs 2 or more")
    return sorted(hold_out(paths, fraction))


def refuse_pairs(folder: Path) -> None:
    """UsageError for a folder of pairs (noisy/ beside clean/): train.py makes its own degraded copies."""
    folders = sorted(path.name for path in folder.glob("*") if path.is_dir() and not is_hidden(path.name))
    if len({name.lower() for name in folders} & PAIR_NAMES) >= 2:
        raise UsageError(f"{folder} holds {', '.join(folders)}: pairs are not read; give --data-dir the clean images")


class ImagePatches(SkipsUnreadable, Dataset):
    """Patches of the image files `paths` as (degraded, clean) items; smaller images are enlarged (bicubic) first.

    Training: `patches_per_epoch` items, or one per file where there are more (each file cut every epoch),
    item i a random patch of file i % files. Validation: each file's centre patch, degraded by a seed from its path
    below `root` (by default the folder that holds them all). Unreadable files are skipped as
    images.SkipsUnreadable says.
    """

    def __init__(
        self,
        paths: list[str],
        patch_size: int,
        degradation: Degradation,
        train: bool,
        patches_per_epoch: int = PATCHES_PER_EPOCH,
        strict: bool = False,
        root: Path | None = None,
    ) -> None:
        if patch_size < 1 or patches_per_epoch < 1:
            raise UsageError(f"patch size {patch_size} and patches per epoch {patches_per_epoch} must be >= 1")
        self.paths, self.patch_size, self.degradation, self.train = paths, patch_size, degradation, train
        self.length = max(patches_per_epoch, len(self.paths)) if train else len(self.paths)
        common = os.path.commonpath([os.path.dirname(path) for path in paths]) if paths else ""
        self.track_unreadable(self.paths, str(root or common), strict=strict, substitute=train)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        if not 0 <= index < len(self):  # substitution would wrap around: end iteration here
            raise IndexError(f"item {index} of {len(self)}")
        file_index = index % len(self.paths)
        clean = self.first_readable(file_index, self._clean)  # (3, P, P) or None
        # Validation degrades an image by its path below the data's folder: alike wherever that folder lies, whatever
        # else it holds, and unlike for a.png of one subfolder and a.png of another.
        seed = sample_seed(0, 0, zlib.crc32(Path(self.paths[file_index]).relative_to(self.root).as_posix().encode()))
        return None if clean is None else degraded_pair(clean, self.degradation, self.train, seed)

    def _clean(self, file_index: int) -> torch.Tensor | None:
        """File `file_index`'s patch, float (3, P, P) in [0, 1]: random in training, central in validation."""
        image = self.open_file(file_index, self.paths[file_index])
        if image is None:
            return None
        size = self.patch_size
        if min(image.shape[-2:]) < size:
            image = resize(image, [size], InterpolationMode.BICUBIC)  # the shorter side becomes `size`
        crop = v2.RandomCrop(size) if self.train else v2.CenterCrop(size)  # RandomCrop draws from the global generator
        return to_float(crop(image))  # (3, P, P)


class WholeImages(ImagePatches):
    """The image files `paths` whole, as (degraded, clean) items (3, H, W), degraded alike every time."""

    def __init__(
        self, paths: list[str], degradation: Degradation, strict: bool = False, root: Path | None = None
    ) -> None:
        super().__init__(paths, 1, degradation, train=False, strict=strict, root=root)

    def _clean(self, file_index: int) -> torch.Tensor | None:
        """File `file_index` whole, float (3, H, W) in [0, 1]; None if it cannot be read."""
        image = self.open_file(file_index, self.paths[file_index])
        return None if image is None else to_float(image)


def build_split(
    data_dir: Path | None,
    train: bool,
    degradation: Degradation,
    patch_size: int,
    *,
    held_out: list[str] | None = None,
    patches_per_epoch: int = PATCHES_PER_EPOCH,
    strict: bool = False,
    seed: int = 0,
    train_size: int = 12_000,
    val_size: int = 2_000,
) -> Dataset:
    """The training split (`train`) or the validation split of (degraded, clean) items, and only that one.

    Without `data_dir`, DegradedShapes (a seed per split); with it, ImagePatches of data_dir/train or /val, or
    of the `held_out` images or the rest. UsageError on a missing or empty folder, or a held-out image gone.
    """
    if data_dir is None:
        size, split_seed = (train_size, 2 * seed) if train else (val_size, 2 * seed + 1)
        return DegradedShapes(size, patch_size, split_seed, degradation, train)
    data_dir = Path(data_dir)
    if not held_out:
        paths = image_files(data_dir / ("train" if train else "val"))
    elif train:  # every other image, those added since the split was chosen too
        held = set(held_out)
        paths = [path for path in image_files(data_dir) if Path(path).relative_to(data_dir).as_posix() not in held]
        if not paths:
            raise UsageError(f"{data_dir} has no images left to train on besides the {len(held)} held out")
    elif missing := [path for path in held_out if not (data_dir / path).is_file()]:
        raise UsageError(f"{data_dir} lacks {len(missing)} of the run's held-out images, e.g. {missing[0]}")
    else:
        paths = [str(data_dir / path) for path in held_out]
    return ImagePatches(paths, patch_size, degradation, train, patches_per_epoch, strict=strict, root=data_dir)


def run_options(args: dict[str, Any]) -> dict[str, Any]:
    """build_split()'s options that a run's flags set: vars(args), or a checkpoint's "args" (0.2.0's lack one)."""
    return {
        "patch_size": args["patch_size"],
        "patches_per_epoch": args.get("patches_per_epoch", PATCHES_PER_EPOCH),  # counts training crops only
        "seed": args["seed"],
        "train_size": args["shapes_train_size"],
        "val_size": args["shapes_val_size"],
    }


def collate_pairs(samples: list[tuple[torch.Tensor, torch.Tensor, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack Seeded items into (degraded (N, 3, S, S), clean (N, 3, S, S)); their seeds have done their work."""
    degraded, clean, _ = default_collate(samples)
    return degraded, clean
