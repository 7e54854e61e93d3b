"""Training images per second: the generated project's dataset and loader against torchvision's own pipeline.

    python benchmarks/data_throughput.py --images 448 --rounds 3  # the README's table, about a minute on 2 cores
    python benchmarks/data_throughput.py --quick --json out.json  # about 15 seconds: tests/test_benchmarks.py

The photographs: JPEG files of ImageNet's usual size (500 x 375 or 375 x 500, quality 90), cut
at random places, scales and aspect ratios out of the colour photographs scikit-image ships
(astronaut, chelsea, coffee, rocket, ...), one class folder per source photograph, made in a
temporary folder when the benchmark starts (scikit-image is needed here, nowhere else).

The pipelines, each read through a DataLoader with the same batch size, shuffle and worker count:

  generated    the rendered classification project's training loader, built as train.py builds it
               (task.prepare, task.build_datasets, task.build_loaders) from
               --data-dir DIR --img-size 224 --random-resized-crop 0.08 1: read_image (TorchCodec
               for JPEGs, EXIF turn), RandomResizedCrop 224 on the tensor, flip, normalise, per-sample seeds.
  torchvision  torchvision's references/classification: ImageFolder (PIL), RandomResizedCrop 224
               and RandomHorizontalFlip on the PIL image, PILToTensor, ToDtype(float32, scale=True),
               Normalize.
  decode-pil   decoding alone, the limit for PIL on this machine: Image.open, convert("RGB"),
               PILToTensor; nothing else.
  decode-torchcodec  decoding alone with TorchCodec's decode_jpeg, which read_image() uses for JPEGs.

Method: the pipelines alternate in one process, in a random order in every round; a run reads one
epoch (every image once) and its speed counts from its first batch to its last, so starting the
worker processes is not counted. The reported figure is the median over rounds, and
"vs torchvision" is the median of the per-round ratios (generated / torchvision).
"""

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from loop_overhead import REPO, import_train, machine, render
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchcodec.decoders import decode_jpeg
from torchvision import datasets
from torchvision.transforms import v2

PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "immunohistochemistry", "hubble_deep_field", "retina")
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def get_args_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=None, help="photographs made (default 700, --quick 192)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds of every pipeline (default 5, --quick 3)")
    parser.add_argument("--workers", type=int, nargs="+", default=None, help="worker counts (default 0 and 2)")
    parser.add_argument("--batch-size", type=int, default=None, help="default 64, --quick 32")
    parser.add_argument("--quick", action="store_true", help="few images, three rounds, workers 0")
    parser.add_argument("--project", type=Path, default=None, help="a rendered classification project to measure")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    return parser


def make_photos(root: Path, count: int, seed: int = 0) -> None:
    """`count` JPEGs of 500 x 375 (or 375 x 500) under root/<photo>/, cut out of scikit-image's photographs."""
    try:
        from skimage import data as samples
    except ImportError:
        sys.exit("data_throughput.py needs scikit-image for its photographs: pip install scikit-image")
    rng = random.Random(seed)
    sources = {name: Image.fromarray(getattr(samples, name)()) for name in PHOTOS}
    for index in range(count):
        name = PHOTOS[index % len(PHOTOS)]
        photo = sources[name]
        width, height = (500, 375) if rng.random() < 0.75 else (375, 500)  # mostly landscape, as ImageNet is
        scale = rng.uniform(0.5, 1.0)  # of the source's largest box with the output's aspect ratio
        box_w = min(photo.width, photo.height * width / height) * scale
        box_h = box_w * height / width
        left, top = rng.uniform(0, photo.width - box_w), rng.uniform(0, photo.height - box_h)
        image = photo.resize((width, height), Image.Resampling.BICUBIC, box=(left, top, left + box_w, top + box_h))
        if rng.random() < 0.5:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        (root / name).mkdir(parents=True, exist_ok=True)
        image.save(root / name / f"{index:05d}.jpg", quality=90)


class Decoded(Dataset):
    """Decoding alone: each file as a uint8 tensor (3, H, W), by PIL or by TorchCodec."""

    def __init__(self, root: Path, decoder: str) -> None:
        self.files = sorted(str(path) for path in root.rglob("*.jpg"))
        self.decoder = decoder

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.decoder == "torchcodec":
            return decode_jpeg(self.files[index], mode="RGB")
        with Image.open(self.files[index]) as image:
            return v2.functional.pil_to_tensor(image.convert("RGB"))


def count_images(batch: list[Any]) -> int:
    """A collate function for images of different sizes: how many there are."""
    return len(batch)


def batch_size_of(batch: Any) -> int:
    return batch if isinstance(batch, int) else len(batch[0])


