"""The datasets train.py and test.py read: the built-in shapes, image folders, a labels CSV or torchvision's.

Image folders are DIR/train/ and DIR/val/ of class folders, or DIR/<class>/ with a validation split held out.
"""

import contextlib
import csv
import itertools
import os
from operator import itemgetter
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch.utils.data import Dataset
from torchvision import datasets
from torchvision.transforms import v2

from . import UsageError
from .harness.images import IMAGE_EXTENSIONS, SkipsUnreadable, is_hidden, list_images
from .harness.samplers import hold_out
from .shapes import SHAPES, SyntheticShapes
from .transforms import Augmentation, Preprocessing, build_transforms

TORCHVISION_DATASETS = {
    "cifar10": (datasets.CIFAR10, 3),  # the class and its images' channels
    "mnist": (datasets.MNIST, 1),
    "fashionmnist": (datasets.FashionMNIST, 1),
}
DATASETS = ("shapes", "imagefolder", "csv", *TORCHVISION_DATASETS)
SPLIT_NAMES = {"train", "training", "val", "valid", "validation", "test", "testing"}  # folder names, any case


class DataSplits(NamedTuple):
    """The train and validation datasets (None where not asked for) plus what the model needs to know about them."""

    train: Dataset | None
    val: Dataset | None
    classes: list[str]
    in_channels: int
    held_out: list[str] = []  # the validation images when the project chose them (a run saves the list)


class ImageFiles(SkipsUnreadable, Dataset):
    """(path, class index) `samples` under `root` as (image, class index) items, read with `channels`, or skipped."""

    def __init__(
        self,
        samples: list[tuple[str, int]],
        root: Path,
        transform: v2.Compose,
        strict: bool,
        substitute: bool,
        channels: int = 3,
    ) -> None:
        self.samples, self.transform, self.channels = samples, transform, channels
        self.track_unreadable([path for path, _ in samples], str(root), strict=strict, substitute=substitute)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int] | None:
        return self.first_readable(index, self._read)

    def _read(self, index: int) -> tuple[torch.Tensor, int] | None:
        path, label = self.samples[index]
        image = self.open_file(index, path, self.channels)
        return None if image is None else (self.transform(image), label)


def dataset_name(name: str | None, data_dir: Path | None, labels: Path | None = None) -> str:
    """The dataset to use: `name` if given, else csv with a labels file, imagefolder with a data dir, else shapes."""
    return name or ("csv" if labels is not None else "imagefolder" if data_dir is not None else "shapes")


