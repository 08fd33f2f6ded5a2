"""One image file to one uint8 array, as a person sees the image.

Pillow does the decoding, so every file a browser shows decodes the same way:
palette and 16-bit PNGs, GIF transparency, CMYK and progressive JPEGs, EXIF
orientation. The steps, in order:

1. the first frame (animated GIF, WebP or PNG);
2. JPEGs are decoded at a reduced scale when far larger than needed (`draft`);
3. EXIF orientation is applied;
4. 16-bit greyscale is scaled to 8 bits (65535 -> 255), not clipped;
5. transparency (an alpha channel, a palette's tRNS entry, a GIF's
   transparent index) is composited over `background`, so a fully
   transparent pixel becomes exactly the background colour, whatever colour
   the file stores under it;
6. greyscale (ITU-R 601 luma) when `channels=1`;
7. the image is fitted to `image_size` by `resize`: "crop" (centre crop to
   the aspect ratio, then resize), "pad" (resize to fit, then pad with the
   background) or "stretch"; resizing is bicubic and antialiased.
"""

import numpy as np
from PIL import Image, ImageOps

BACKGROUNDS = {"white": (255, 255, 255), "black": (0, 0, 0)}
DEFAULT_BACKGROUND = "white"
RESIZE_MODES = ("crop", "pad", "stretch")
DEFAULT_RESIZE = "crop"

_RESAMPLE = Image.Resampling.BICUBIC
_ORIENTATION = 0x0112  # the EXIF tag
_QUARTER_TURNS = (5, 6, 7, 8)  # orientations that swap width and height
# Pillow's modes for 16-bit (and 32-bit integer) greyscale.
_WIDE_GREY = ("I;16", "I;16B", "I;16L", "I;16N", "I")


def parse_background(background):
    """Returns `background` as an `(R, G, B)` tuple of ints in [0, 255].

    Args:
        background: `"white"`, `"black"`, a string `"R,G,B"` or a sequence of
            three ints in [0, 255].

    Raises:
        ValueError: anything else; the message echoes the value.
    """
    if isinstance(background, str):
        name = background.strip().lower()
        if name in BACKGROUNDS:
            return BACKGROUNDS[name]
        parts = name.split(",")
        try:
            values = [int(part) for part in parts]
        except ValueError:
            values = None
    elif isinstance(background, (tuple, list)):
        values = list(background)
    else:
        values = None
    if (
        values is not None
        and len(values) == 3
        and all(isinstance(v, int) and not isinstance(v, bool) for v in values)
        and all(0 <= v <= 255 for v in values)
    ):
        return tuple(values)
    raise ValueError(
        "Argument `background` must be 'white', 'black' or 'R,G,B' with each "
        f"value in [0, 255]. Received: background={background!r}"
    )


def background_name(background):
    """The string form of a background: `"white"`, `"black"` or `"R,G,B"`."""
    rgb = parse_background(background)
    for name, value in BACKGROUNDS.items():
        if value == rgb:
            return name
    return ",".join(str(v) for v in rgb)


def _wide_grey_to_la(image):
    # Pillow's own "I;16" -> "L" conversion clips at 255; scale instead.
    values = np.asarray(image).astype(np.float64)
    grey = np.round(np.clip(values, 0, 65535) / 257.0).astype(np.uint8)
    alpha = np.full(grey.shape, 255, np.uint8)
    transparent = image.info.get("transparency")
    if isinstance(transparent, int):
        alpha[values == transparent] = 0
    return Image.fromarray(np.stack([grey, alpha], axis=-1), "LA")


def _composite(image, background):
    """An RGB image: `image` over an opaque `background` where it is transparent."""
    if image.mode in _WIDE_GREY:
        image = _wide_grey_to_la(image)
    if not image.has_transparency_data:
        return image.convert("RGB")
    rgba = image.convert("RGBA")
    canvas = Image.new("RGBA", rgba.size, (*background, 255))
    return Image.alpha_composite(canvas, rgba).convert("RGB")


def _fit(image, size, resize, background):
    """`image` brought to `size` (width, height) the way `resize` says."""
    if image.size == size:
        return image
    if resize == "crop":
        return ImageOps.fit(image, size, method=_RESAMPLE)
    if resize == "pad":
        fill = background if image.mode == "RGB" else _luma(background)
        return ImageOps.pad(image, size, method=_RESAMPLE, color=fill)
    return image.resize(size, _RESAMPLE)


def _luma(rgb):
    # The value Pillow's "RGB" -> "L" gives this colour.
    return int(np.asarray(Image.new("RGB", (1, 1), rgb).convert("L"))[0, 0])


def load_image(
    path,
    image_size,
    channels=3,
    background=DEFAULT_BACKGROUND,
    resize=DEFAULT_RESIZE,
):
    """Decodes one image file to a uint8 array `(height, width, channels)`.

    Args:
        path: str or path-like, the file.
        image_size: `(height, width)`, the size of the result.
        channels: `1` (greyscale) or `3` (RGB). Defaults to `3`.
        background: what shows through transparency, see
            `parse_background`. Defaults to `"white"`.
        resize: `"crop"`, `"pad"` or `"stretch"`. Defaults to `"crop"`.

    Returns:
        `(array, (width, height))`: the decoded image and the size of the
        source after EXIF orientation.

    Raises:
        OSError, ValueError, SyntaxError, EOFError: the file is not a
        readable image (Pillow's errors for unknown, truncated or corrupt
        files).
    """
    height, width = image_size
    rgb = parse_background(background)
    with Image.open(path) as image:
        image.seek(0)
        source_size = image.size
        if image.getexif().get(_ORIENTATION) in _QUARTER_TURNS:
            source_size = source_size[::-1]
        if image.format == "JPEG":
            # Decode with a DCT scale-down, still at least twice the target.
            side = 2 * max(height, width)
            image.draft(None, (side, side))
        image = _composite(ImageOps.exif_transpose(image), rgb)
    if channels == 1:
        image = image.convert("L")
    image = _fit(image, (width, height), resize, rgb)
    array = np.asarray(image, dtype=np.uint8)
    if array.ndim == 2:
        array = array[..., None]
    return array, source_size
