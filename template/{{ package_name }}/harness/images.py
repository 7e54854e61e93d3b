"""Image files as they come: any mode, EXIF-rotated, and some that cannot be read at all.

read_image() is the one way every script opens an image file; SkipsUnreadable is how a dataset
of files survives the files it cannot read.
"""

import sys
from collections.abc import Callable
from typing import TypeVar

import numpy as np
import torch
from PIL import Image, ImageOps, UnidentifiedImageError
from torchvision import datasets

from . import UsageError
from .checkpoint import reason

IMAGE_EXTENSIONS = datasets.folder.IMG_EXTENSIONS
T = TypeVar("T")


class UnreadableImageError(UsageError):
    """An image file that cannot be decoded; the message names the file and the reason."""

    def __init__(self, message: str) -> None:
        # A DataLoader worker's error is raised again in the main process as UnreadableImageError(the
        # worker's whole traceback as text); its last line is the original message: keep that one.
        last = message.strip().splitlines()[-1] if message.strip() else message
        super().__init__(last.removeprefix(f"{__name__}.{type(self).__qualname__}: "))


def read_image(path: str, channels: int = 3) -> Image.Image:
    """The image at `path`, decoded, upright, in mode RGB (channels 3) or L (channels 1).

    The whole file is decoded now (a truncated one fails here, not halfway through a transform)
    and turned as its EXIF orientation says. 16-bit and float images are scaled to 8 bits as
    to_8_bits() says; transparent pixels are laid on white. Raises UnreadableImageError, one line
    with the path and the reason, for anything PIL cannot decode: not an image, truncated, corrupt.
    """
    try:
        with Image.open(path) as image:
            image.load()
            upright = ImageOps.exif_transpose(image)  # a copy, turned as the camera's orientation tag says
    # PIL reports damaged files as OSError, ValueError, SyntaxError ("broken PNG file"), EOFError, ...:
    # whatever decoding raises means the same thing here, that this file cannot be used.
    except Exception as err:  # noqa: BLE001
        why = "not an image PIL can identify" if isinstance(err, UnidentifiedImageError) else reason(err)
        raise UnreadableImageError(f"cannot read {path} ({why})") from None
    if upright.mode.startswith("I") or upright.mode == "F":  # PIL's own conversion would clip these at 255
        upright = Image.fromarray(to_8_bits(np.asarray(upright, dtype=np.float64), floats=upright.mode == "F"))
    if upright.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in upright.info:
        rgba = upright.convert("RGBA")
        upright = Image.alpha_composite(Image.new("RGBA", rgba.size, "white"), rgba)
    return upright.convert("L" if channels == 1 else "RGB")  # CMYK, palette, YCbCr, 1-bit, ...: PIL's conversions


def to_8_bits(values: np.ndarray, *, floats: bool) -> np.ndarray:
    """Pixel values of an integer (mode I, I;16) or float (mode F) image as uint8, scaled to what they hold.

    Floats in [0, 1] are multiplied by 255. Integers in 0..65535 are divided by the largest value
    of the smallest bit depth that holds their maximum, 8, 10, 12, 14 or 16 bits: a 12-bit
    camera's 4095 stored in a 16-bit PNG becomes 255, a 16-bit file's 65535 too. The file does not
    say which depth its sensor had, so a true 16-bit image that is very dark (nothing above 4095)
    comes out brighter than it was. Anything else (floats beyond [0, 1], integers below 0 or above
    65535) is stretched from its own minimum..maximum to 0..255; a constant image of such values is black.
    """
    low, high = float(values.min()), float(values.max())
    if floats and low >= 0 and high <= 1:
        return (values * 255).round().astype(np.uint8)
    if not floats and low >= 0 and high <= 65535:
        largest = next(2**bits - 1 for bits in (8, 10, 12, 14, 16) if high < 2**bits)
        return (values * (255 / largest)).round().astype(np.uint8)
    return ((values - low) * (255 / ((high - low) or 1))).round().astype(np.uint8)


class SkipsUnreadable:
    """What ImageFiles and ImagePatches share: files that cannot be read are flagged, named once, skipped.

    A subclass sets `root`, calls `track_unreadable()` once it knows its files, opens file
    `index` with `open_file()` and reads items with `first_readable()`. A file that cannot be
    read is named once, on stderr, and remembered in `unreadable` (a flag per file, in shared
    memory so the loader's workers share it). Then, with `strict`, UnreadableImageError is
    raised instead; with `substitute` (training) the next readable file takes its place, so
    batches keep their size; otherwise (evaluation) the item is None, and collate_readable()
    leaves it out.
    """

    root: str

    def track_unreadable(self, num_files: int, *, strict: bool, substitute: bool) -> None:
        """Start with no file flagged; `strict` and `substitute` as the class docstring says."""
        self.strict, self.substitute = strict, substitute
        self.unreadable = torch.zeros(num_files, dtype=torch.bool).share_memory_()

    def first_readable(self, index: int, read: Callable[[int], T | None]) -> T | None:
        """read(index), where `read` returns None for an unreadable file; with `substitute`, the next readable one's."""
        if not self.substitute:
            return read(index)
        num_files = len(self.unreadable)
        for offset in range(num_files):
            if (item := read((index + offset) % num_files)) is not None:
                return item
        raise UnreadableImageError(f"none of the {num_files} images under {self.root} can be read")

    def open_file(self, index: int, path: str) -> Image.Image | None:
        """read_image(path) for file `index`, or None if it cannot be read (flagged, and named the first time)."""
        if self.unreadable[index]:
            return None
        try:
            return read_image(path)
        except UnreadableImageError as err:
            if self.strict:
                raise UnreadableImageError(f"{err}; --strict-data stops at the first unreadable file") from None
            self.unreadable[index] = True
            print(f"skipping an unreadable image: {err}", file=sys.stderr, flush=True)
            return None