def build_datasets(
    name: str,
    data_dir: Path | None,
    prep: Preprocessing,
    *,
    splits: tuple[str, ...] = ("train", "val"),
    augment: Augmentation | None = None,
    labels: Path | None = None,
    columns: tuple[str, str] = ("image", "label"),
    val_fraction: float = 0.1,
    held_out: list[str] | None = None,
    classes: list[str] | None = None,
    channels: int = 3,
    download: bool = False,
    strict: bool = False,
    seed: int = 0,
    train_size: int = 12_000,
    val_size: int = 2_000,
) -> DataSplits:
    """The `splits` asked for (the other is None): training's augmented as `augment` says, both preprocessed by `prep`.

    Image files' validation split is DIR/val/, the CSV's split column, or the images held out (assign_splits).
    Their labels index `classes` (a trained model's: UsageError for another label), else their sorted set; they are
    read with `channels` (a trained model's: 1 for one trained on gray images).
    UsageError on a missing or empty source; `strict`: an unreadable image raises images.UnreadableImageError.
    """
    if (labels is not None) != (name == "csv"):
        raise UsageError("--labels FILE.csv and --dataset csv go together")
    if name not in DATASETS:
        raise UsageError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
    channels = TORCHVISION_DATASETS[name][1] if name in TORCHVISION_DATASETS else channels
    gray, sized = channels == 1, name == "shapes"
    transforms = {s: build_transforms(prep, augment if s == "train" else None, gray=gray, sized=sized) for s in splits}
    if name == "shapes":  # distinct seeds per split, so no validation image is a training image
        sizes = {"train": (train_size, prep.crop_size, 2 * seed), "val": (val_size, prep.crop_size, 2 * seed + 1)}
        made = {s: SyntheticShapes(*sizes[s], transform=transforms[s]) for s in splits}
        return DataSplits(made.get("train"), made.get("val"), list(SHAPES), 3)
    test_set = val_fraction == 1  # test.py's other data (train.py holds out less than all)
    if name == "csv":
        root, rows = read_labels(labels, data_dir, columns, test_set)
    elif data_dir is None:
        raise UsageError(f"--dataset {name} needs --data-dir")
    elif name == "imagefolder" and split_folders(data_dir):  # its own split
        root, rows = data_dir, [row for split in splits for row in class_folders(data_dir, split, test_set)]
    elif name == "imagefolder":
        root, rows = data_dir, class_folders(data_dir, test_set=test_set)
    else:
        made = {split: _torchvision_dataset(name, data_dir, split, transforms[split], download) for split in splits}
        return DataSplits(made.get("train"), made.get("val"), list(made[splits[0]].classes), prep.channels or channels)
    per_split = [{label for _, label, where in rows if where == split} for split in splits]
    if all(per_split) and (odd := sorted(set.union(*per_split) - set.intersection(*per_split))):  # one split lacks
        given = f"{labels}: its train and val rows" if name == "csv" else f"{data_dir}/train and val/"
        raise UsageError(f"{given} have different classes: {', '.join(odd)} in one only")
    found = sorted({label for _, label, _ in rows})
    if classes is None and len(found) == 1:  # the commonest mistake: --data-dir one folder above the class folders
        raise UsageError(f"{labels or root}: one class, {found[0]!r}: a classifier needs 2 or more classes")
    classes = found if classes is None else classes
    if unknown := [label for label in found if label not in classes]:
        raise UsageError(f"{labels or root}: class {unknown[0]!r} is not one of the model's: {', '.join(classes)}")
    rows, chosen = assign_splits(rows, root, held_out, val_fraction)
    index = {name: i for i, name in enumerate(classes)}
    samples = {s: [(str(root / path), index[label]) for path, label, where in rows if where == s] for s in splits}
    if empty := [s for s in splits if not samples[s]]:  # a CSV's split column naming one split alone, or images gone
        reason = "every image left is held out" if chosen else f"its split column has no {empty[0]} rows"
        raise UsageError(f"{labels or root}: no {empty[0]} images: {reason}")
    made = {s: ImageFiles(samples[s], root, transforms[s], strict, s == "train", channels) for s in splits}
    return DataSplits(made.get("train"), made.get("val"), classes, channels, chosen)


def run_options(args: dict[str, Any]) -> dict[str, Any]:
    """build_datasets()'s options that a run's flags set: vars(args), or a checkpoint's "args" (older lack some)."""
    return {
        "labels": Path(args["labels"]) if args.get("labels") else None,
        "columns": (args.get("image_column", "image"), args.get("label_column", "label")),
        "val_fraction": args.get("val_fraction", 0.1),
        "seed": args["seed"],
        "train_size": args["shapes_train_size"],
        "val_size": args["shapes_val_size"],
    }


def validation_split(state: dict[str, Any], prep: Preprocessing, **options: Any) -> DataSplits:
    """The run's validation split (.val) as train.py built it, in its model's channels; `options`: build_datasets'."""
    trained = state["args"]
    data_dir = Path(trained["data_dir"]) if trained["data_dir"] else None
    options = {**run_options(trained), "channels": state["model_config"].get("in_channels", 3), **options}
    name = dataset_name(trained["dataset"], data_dir)
    return build_datasets(name, data_dir, prep, splits=("val",), held_out=state.get("held_out"), **options)


