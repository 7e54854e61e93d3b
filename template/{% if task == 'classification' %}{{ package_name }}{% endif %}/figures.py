"""Pictures of what the model does: labelled images and a confusion matrix (TensorBoard's and test.py's)."""

import unicodedata

import torch
from PIL import Image, ImageDraw, ImageFont
from torchvision.transforms.v2.functional import pil_to_tensor
from torchvision.utils import make_grid

from .transforms import Preprocessing

RIGHT, WRONG = (0, 150, 60), (210, 20, 20)  # caption and border colours
TILE = 96  # pixels: small inputs are scaled up to this, so that a person can see them
LINE = 12  # pixels per caption line
CELL = 44  # pixels per cell of the confusion matrix
LABEL_WIDTH = 110  # pixels for the class names left of each matrix
NAME_LENGTH = 14  # characters of a class name that are shown
MATRIX_LIMIT = 30  # classes: a larger confusion matrix shows its most confused ones (pixels grow with classes squared)


def drawable(names: list[str]) -> list[str]:
    """Class names in the ASCII that PIL's default font has (others are boxes): café as cafe, 猫 or Straße as #1."""
    shown = []
    for i, name in enumerate(names):
        letters = "".join(c for c in unicodedata.normalize("NFKD", name) if not unicodedata.combining(c))  # é: e
        shown.append(letters if letters.isascii() else f"#{i}")
    return shown


def displayable(images: torch.Tensor, prep: Preprocessing) -> torch.Tensor:
    """Model inputs (N, C, H, W), normalised as `prep` says, back to RGB uint8 images (N, 3, H, W)."""
    mean = torch.tensor(prep.mean, dtype=torch.float32).view(1, -1, 1, 1)  # (1, 1 or C, 1, 1)
    std = torch.tensor(prep.std, dtype=torch.float32).view(1, -1, 1, 1)
    pixels = (images.detach().float().cpu() * std + mean).clamp(0, 1)  # (N, C, H, W) in [0, 1]
    if pixels.shape[1] == 1:
        pixels = pixels.expand(-1, 3, -1, -1)  # grayscale shown as RGB
    return (pixels * 255).round().to(torch.uint8)


def prediction_grid(
    images: torch.Tensor,
    targets: torch.Tensor,
    predictions: torch.Tensor,
    confidence: torch.Tensor,
    classes: list[str],
    prep: Preprocessing,
    columns: int = 8,
) -> Image.Image:
    """Model inputs (N, C, H, W) as a grid of TILE-pixel tiles captioned with true and predicted class, wrong in red."""
    font, tiles, classes = ImageFont.load_default(), [], drawable(classes)
    if len({fit(font, "pred", name, " 0.00") for name in classes}) < len(classes):  # alike as cut: numbered
        classes = [f"{i} {name}" for i, name in enumerate(classes)]
    rows = zip(displayable(images, prep), targets.tolist(), predictions.tolist(), confidence.tolist(), strict=True)
    for image, true, predicted, probability in rows:
        resample = Image.Resampling.NEAREST if image.shape[-1] <= TILE else Image.Resampling.BILINEAR
        picture = Image.fromarray(image.permute(1, 2, 0).numpy()).resize((TILE, TILE), resample)
        tile = Image.new("RGB", (TILE + 4, TILE + 4 + 2 * LINE + 2), "white")
        colour = WRONG if true != predicted else RIGHT
        tile.paste(WRONG if true != predicted else "white", (0, 0, TILE + 4, TILE + 4))  # the border
        tile.paste(picture, (2, 2))
        caption = (fit(font, "true", classes[true]), fit(font, "pred", classes[predicted], f" {probability:.2f}"))
        for row, text in enumerate(caption):
            ImageDraw.Draw(tile).text((2, TILE + 4 + row * LINE), text, fill=colour, font=font)
        tiles.append(pil_to_tensor(tile))  # (3, h, w) uint8
    grid = make_grid(tiles, nrow=columns, padding=4, pad_value=255)  # (3, H, W) uint8
    return Image.fromarray(grid.permute(1, 2, 0).numpy())


def fit(font: ImageFont.ImageFont | ImageFont.FreeTypeFont, label: str, name: str, end: str = "") -> str:
    """`label` `name` `end` within a tile's width: the name cut (to NAME_LENGTH letters at most), `end` kept whole."""
    name = name[:NAME_LENGTH]
    while name and font.getlength(f"{label} {name}{end}") > TILE + 2:
        name = name[:-1]
    return f"{label} {name}{end}"


