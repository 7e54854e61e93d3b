"""Pictures of what the model does, for a person to look at: labelled images and a confusion matrix.

Drawn with PIL and torchvision.utils alone. train.py logs both to TensorBoard once per epoch
(not every step: writing images is slow and the event file grows with each); test.py saves
them as PNG files next to its report.
"""

import torch
from PIL import Image, ImageDraw, ImageFont
from torchvision.transforms.v2.functional import pil_to_tensor
from torchvision.utils import make_grid

from .transforms import Preprocessing

RIGHT, WRONG = (0, 150, 60), (210, 20, 20)  # caption and border colours
TILE = 96  # pixels: small inputs are scaled up to this, so that a person can see them
CELL = 44  # pixels per cell of the confusion matrix
LABEL_WIDTH = 110  # pixels for the class names left of each matrix
NAME_LENGTH = 14  # characters of a class name that are shown


def displayable(images: torch.Tensor, prep: Preprocessing) -> torch.Tensor:
    """Model inputs (N, C, H, W), normalised as `prep` says, back to RGB uint8 images (N, 3, H, W)."""
    mean = torch.tensor(prep.mean, dtype=torch.float32).view(1, -1, 1, 1)  # (1, 1 or C, 1, 1)
    std = torch.tensor(prep.std, dtype=torch.float32).view(1, -1, 1, 1)
    pixels = (images.detach().float().cpu() * std + mean).clamp(0, 1)  # (N, C, H, W) in [0, 1]
    if pixels.shape[1] == 1:
        pixels = pixels.expand(-1, 3, -1, -1)  # grayscale shown as RGB
    return (pixels * 255).round().to(torch.uint8)


def captions(classes: list[str], targets: torch.Tensor, predictions: torch.Tensor, confidence: torch.Tensor) -> list:
    """Two caption lines per image: its true class, and the predicted one with its probability."""
    rows = zip(targets.tolist(), predictions.tolist(), confidence.tolist(), strict=True)
    return [[f"true {classes[t][:NAME_LENGTH]}", f"pred {classes[p][:NAME_LENGTH]} {c:.2f}"] for t, p, c in rows]


def prediction_grid(
    images: torch.Tensor,
    targets: torch.Tensor,
    predictions: torch.Tensor,
    confidence: torch.Tensor,
    classes: list[str],
    prep: Preprocessing,
) -> Image.Image:
    """Model inputs (N, C, H, W) in a labelled_grid(), captioned with captions(); wrong predictions in red."""
    lines = captions(classes, targets, predictions, confidence)
    return labelled_grid(displayable(images, prep), lines, (predictions != targets).tolist())


def labelled_grid(images: torch.Tensor, lines: list[list[str]], wrong: list[bool], columns: int = 8) -> Image.Image:
    """A grid of uint8 images (N, 3, H, W), each scaled to TILE pixels with its caption `lines` below.

    Tiles of wrong predictions get a red border and red text; right ones green text. Small
    images are scaled up with nearest neighbours, so that their pixels stay visible.
    """
    font = ImageFont.load_default()
    line_height = 12
    tiles = []
    for image, caption, is_wrong in zip(images, lines, wrong, strict=True):
        resample = Image.Resampling.NEAREST if image.shape[-1] <= TILE else Image.Resampling.BILINEAR
        picture = Image.fromarray(image.permute(1, 2, 0).numpy()).resize((TILE, TILE), resample)
        tile = Image.new("RGB", (TILE + 4, TILE + 4 + line_height * len(caption) + 2), "white")
        tile.paste(WRONG if is_wrong else "white", (0, 0, TILE + 4, TILE + 4))  # the border
        tile.paste(picture, (2, 2))
        draw = ImageDraw.Draw(tile)
        for row, text in enumerate(caption):
            draw.text((2, TILE + 4 + row * line_height), text, fill=WRONG if is_wrong else RIGHT, font=font)
        tiles.append(pil_to_tensor(tile))  # (3, h, w) uint8
    grid = make_grid(tiles, nrow=columns, padding=4, pad_value=255)  # (3, H, W) uint8
    return Image.fromarray(grid.permute(1, 2, 0).numpy())


def confusion_image(confusion: torch.Tensor, names: list[str]) -> Image.Image:
    """The confusion matrix (K, K) (rows: true class, columns: predicted) as two panels side by side.

    Left: the counts; right: each row divided by its total (the recall on the diagonal). Cells
    are shaded by the row-normalised value, class names run along both axes.
    """
    confusion = confusion.detach().cpu().to(torch.int64)
    rows = confusion.sum(dim=1, keepdim=True).clamp(min=1)
    normalised = confusion.double() / rows  # (K, K)
    panels = [
        _matrix_panel(normalised, [[str(int(v)) for v in row] for row in confusion], names, "counts"),
        _matrix_panel(normalised, [[f"{v:.2f}" for v in row] for row in normalised], names, "row-normalised"),
    ]
    image = Image.new("RGB", (sum(p.width for p in panels), panels[0].height), "white")
    image.paste(panels[0], (0, 0))
    image.paste(panels[1], (panels[0].width, 0))
    return image


def note(text: str) -> Image.Image:
    """A small picture that says `text`, for when there is nothing to show."""
    image = Image.new("RGB", (8 + 7 * len(text), 24), "white")
    ImageDraw.Draw(image).text((4, 6), text, fill="black", font=ImageFont.load_default())
    return image


def cell_centre(row: int, column: int) -> tuple[int, int]:
    """(x, y) of a cell's centre in either panel of confusion_image(), from that panel's left edge."""
    return LABEL_WIDTH + column * CELL + CELL // 2, 2 * CELL + row * CELL + CELL // 2


def _matrix_panel(shade: torch.Tensor, texts: list[list[str]], names: list[str], title: str) -> Image.Image:
    font, size = ImageFont.load_default(), shade.shape[0]
    image = Image.new("RGB", (LABEL_WIDTH + size * CELL + 10, 2 * CELL + size * CELL + 10), "white")
    draw = ImageDraw.Draw(image)
    draw.text((LABEL_WIDTH, 4), f"{title} (rows: true, columns: predicted)", fill="black", font=font)
    for i, name in enumerate(names):
        short = name[:NAME_LENGTH]
        draw.text((4, cell_centre(i, 0)[1] - 6), short, fill="black", font=font)  # row labels
        x = cell_centre(0, i)[0]
        draw.text((x - CELL // 2 + 2, CELL + (i % 2) * 14), short[:7], fill="black", font=font)  # staggered
    for i in range(size):
        for j in range(size):
            value = float(shade[i, j])
            colour = tuple(round(255 - value * (255 - c)) for c in (30, 80, 170))  # white to dark blue
            x, y = cell_centre(i, j)
            box = (x - CELL // 2, y - CELL // 2, x + CELL // 2 - 1, y + CELL // 2 - 1)
            draw.rectangle(box, fill=colour, outline=(200, 200, 200))
            ink = "white" if value > 0.5 else "black"
            draw.text((box[0] + 4, y - 6), texts[i][j], fill=ink, font=font)
    return image
