"""Image folders for the quality tests: random coloured shapes on white.

Imported as `from tests import shape_folders`: see
tests/evaluation/folder_quality_test.py.
"""

import numpy as np
from PIL import Image, ImageDraw


def write_shapes(folder, count, seed, size=32):
    """Writes `count` PNGs of one or two random ellipses or rectangles.

    Every fourth image is RGBA on a transparent canvas whose hidden pixels
    have a random colour, so that only compositing over white makes it look
    like the others. Sources are `size` square, twice the 16x16 the tests
    judge at, so the decoder's resize runs too.
    """
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(count):
        rgba = i % 4 == 0
        if rgba:
            hidden = tuple(int(v) for v in rng.integers(0, 256, 3))
            image = Image.new("RGBA", (size, size), (*hidden, 0))
        else:
            image = Image.new("RGB", (size, size), (255, 255, 255))
        draw = ImageDraw.Draw(image)
        for _ in range(int(rng.integers(1, 3))):
            x0, y0 = rng.integers(0, size // 2, 2)
            w, h = rng.integers(size // 4, size // 2 + 1, 2)
            colour = tuple(int(v) for v in rng.integers(0, 256, 3))
            box = [int(x0), int(y0), int(x0 + w), int(y0 + h)]
            fill = (*colour, 255) if rgba else colour
            if rng.random() < 0.5:
                draw.ellipse(box, fill=fill)
            else:
                draw.rectangle(box, fill=fill)
        image.save(folder / f"shape_{i:04d}.png")
    return folder