def confusion_image(confusion: torch.Tensor, names: list[str]) -> Image.Image:
    """A confusion matrix (K, K) (rows: true class) as counts and row shares; past MATRIX_LIMIT, its most_confused()."""
    confusion, names = confusion.detach().cpu().to(torch.int64), drawable(names)
    shown = torch.tensor(most_confused(confusion))  # (k,) with k <= MATRIX_LIMIT
    shares = confusion.double() / confusion.sum(dim=1, keepdim=True).clamp(min=1)  # (K, K): each row's shares
    counts, shares = confusion[shown][:, shown], shares[shown][:, shown]  # (k, k)
    labels, columns = [names[i][:NAME_LENGTH] for i in shown.tolist()], [names[i][:7] for i in shown.tolist()]
    if len(set(columns)) < len(columns):  # names that begin alike (class_001, class_002): numbered, as classes are
        labels, columns = [f"{i} {names[i]}"[:NAME_LENGTH] for i in shown.tolist()], [str(i) for i in shown.tolist()]
    part = "" if len(labels) == len(names) else f", the {len(labels)} most confused of {len(names)} classes"
    size, font = len(labels), ImageFont.load_default()
    titles = [f"{title}{part} (rows: true, columns: predicted)" for title in ("counts", "row-normalised")]
    width = LABEL_WIDTH + max(size * CELL, *(round(font.getlength(title)) for title in titles)) + 10  # of one panel
    image = Image.new("RGB", (2 * width, 2 * CELL + size * CELL + 10), "white")
    draw = ImageDraw.Draw(image)
    texts = ([[str(int(v)) for v in row] for row in counts], [[f"{v:.2f}" for v in row] for row in shares])
    for left, title, text in zip((0, width), titles, texts, strict=True):
        draw.text((left + LABEL_WIDTH, 4), title, fill="black", font=font)
        for i, (name, column) in enumerate(zip(labels, columns, strict=True)):
            draw.text((left + 4, cell_centre(i, 0)[1] - 6), name, fill="black", font=font)  # row labels
            x = left + cell_centre(0, i)[0] - CELL // 2 + 2
            draw.text((x, CELL + (i % 2) * 14), column, fill="black", font=font)  # column labels, staggered
        for i in range(size):
            for j in range(size):
                value = float(shares[i, j])
                x, y = cell_centre(i, j)
                box = (left + x - CELL // 2, y - CELL // 2, left + x + CELL // 2 - 1, y + CELL // 2 - 1)
                colour = tuple(round(255 - value * (255 - c)) for c in (30, 80, 170))  # white to dark blue
                draw.rectangle(box, fill=colour, outline=(200, 200, 200))
                draw.text((box[0] + 4, y - 6), text[i][j], fill="white" if value > 0.5 else "black", font=font)
    return image


def cell_centre(row: int, column: int) -> tuple[int, int]:
    """(x, y) of a cell's centre in either panel of confusion_image(), from that panel's left edge."""
    return LABEL_WIDTH + column * CELL + CELL // 2, 2 * CELL + row * CELL + CELL // 2


def most_confused(confusion: torch.Tensor, limit: int = MATRIX_LIMIT) -> list[int]:
    """The classes of a confusion matrix (K, K) worth drawing, in class order: all K up to `limit`.

    Past that, those of the largest off-diagonal counts (true, then predicted), largest first; ties to the lower index.
    """
    size = confusion.shape[0]
    if size <= limit:
        return list(range(size))
    errors = confusion.to(torch.int64).clone()
    errors.fill_diagonal_(-1)  # right predictions come last
    # limit * limit cells always suffice: fewer than limit * (limit - 1) of them can join two chosen classes.
    cells = errors.flatten().argsort(descending=True, stable=True)[: limit * limit]  # (limit ** 2,)
    chosen: dict[int, None] = {}  # an ordered set
    for cell in cells.tolist():
        for index in divmod(cell, size):  # (true, predicted)
            if len(chosen) < limit:
                chosen[index] = None
    return sorted(chosen)


def note(text: str) -> Image.Image:
    """A small picture that says `text`, for when there is nothing to show."""
    image = Image.new("RGB", (8 + 7 * len(text), 24), "white")
    ImageDraw.Draw(image).text((4, 6), text, fill="black", font=ImageFont.load_default())
    return image
