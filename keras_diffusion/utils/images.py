"""Image grids as PNGs, and the class-per-row labels that grids share.

PNGs are written through `keras_diffusion.utils.files.atomic_write`, so a crash never
leaves a truncated image.
"""

import functools

import numpy as np

from keras_diffusion.utils.checks import check_int
from keras_diffusion.utils.files import atomic_write


def to_uint8(images):
    """Maps images in [-1, 1] to uint8 in [0, 255] (values outside are clipped)."""
    images = np.asarray(images, dtype=np.float32)
    return np.round((np.clip(images, -1.0, 1.0) + 1.0) * 127.5).astype(np.uint8)


def class_rows(num_classes, num_images):
    """Labels for `num_images` samples of a class-conditional model, by class.

    The one label set that grids, `scripts/sample.py` and evaluation share:
    sorted, each class `num_images // num_classes` or one more times (so the
    classes are balanced whatever the count), `num_images` labels in all.

    Args:
        num_classes: int, or `None` for an unconditional model.
        num_images: int >= 1.

    Returns:
        `(labels, rows)`: a list of ints (or `None` when `num_classes` is
        `None`), and the rows of a grid with one row per class: `num_classes`
        when `num_images` divides by it, else `None` (a square grid).

    Example:

    ```python
    class_rows(3, 6)  # ([0, 0, 1, 1, 2, 2], 3)
    class_rows(10, 64)[0].count(0)  # 6 (classes 0..3 get 7)
    ```
    """
    if num_classes is None:
        return None, None
    labels = [index * num_classes // num_images for index in range(num_images)]
    return labels, (num_classes if num_images % num_classes == 0 else None)


def _checked_batch(images):
    images = np.asarray(images)
    if images.ndim != 4 or images.shape[0] < 1 or images.shape[-1] not in (1, 3):
        raise ValueError(
            "Argument `images` must have shape (N, H, W, C) with N >= 1 and C "
            f"1 or 3. Received: images with shape={images.shape}"
        )
    return images


def square_rows(count):
    """The rows of `make_grid`'s square-ish grid of `count` images
    (`ceil(sqrt(count))` columns)."""
    return -(-count // int(np.ceil(np.sqrt(count))))


def make_grid(images, rows=None, padding=1, pad_value=0):
    """Tiles a batch into one image, row by row.

    Args:
        images: array `(N, H, W, C)` in [-1, 1], `C` 1 or 3.
        rows: int, the number of rows; `None` for a square-ish grid
            (`ceil(sqrt(N))` columns). Defaults to `None`.
        padding: int, pixels between tiles. Defaults to `1`.
        pad_value: int in [0, 255], the colour between tiles. Defaults to `0`.

    Returns:
        uint8 array `(rows * (H + p) - p, cols * (W + p) - p, C)`.
    """
    images = _checked_batch(images)
    n, h, w, c = images.shape
    rows = square_rows(n) if rows is None else check_int("rows", rows, 1)
    cols = -(-n // rows)
    grid = np.full(
        (rows * (h + padding) - padding, cols * (w + padding) - padding, c),
        pad_value,
        dtype=np.uint8,
    )
    tiles = to_uint8(images)
    for index in range(n):
        r, col = divmod(index, cols)
        y, x = r * (h + padding), col * (w + padding)
        grid[y : y + h, x : x + w] = tiles[index]
    return grid


def beside_controls(controls, images):
    """Each of `images` (`(n, H, W, C)` in [-1, 1]) after its control
    (`(n, H, W, 1 or C)` in [0, 1], black to white), as one batch of `2n`
    tiles for `make_grid`: a grid of an even number of columns keeps each
    pair together."""
    images = np.asarray(images, np.float32)
    controls = np.asarray(controls, np.float32)[: len(images)] * 2.0 - 1.0
    if controls.shape[-1] != images.shape[-1]:
        controls = np.repeat(controls.mean(-1, keepdims=True), images.shape[-1], -1)
    return np.stack([controls, images], axis=1).reshape(-1, *images.shape[1:])


def save_png(array, path, scale=1):
    """Writes a uint8 `(H, W)` or `(H, W, C)` array as a PNG, atomically.

    Args:
        array: uint8 array; `C` 1 or 3.
        path: str or path-like, ending in `.png`.
        scale: int, nearest-neighbour upscaling, so small images are visible.
            Defaults to `1`.
    """
    from PIL import Image

    array = np.asarray(array, dtype=np.uint8)
    if array.ndim == 3 and array.shape[-1] == 1:
        array = array[..., 0]
    if scale > 1:
        array = np.repeat(np.repeat(array, scale, axis=0), scale, axis=1)
    with atomic_write(path, suffix=".png") as tmp:
        Image.fromarray(array).save(tmp, format="PNG")


def save_grid(images, path, rows=None, scale=None):
    """Writes `make_grid(images, rows)` to `path` as a PNG, atomically.

    Args:
        images: array `(N, H, W, C)` in [-1, 1].
        path: str or path-like.
        rows: int or `None`, see `make_grid`. Defaults to `None`.
        scale: int or `None`; `None` upscales tiles smaller than 64 pixels
            so the grid is easy to see. Defaults to `None`.

    Returns:
        The uint8 grid that was written (before upscaling).
    """
    grid = make_grid(images, rows=rows)
    if scale is None:
        scale = max(1, 64 // max(np.asarray(images).shape[1:3]))
    save_png(grid, path, scale=scale)
    return grid


# A caption grid's smallest cell width (pixels) and its text's size and lines.
_CAPTION_CELL = 96
_CAPTION_FONT_SIZE = 11
_CAPTION_LINES = 3

# TrueType fonts that draw accented Latin, Greek and Cyrillic letters, looked
# up by file name in the system's font folders (Pillow's search: Linux's
# /usr/share/fonts, macOS's and Windows' Fonts folders). No dependency ships
# one, and Pillow's own scalable default draws ASCII alone (a box for "é").
_CAPTION_FONTS = (
    "DejaVuSans.ttf",
    "NotoSans-Regular.ttf",
    "LiberationSans-Regular.ttf",
    "Arial.ttf",
    "arial.ttf",
    "Helvetica.ttc",
)


@functools.cache
def caption_font(size=_CAPTION_FONT_SIZE):
    """The font captions are drawn in, at `size` pixels: the first of the
    system's TrueType fonts that draw accented letters (DejaVu Sans, Noto
    Sans, Liberation Sans, Arial, Helvetica), else Pillow's scalable
    default, which draws ASCII alone. Monochrome: no colour emoji."""
    from PIL import ImageFont

    for name in _CAPTION_FONTS:
        try:
            return ImageFont.truetype(name, size)
        except OSError:
            continue
    return ImageFont.load_default(size=size)


def _wrapped(text, font, width, max_lines):
    """`text` in lines no wider than `width`; what does not fit in
    `max_lines` is cut, the last line ending in "..."."""
    lines, line = [], ""
    for word in text.split():
        candidate = f"{line} {word}".strip()
        if font.getlength(candidate) <= width:
            line = candidate
            continue
        if line:
            lines.append(line)
        line = word
        while font.getlength(line) > width and len(line) > 1:  # one long word
            cut = len(line) - 1
            while cut > 1 and font.getlength(line[:cut]) > width:
                cut -= 1
            lines.append(line[:cut])
            line = line[cut:]
    if line:
        lines.append(line)
    if len(lines) > max_lines:
        last = lines[max_lines - 1]
        while last and font.getlength(last + "...") > width:
            last = last[:-1]
        lines = lines[: max_lines - 1] + [last.rstrip() + "..."]
    return lines


def caption_grid(images, captions, columns=None, rows=None):
    """Tiles a batch into one RGB image with each caption under its image.

    Small images are scaled up (nearest neighbour) so that a cell is at least
    96 pixels wide; each caption is drawn in `caption_font()` (a system
    font that draws accented letters, else Pillow's default), black on
    white, wrapped to the cell's width and cut after three lines.

    Args:
        images: array `(N, H, W, C)` in [-1, 1], `C` 1 or 3.
        captions: `N` captions (str or bytes, as a `tf.string` batch gives).
        columns: int, images a row; `None` for a square-ish grid, or the
            columns `rows` takes. Defaults to `None`.
        rows: int or `None`, the grid's rows (as `make_grid`'s), where
            `columns` is not given. Defaults to `None`.

    Returns:
        uint8 array `(height, width, 3)`.
    """
    from PIL import Image, ImageDraw

    images = _checked_batch(images)
    n, h, w, c = images.shape
    tiles = to_uint8(images)
    captions = [t.decode() if isinstance(t, bytes) else str(t) for t in captions]
    if len(captions) != n:
        raise ValueError(
            f"Argument `captions` must hold one caption per image ({n}). "
            f"Received: {len(captions)} captions"
        )
    scale = max(1, -(-_CAPTION_CELL // w))
    if columns is not None:
        columns = check_int("columns", columns, 1)
    elif rows is not None:
        columns = -(-n // check_int("rows", rows, 1))
    else:
        columns = int(np.ceil(np.sqrt(n)))
    rows = -(-n // columns)
    font = caption_font()
    line_height = _CAPTION_FONT_SIZE + 3
    cell_w, pad = w * scale, 4
    text_h = _CAPTION_LINES * line_height + pad
    cell_h = h * scale + text_h
    canvas = Image.new(
        "RGB", (columns * (cell_w + pad) + pad, rows * (cell_h + pad) + pad), "white"
    )
    draw = ImageDraw.Draw(canvas)
    for index in range(n):
        r, col = divmod(index, columns)
        x, y = pad + col * (cell_w + pad), pad + r * (cell_h + pad)
        tile = tiles[index] if c == 3 else np.repeat(tiles[index], 3, axis=-1)
        tile = np.repeat(np.repeat(tile, scale, axis=0), scale, axis=1)
        canvas.paste(Image.fromarray(tile), (x, y))
        lines = _wrapped(captions[index], font, cell_w, _CAPTION_LINES)
        for number, line in enumerate(lines):
            draw.text(
                (x, y + h * scale + 2 + number * line_height),
                line,
                fill="black",
                font=font,
            )
    return np.asarray(canvas)


def save_caption_grid(images, captions, path, columns=None, rows=None):
    """Writes `caption_grid(images, captions, columns, rows)` to `path` as a PNG,
    atomically; returns the grid."""
    grid = caption_grid(images, captions, columns, rows)
    save_png(grid, path)
    return grid


def grid_prompts(prompts, num_images):
    """`(prompts, rows)`: `num_images` prompts for a text model's grid, each
    of `prompts` in turn as `class_rows` gives each class (a row each when
    they divide `num_images`, else `rows` is `None`: a square grid)."""
    labels, rows = class_rows(len(prompts), num_images)
    return [prompts[label] for label in labels], rows
