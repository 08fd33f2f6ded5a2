"""A line plot as a PNG, with Pillow alone (the core needs no plotting
library): what a sweep writes next to its CSV."""

import math

import numpy as np
from PIL import Image, ImageDraw

from keras_diffusion.utils import files

_SIZE = (640, 420)
_MARGIN = (70, 30, 20, 60)  # left, top, right, bottom
_BLUE, _GREY, _RED = (31, 119, 180), (150, 150, 150), (214, 39, 40)


def _ticks(low, high, log):
    if log:
        exponents = range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
        candidates = [m * 10.0**e for e in exponents for m in (1, 2, 5)]
        return [v for v in candidates if low <= v <= high]
    return list(np.linspace(low, high, 5))


def save_curve(path, x, y, title, x_label, y_label, reference=None, log_x=True):
    """Writes the curve `y(x)` (its lowest point marked) to the PNG `path`,
    atomically; `reference` is `(value, label)` drawn as a dashed level."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    values = [*y, *([reference[0]] if reference else [])]
    y_low, y_high = min(values), max(values)
    pad = 0.05 * (y_high - y_low or 1.0)
    y_low, y_high = y_low - pad, y_high + pad
    left, top, right, bottom = _MARGIN
    width, height = _SIZE[0] - left - right, _SIZE[1] - top - bottom

    def to_x(value):
        if log_x:
            low, high = math.log(x.min()), math.log(x.max())
            value = math.log(value)
        else:
            low, high = x.min(), x.max()
        return left + width * (value - low) / ((high - low) or 1.0)

    def to_y(value):
        return top + height * (1.0 - (value - y_low) / (y_high - y_low))

    image = Image.new("RGB", _SIZE, "white")
    draw = ImageDraw.Draw(image)
    draw.rectangle([left, top, left + width, top + height], outline="black")
    for tick in _ticks(x.min(), x.max(), log_x):
        draw.line([to_x(tick), top + height, to_x(tick), top + height + 4], "black")
        draw.text((to_x(tick) - 10, top + height + 8), f"{tick:g}", fill="black")
    for tick in _ticks(y_low, y_high, False):
        draw.line([left - 4, to_y(tick), left, to_y(tick)], "black")
        draw.text((5, to_y(tick) - 6), f"{tick:.3g}", fill="black")
    draw.text((left, 8), title, fill="black")
    draw.text((left + width // 2 - 30, _SIZE[1] - 22), x_label, fill="black")
    draw.text((5, top - 22), y_label, fill="black")
    if reference is not None:
        level = to_y(reference[0])
        for start in range(left, left + width, 12):
            draw.line([start, level, min(start + 6, left + width), level], _GREY)
        draw.text((left + 6, level - 14), reference[1], fill=_GREY)
    points = [(to_x(a), to_y(b)) for a, b in zip(x, y, strict=True)]
    draw.line(points, _BLUE, width=2)
    for px, py in points:
        draw.ellipse([px - 3, py - 3, px + 3, py + 3], fill=_BLUE)
    best = int(np.argmin(y))
    px, py = points[best]
    draw.ellipse([px - 6, py - 6, px + 6, py + 6], outline=_RED, width=2)
    with files.atomic_write(path, suffix=".png") as tmp:
        image.save(tmp, format="PNG")