def split_folders(data_dir: Path) -> bool:
    """Whether DIR holds DIR/train/ and DIR/val/ (DIR/test/ beside them is left alone), not a class named train.

    UsageError for folders that are all named like splits otherwise (train/valid/test, Train/Val): not classes.
    """
    found = {path.name for path in data_dir.glob("*") if path.is_dir() and not is_hidden(path.name)}
    if {"train", "val"} <= found or bool(found & {"train", "val"}) and found <= {"train", "val", "test"}:
        return True
    if found and {name.lower() for name in found} <= SPLIT_NAMES:
        named = ", ".join(sorted(found))
        raise UsageError(f"{data_dir} holds {named}: splits, not classes; name them train/ and val/ (test/ stays)")
    return False


def class_folders(root: Path, split: str | None = None, test_set: bool = False) -> list[tuple[str, str, str | None]]:
    """ROOT[/split]/<class>/**/<image> as (path relative to root, class, split) rows; UsageError if there is none.

    A class folder without images is refused too, unless in a `test_set` that has other images (it may lack a class).
    """
    folder = root / split if split else root
    if not folder.is_dir():
        what = "is a file, not a folder" if folder.exists() else "does not exist"
        raise UsageError(f"image folder {folder} {what} (expected DIR/<class>/, or DIR/train/ and DIR/val/)")
    found = sorted(entry.name for entry in os.scandir(folder) if entry.is_dir() and not is_hidden(entry.name))
    if not found:  # hidden folders (.ipynb_checkpoints, __MACOSX) are no classes
        raise UsageError(f"image folder {folder} has no images: no class folder in it")
    reals = sorted((os.path.join(os.path.realpath(folder / name), ""), name) for name in found)  # "/" ends each
    for (real, name), (inner, other) in itertools.pairwise(reals):  # a class linked to another, or above it: its
        if inner.startswith(real):  # images labelled twice (sorted, a folder that holds others is followed by one)
            raise UsageError(f"image folder {folder}: class folders {name} and {other} hold the same images (a link)")
    every = [folder / name for name in found]  # a folder linked in from another class (or above it) is that class's
    rows = [(path.relative_to(root).as_posix(), cls.name, split) for cls in every for path in list_images(cls, every)]
    labelled = {label for _, label, _ in rows}  # once, not per class: ImageNet's 1,000 x 1.28M rows took a minute
    if (empty := [name for name in found if name not in labelled]) and not (test_set and rows):
        extensions = " ".join(IMAGE_EXTENSIONS)
        raise UsageError(f"image folder {folder} has a class folder without images: {empty[0]} (none of {extensions})")
    return rows


def read_labels(
    csv_file: Path, data_dir: Path | None, columns: tuple[str, str], test_set: bool = False
) -> tuple[Path, list[tuple]]:
    """The folder the images are in (`data_dir`, else the CSV's), and (image, label, split or None) rows.

    A header names the `columns` (image, label) and maybe "split" (train, val or test). UsageError naming the
    file and line for a missing column, an empty cell, an image that is not there or listed twice, or another split.
    Test rows are left out (as DIR/test/ is), but for a `test_set` (test.py's) that has some: then they alone, as val.
    """
    root = data_dir if data_dir is not None else csv_file.parent
    rows, first_line = [], {}
    try:
        with csv_file.open(newline="", encoding="utf-8-sig") as file:  # -sig: a spreadsheet's byte-order mark
            reader = csv.DictReader(file)
            header = reader.fieldnames or []
            if missing := [column for column in columns if column not in header]:
                raise UsageError(f"{csv_file}: line 1: no column {missing[0]!r} (the header has: {', '.join(header)})")
            if near := [name for name in header if name != "split" and name.strip().lower() == "split"]:
                raise UsageError(f"{csv_file}: line 1: column {near[0]!r} is read only as split, so spelled")
            for row in reader:
                where = f"{csv_file}: line {reader.line_num}"
                image, label, split = ((row.get(key) or "").strip() for key in (*columns, "split"))
                if not image or not label:
                    raise UsageError(f"{where}: empty {columns[0] if not image else columns[1]}")
                image = os.path.relpath(root / image, root)  # one spelling per file: ./a.jpg and /abs/root/a.jpg: a.jpg
                if image in first_line:
                    raise UsageError(f"{where}: {image} is listed again (first on line {first_line[image]})")
                if not (root / image).is_file() and (split != "test" or test_set):  # test rows: test.py's alone
                    raise UsageError(f"{where}: no image file {root / image}")
                if "split" in header and split not in ("train", "val", "test"):
                    raise UsageError(f"{where}: split {split!r} is not train, val or test")
                first_line[image] = reader.line_num
                rows.append((image, label, split or None))
    except OSError as err:
        raise UsageError(f"cannot read the labels file {csv_file}: {err.strerror or err}") from None
    except (UnicodeDecodeError, csv.Error) as err:
        raise UsageError(f"{csv_file} is not a UTF-8 CSV file: {err}") from None
    if not rows:
        raise UsageError(f"{csv_file} lists no images")
    if test_set and any(split == "test" for *_, split in rows):
        return root, [(image, label, "val") for image, label, split in rows if split == "test"]
    return root, [row for row in rows if row[2] != "test"]


