"""Image files as they come (any mode, EXIF-rotated, some unreadable): read_image() opens every one."""

import contextlib
import filecmp
import hashlib
import io
import itertools
import multiprocessing
import os
import sys
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch
from PIL import Image, ImageOps, JpegImagePlugin, UnidentifiedImageError
from torchcodec.decoders import decode_jpeg, decode_png
from torchvision import datasets
from torchvision.transforms.v2.functional import pil_to_tensor

from . import UsageError
from .checkpoint import reason

IMAGE_EXTENSIONS = datasets.folder.IMG_EXTENSIONS
T = TypeVar("T")


def is_hidden(name: str) -> bool:
    """Names that hold no data: hidden ones, and the __MACOSX/ folder that unzipping a macOS archive leaves."""
    return name.startswith(".") or name == "__MACOSX"


def check_utf8(path: str, start: int = 0) -> None:
    """UsageError for a path not UTF-8 from `start` on (Latin-1 from an old archive, say): runs save and print names."""
    try:
        path[start:].encode()
    except UnicodeEncodeError:
        raise UsageError(f"{path!r} is not a UTF-8 name; rename it (convmv -f latin1 -t utf8 does)") from None


def list_images(folder: Path, others: Collection[Path] = ()) -> list[Path]:
    """Every image file under `folder`, any nesting, sorted; hidden names skipped, symlinked folders followed once.

    UsageError for an image whose path below `folder` is not UTF-8 (check_utf8): other files are not read, and
    where the data lies is not saved.

    A link to a folder that lies in or holds one of `others` (the other classes, listed on their own; `folder` may
    be among them) is not followed. One directory read per folder and no stat per file (ImageNet's million files),
    except for symbolic links.
    """
    avoid = None  # the others' real paths, found at the first symbolic link (most data has none)
    below = len(str(folder))  # where an image's path below `folder` starts: what must be UTF-8
    found, seen, pending = [], set(), [folder]
    while pending:
        top = pending.pop()
        if (real := os.path.realpath(top)) in seen:  # a link back up the tree, or to a folder listed already
            continue
        seen.add(real)
        with contextlib.suppress(OSError), os.scandir(top) as entries:  # a folder it may not read: as os.walk
            for entry in entries:
                if is_hidden(entry.name):
                    continue
                if entry.is_dir() and others and entry.is_symlink():  # a link to another class's images: skipped
                    if avoid is None:
                        own = os.path.realpath(folder)
                        avoid = [real for real in map(os.path.realpath, others) if real != own]
                    target = os.path.realpath(entry.path)
                    if any(os.path.commonpath([target, other]) in (target, other) for other in avoid):
                        continue
                if entry.is_dir():
                    pending.append(Path(entry.path))
                elif entry.is_file() and Path(entry.name).suffix.lower() in IMAGE_EXTENSIONS:  # no dangling link
                    check_utf8(entry.path, start=below)
                    found.append(Path(entry.path))
    return sorted(found, key=str)


