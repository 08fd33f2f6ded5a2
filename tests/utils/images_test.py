import numpy as np
import pytest
from PIL import ImageFont

from keras_diffusion.utils.images import caption_grid, save_caption_grid


def test_each_caption_is_drawn_under_its_image_within_its_cell(tmp_path):
    images = np.full((3, 16, 16, 1), -1.0, np.float32)  # black 16x16 tiles
    long = "waving hand sign: dark skin tone " * 6
    captions = [b"cat face", "", long]
    grid = save_caption_grid(images, captions, tmp_path / "data.png", columns=3)
    assert (tmp_path / "data.png").exists()
    assert grid.dtype == np.uint8 and grid.shape[-1] == 3
    grey = grid.mean(axis=-1)
    # The black tiles, scaled up to cells of at least 96 pixels.
    dark_rows = np.flatnonzero((grey < 10).sum(axis=1) > 200)
    top, bottom = dark_rows[0], dark_rows[-1] + 1
    cell = bottom - top
    assert cell >= 96
    starts = [
        x for x in range(1, grid.shape[1]) if grey[top, x] < 10 <= grey[top, x - 1]
    ]
    assert len(starts) == 3
    text = grey[bottom:]
    # Text under the first and third images, none under the empty caption.
    assert text[:, starts[0] : starts[0] + cell].min() < 100
    assert text[:, starts[1] : starts[1] + cell].min() == 255
    assert text[:, starts[2] : starts[2] + cell].min() < 100
    # The long caption is wrapped and cut: nothing drawn outside its cell.
    assert grey[:, starts[2] + cell :].min() == 255
    assert grey[:, starts[1] + cell : starts[2]].min() == 255
    lines = np.flatnonzero(text[:, starts[2] : starts[2] + cell].min(axis=1) < 200)
    assert lines[-1] - lines[0] < 3 * 16


def test_a_caption_for_each_image():
    with pytest.raises(ValueError, match="`captions`.*2.*Received: 1"):
        caption_grid(np.zeros((2, 8, 8, 3)), ["only one"])


def _has_dejavu():
    try:
        ImageFont.truetype("DejaVuSans.ttf", 11)
    except OSError:
        return False
    return True


@pytest.mark.skipif(
    not _has_dejavu(),
    reason="no system font here: captions fall back to Pillow's ASCII font",
)
def test_accented_letters_are_drawn_not_boxed():
    def drawn(caption):  # the text under one 8x8 image (scaled to 96)
        return caption_grid(np.zeros((1, 8, 8, 3)), [caption])[100:]

    box = drawn("\U000f0000")  # a private-use character: no font draws it
    assert not np.array_equal(drawn("é"), drawn("e"))
    assert not np.array_equal(drawn("é"), box)
    caption = drawn("café crème")
    assert not np.array_equal(caption, drawn("cafe creme"))
    assert not np.array_equal(caption, drawn("caf\U000f0000 cr\U000f0000me"))