def assign_splits(
    rows: list[tuple], root: Path, held_out: list[str] | None, fraction: float
) -> tuple[list[tuple], list[str]]:
    """`rows` with their splits, and the images held out for validation ([] where the rows give every split).

    Those are `held_out` (a run's: UsageError if one is not in `rows`), else every image with `fraction` 1,
    else `fraction` of each class's, chosen by samplers.hold_out from "<class>/<path>": stable as images are added.
    """
    own = all(split is not None for _, _, split in rows)  # DIR/train/ and DIR/val/, or a split column
    if held_out is not None and own == bool(held_out):  # a run's data in the other layout: its validation would change
        had = f"held out {len(held_out)} of its images" if held_out else "validated on its data's own val split"
        now = "gives train and val splits of its own" if own else "gives no split"
        raise UsageError(f"{root} {now}, but the run {had}: give the run's data as it was, or start a new run")
    if own:
        return rows, []
    if held_out is not None:  # spelled as the rows are (a run from before CSV paths were made relative: absolute)
        held_out = sorted(os.path.relpath(root / path, root) for path in held_out)
    if held_out is None and fraction == 1:  # test.py evaluating other data
        held_out = sorted(path for path, _, _ in rows)
    elif held_out is None:
        held_out = []
        for label, group in itertools.groupby(sorted(rows, key=itemgetter(1)), key=itemgetter(1)):
            keys = [f"{label}/{path}" for path, _, _ in group]
            if len(keys) < 2:
                raise UsageError(f"class {label!r} has 1 image: holding out a validation split needs 2 or more")
            held_out += [key.removeprefix(f"{label}/") for key in hold_out(keys, fraction)]
        held_out.sort()
    if missing := set(held_out) - {path for path, _, _ in rows}:
        raise UsageError(f"{root} lacks {len(missing)} of the run's held-out images, e.g. {min(missing)}")
    held = set(held_out)
    return [(path, label, "val" if path in held else "train") for path, label, _ in rows], held_out


def _torchvision_dataset(name: str, data_dir: Path, split: str, transform: v2.Compose, download: bool) -> Dataset:
    """A torchvision dataset's split; a failed download leaves data_dir as it was, bar partial files."""

    def folders() -> set[Path]:  # data_dir, its parents and every folder under it
        return {path for path in (data_dir, *data_dir.parents, *data_dir.rglob("*")) if path.is_dir()}

    before = folders() if download else set()
    try:
        return TORCHVISION_DATASETS[name][0](data_dir, train=split == "train", transform=transform, download=download)
    except (OSError, RuntimeError) as err:  # a URLError is an OSError; MNIST reports it as a RuntimeError
        if not download:  # torchvision's "Dataset not found or corrupted"
            raise UsageError(f"{name} not found under {data_dir}; pass --download to fetch it ({err})") from None
        for folder in sorted(folders() - before, reverse=True):  # each folder before its parent
            with contextlib.suppress(OSError):  # rmdir refuses a folder with a file in it: that folder stays
                folder.rmdir()
        reason = (str(err).strip().splitlines() or [type(err).__name__])[-1]  # MNIST's first lines name the mirrors
        raise UsageError(f"the download of {name} failed ({reason}); put it under {data_dir} yourself") from None