def is_runs_data(
    scored: list[str],
    root: Path,
    held_out: list[str],
    original: Path | None,
    trained: Collection[str] | None = None,
    sample: dict[str, str] | None = None,
) -> bool:
    """Whether the images `scored` (paths under `root`) are the data of a run that held out `held_out` of `original`.

    They are if they include images it trained on (`trained`, by default the files `original` holds that it did not
    hold out; the first 16 found there compared byte for byte) or, none found there (the folder gone or emptied),
    one of its `sample` (sample_digests) found under its name with its digest; a run saved without one, its folder
    gone: every held-out path.

    UsageError if so and a held-out image is not among them, or they are the run's files under other names (`root`
    lies in `original` or holds it, or lists its files by other paths: a CSV for a folder, or the reverse): scored
    whole, they hold images the run trained on. A test set (named like the run's images or not, some of its
    validation images or not) is not the run's data.
    """
    held = set(held_out)
    if not held:
        return False
    found, runs = set(scored), None
    if original is not None and original.is_dir():
        here, base = root.resolve(), original.resolve()

        def run_name(path: str) -> str:  # an image's name in the run's data if it is one of the run's files, or its own
            name = Path(os.path.relpath(here / path, base)).as_posix()
            mine = name in held or (name in trained if trained is not None else not name.startswith("../"))
            return name if mine else path

        keys = {p: run_name(p) for p in scored}  # a copy elsewhere keeps its names: compared byte for byte below
        ours = [(p, k) for p, k in keys.items() if k not in held and (trained is None or k in trained)]
        if pairs := list(itertools.islice(((p, k) for p, k in ours if (original / k).is_file()), 16)):
            runs = any(filecmp.cmp(root / p, original / k, shallow=False) for p, k in pairs)
        elif not ours or not sample:  # none it trained on (its validation images alone, say), or nothing to judge by
            runs = False
        if runs and any(p != k for p, k in keys.items()):
            where = "lies in" if here.is_relative_to(base) else "holds" if base.is_relative_to(here) else "lists"
            why = "scored whole, it would score the images the run trained on; give the run's data itself or a test set"
            raise UsageError(f"{root} {where} the run's data {original}: {why}")
    if runs is None:  # the run's folder gone, or its files (moved): judged by the training images it sampled
        # None of the sampled names: not the run's data (a run saved without a sample, its folder gone: names alone).
        runs = any(file_digest(root / n) == sample[n] for n in sample if n in found) if sample else held <= found
    if runs and (gone := sorted(held - found)):
        why = "which it held out: scored whole, it would score the images the run trained on"
        raise UsageError(f"{root} is the run's data without {gone[0]}, {why}")
    return runs