def torchvision_loader(root: Path, batch_size: int, workers: int) -> DataLoader:
    """torchvision's references/classification training pipeline, as presets.py builds it for PIL."""
    transform = v2.Compose(
        [
            v2.RandomResizedCrop(224, antialias=True),
            v2.RandomHorizontalFlip(),
            v2.PILToTensor(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(MEAN, STD),
        ]
    )
    folder = datasets.ImageFolder(str(root), transform=transform)
    return DataLoader(folder, batch_size=batch_size, shuffle=True, num_workers=workers, drop_last=True)


def decode_loader(root: Path, decoder: str, batch_size: int, workers: int) -> DataLoader:
    dataset = Decoded(root, decoder)
    return DataLoader(dataset, batch_size, shuffle=True, num_workers=workers, collate_fn=count_images, drop_last=True)


def generated_loader(train: ModuleType, task: ModuleType, data_dir: Path, batch_size: int, workers: int) -> DataLoader:
    """The training loader train.py builds from these flags (its first epoch's shuffle)."""
    flags = ["--data-dir", str(data_dir), "--img-size", "224", "--random-resized-crop", "0.08", "1"]
    flags += ["--batch-size", str(batch_size), "--num-workers", str(workers)]
    args = train.get_args_parser().parse_args(flags)
    _, prep = task.prepare(args, None)
    splits = task.build_datasets(args, prep)
    loader, _ = task.build_loaders(args, splits, False, 0, 1)
    return loader


def images_per_second(loader: DataLoader) -> float:
    """One epoch of `loader`: images per second from its first batch to its last."""
    seen, start = 0, None
    for batch in loader:
        if start is None:
            start = time.perf_counter()  # the workers are up and one batch is through
            continue
        seen += batch_size_of(batch)
    return seen / (time.perf_counter() - start)


def measure(opts: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    data_dir = workdir / "photos"
    make_photos(data_dir / "train", opts.images)
    make_photos(data_dir / "val", max(len(PHOTOS), opts.images // 10), seed=1)
    project = opts.project or render(REPO, workdir / "project", task="classification")
    train = import_train(project)
    task = train.task
    root = data_dir / "train"
    builders = {
        "generated": lambda w: generated_loader(train, task, data_dir, opts.batch_size, w),
        "torchvision": lambda w: torchvision_loader(root, opts.batch_size, w),
        "decode-pil": lambda w: decode_loader(root, "pil", opts.batch_size, w),
        "decode-torchcodec": lambda w: decode_loader(root, "torchcodec", opts.batch_size, w),
    }
    rng = random.Random(0)
    results = {}
    for workers in opts.workers:
        loaders = {name: build(workers) for name, build in builders.items()}
        speeds: dict[str, list[float]] = {name: [] for name in loaders}
        for loader in loaders.values():  # warm-up: file cache, imports, first allocations
            images_per_second(loader)
        for _ in range(opts.rounds):
            order = list(loaders)
            rng.shuffle(order)
            for name in order:
                speeds[name].append(images_per_second(loaders[name]))
        ratios = [g / t for g, t in zip(speeds["generated"], speeds["torchvision"], strict=True)]
        results[str(workers)] = {
            "images_per_s": {name: round(statistics.median(values), 1) for name, values in speeds.items()},
            "per_round": {name: [round(value, 1) for value in values] for name, values in speeds.items()},
            "generated_vs_torchvision": round(statistics.median(ratios), 3),
        }
    return results


def table(results: dict[str, Any]) -> str:
    names = ("generated", "torchvision", "decode-pil", "decode-torchcodec")
    lines = ["| workers | " + " | ".join(names) + " | generated / torchvision |", "|---:|" + "---:|" * (len(names) + 1)]
    for workers, row in results.items():
        speeds = " | ".join(f"{row['images_per_s'][name]:.0f}" for name in names)
        lines.append(f"| {workers} | {speeds} | {row['generated_vs_torchvision']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    opts = get_args_parser().parse_args(argv)
    opts.images = opts.images or (192 if opts.quick else 700)
    opts.batch_size = opts.batch_size or (32 if opts.quick else 64)
    opts.rounds = opts.rounds or (3 if opts.quick else 5)
    opts.workers = opts.workers or ([0] if opts.quick else [0, 2])
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="data-throughput-") as tmp:
        results = measure(opts, Path(tmp))
    report = {
        "images": opts.images,
        "batch_size": opts.batch_size,
        "rounds": opts.rounds,
        "quick": opts.quick,
        "workers": results,
        "machine": machine(),
        "seconds": round(time.perf_counter() - started, 1),
    }
    sizes = f"{opts.images} JPEGs of 500 x 375, batch {opts.batch_size}, {opts.rounds} rounds"
    print(f"training images per second: {sizes}")
    print(table(results))
    if opts.json is not None:
        opts.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