def sample_digests(dataset: object, count: int = 16) -> dict[str, str]:
    """{name below its folder: file_digest} of `count` files spread over a SkipsUnreadable dataset ({} for others).

    A run saves those of its training images: test.py tells its data, moved, from a test set named alike.
    """
    files = dataset.files if isinstance(dataset, SkipsUnreadable) else []
    picked = sorted({files[i * len(files) // count] for i in range(count)} if files else set())
    digests = {Path(os.path.relpath(path, dataset.root)).as_posix(): file_digest(path) for path in picked}
    return {name: digest for name, digest in digests.items() if digest is not None}


def file_digest(path: str | Path) -> str | None:
    """SHA-256 of a file's size and first MiB: the same image whatever its name; None if it cannot be read."""
    try:
        with open(path, "rb") as file:
            return hashlib.sha256(f"{os.fstat(file.fileno()).st_size}\0".encode() + file.read(2**20)).hexdigest()
    except OSError:
        return None


class UnreadableImageError(UsageError):
    """An image file that cannot be decoded; the message names the file and the reason."""

    def __init__(self, message: str) -> None:
        # Raised again from a DataLoader worker with its whole traceback as the message: keep its last line's.
        last = message.strip().splitlines()[-1] if message.strip() else message
        super().__init__(last.removeprefix(f"{__name__}.{type(self).__qualname__}: "))


# A camera's EXIF orientation (2-8) as what turns a stored (C, H, W) image upright, as PIL's ImageOps.exif_transpose
ORIENTATIONS: dict[int, Callable[[torch.Tensor], torch.Tensor]] = {
    2: lambda image: image.flip(-1),  # mirrored left to right
    3: lambda image: image.flip(-2, -1),  # upside down
    4: lambda image: image.flip(-2),  # mirrored top to bottom
    5: lambda image: image.transpose(-2, -1),  # mirrored along the diagonal
    6: lambda image: image.rot90(-1, (-2, -1)),  # turned a quarter: a quarter clockwise to view
    7: lambda image: image.transpose(-2, -1).flip(-2, -1),  # mirrored along the other diagonal
    8: lambda image: image.rot90(1, (-2, -1)),  # a quarter anticlockwise to view
}


def without_exif(jpeg: bytes) -> bytes:
    """A JPEG's bytes less its EXIF segments, which TorchCodec turns by too; ValueError where headers do not parse."""
    kept, at = [jpeg[:2]], 2
    while True:
        if jpeg[at] != 0xFF:
            raise ValueError(f"no marker at byte {at}")
        if jpeg[at + 1] == 0xFF:  # a fill byte before a marker (T.81 allows any number)
            at += 1
        elif jpeg[at + 1] in (0xD9, 0xDA):  # the image data: every segment before it read
            return b"".join(kept) + jpeg[at:]
        else:
            end = at + 2 + int.from_bytes(jpeg[at + 2 : at + 4], "big")
            if end < at + 4:
                raise ValueError(f"a segment shorter than its length field at byte {at}")
            if jpeg[at + 1] != 0xE1 or jpeg[at + 4 : at + 10] != b"Exif\0\0":  # APP1 "Exif": left out
                kept.append(jpeg[at:end])
            at = end


def read_image(path: str, channels: int = 3) -> torch.Tensor:
    """The image at `path` as uint8 (channels, H, W), RGB or gray, decoded whole now and turned as its EXIF says.

    JPEGs are decoded by TorchCodec (twice as fast), as are 16-bit PNGs with colour or alpha; anything else and a file
    it refuses by PIL: 16-bit and float images are scaled to 8 bits, transparent pixels laid on white.
    UnreadableImageError (path, reason) if PIL fails.
    """
    wide, colours = None, 3  # a 16-bit PNG's values (H, W, C) of which PIL keeps the high bytes; C less alpha
    with contextlib.suppress(Exception), open(path, "rb") as file:  # PIL's message below says what is wrong
        start = file.read(26)  # a JPEG's marker, a PNG's bit depth and colour: the rest is read only to decode here
        if start.startswith(b"\xff\xd8\xff"):  # a JPEG's start-of-image marker
            data = start + file.read()
            # The camera's orientation, read by PIL (TorchCodec misses one after an XMP segment or stored as a LONG)
            with JpegImagePlugin.JpegImageFile(io.BytesIO(data)) as header:  # the headers alone: 0.04 ms, any size
                turn = ORIENTATIONS.get(header.getexif().get(0x0112))
            mode = "GRAY" if channels == 1 else "RGB"
            return decode_jpeg(data, mode=mode) if turn is None else turn(decode_jpeg(without_exif(data), mode=mode))
        if start.startswith(b"\x89PNG") and start[24:26] in (b"\x10\x02", b"\x10\x04", b"\x10\x06"):  # RGB, LA, RGBA
            wide = decode_png(start + file.read(), mode="UNCHANGED", output_dtype=torch.uint16)
            wide, colours = wide.permute(1, 2, 0).numpy(), 1 if start[25] == 4 else 3  # upright
    try:
        if wide is None:
            with Image.open(path) as image:
                image.load()
                upright = ImageOps.exif_transpose(image)  # a copy, turned as the camera's orientation tag says
    except Exception as err:  # noqa: BLE001 - OSError, ValueError, SyntaxError, EOFError, ...: a damaged file
        why = "not an image PIL can identify" if isinstance(err, UnidentifiedImageError) else reason(err)
        raise UnreadableImageError(f"cannot read {path} ({why})") from None
    mode = upright.mode if wide is None else "I;16"
    if mode.startswith("I") or mode == "F":  # PIL's own conversion would clip these at 255
        # Floats in [0, 1] x 255; integers / the top value of the least bit depth (8-16) that holds their maximum: a
        # 12-bit camera's 4095 becomes 255 (a very dark 16-bit image, brighter); anything else stretched from min..max.
        values = np.asarray(upright if wide is None else wide[..., :colours], dtype=np.float64)
        low, high = float(values.min()), float(values.max())
        if not np.isfinite(low + high):  # a float image's NaN (no data) and infinities: its lowest and highest
            finite = values[np.isfinite(values)]  # a copy, made only here: 16-bit images never take this path
            low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0)
            values = np.nan_to_num(values, nan=low, posinf=high, neginf=low)
        if mode == "F" and low >= 0 and high <= 1:
            low, scale = 0.0, 255
        elif mode != "F" and low >= 0 and high <= 65535:
            low, scale = 0.0, 255 / next(2**bits - 1 for bits in (8, 10, 12, 14, 16) if high < 2**bits)
        else:
            scale = 255 / ((high - low) or 1)
        eight = ((values - low) * scale).round().astype(np.uint8)
        if wide is not None:  # and its alpha (if any) over all 16 bits, as PNG defines it: 65535 is opaque
            eight = np.concatenate([eight, (wide[..., colours:] / 257).round().astype(np.uint8)], axis=-1)
        upright = Image.fromarray(eight)
    if upright.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in upright.info:
        rgba = upright.convert("RGBA")
        upright = Image.alpha_composite(Image.new("RGBA", rgba.size, "white"), rgba)
    return pil_to_tensor(upright.convert("L" if channels == 1 else "RGB"))  # CMYK, palette, 1-bit, ...: PIL converts


class SkipsUnreadable:
    """A dataset of files that flags, names once (on stderr) and skips the files it cannot read.

    A subclass calls track_unreadable() once it knows its files (under the folder `root`), opens them with
    open_file() and reads items with first_readable(). `unreadable`: a flag per file, in memory shared with the
    loader's workers.
    """

    def track_unreadable(self, files: list[str], root: str, *, strict: bool, substitute: bool) -> None:
        """None of `files` flagged yet; `strict`: raise at the first unreadable, else skip it (first_readable)."""
        self.files, self.root, self.strict, self.substitute = files, root, strict, substitute
        self.unreadable = torch.zeros(len(files), dtype=torch.bool).share_memory_()
        self.naming = multiprocessing.Lock()  # passed to the loader's workers as they start

    def first_readable(self, index: int, read: Callable[[int], T | None]) -> T | None:
        """read(index), None for an unreadable file; with `substitute` (training), the next readable file's item."""
        if not self.substitute:
            return read(index)
        num_files = len(self.unreadable)
        for offset in range(num_files):
            if (item := read((index + offset) % num_files)) is not None:
                return item
        raise UnreadableImageError(f"none of the {num_files} images under {self.root} can be read")

    def open_file(self, index: int, path: str, channels: int = 3) -> torch.Tensor | None:
        """read_image(path, channels) for file `index`, or None if it cannot be read (flagged, named the first time)."""
        if self.unreadable[index]:
            return None
        try:
            return read_image(path, channels)
        except UnreadableImageError as err:
            if self.strict:
                raise UnreadableImageError(f"{err}; --strict-data stops at the first unreadable file") from None
            with self.naming:  # two workers that fail on it at once: the first names it
                named = bool(self.unreadable[index])
                self.unreadable[index] = True
            if not named:
                print(f"skipping an unreadable image: {err}", file=sys.stderr, flush=True)
            return None


def fingerprint(dataset: object) -> str | None:
    """A digest of a SkipsUnreadable dataset's file names and sizes: alike for a copy elsewhere (see below).

    None for other datasets (the built-in shapes, torchvision's): their flags say what they hold.
    """
    if not isinstance(dataset, SkipsUnreadable):
        return None
    base = os.path.commonpath([os.path.dirname(path) for path in dataset.files]) if dataset.files else ""
    digest = hashlib.sha256()  # names below the folder that holds them all: a CSV's ../ or absolute paths too
    for name, path in sorted((Path(os.path.relpath(path, base)).as_posix(), path) for path in dataset.files):
        try:
            size = os.path.getsize(path)
        except OSError:  # gone, or in a folder that may not be searched: skipped as unreadable when read
            size = -1
        digest.update(f"{name}\0{size}\0".encode())
    return digest.hexdigest()
