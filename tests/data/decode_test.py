"""Each kind of real-world image file decodes as a person sees it.

The fixtures are written here, in the formats users' folders hold: RGBA, LA,
palette PNGs with tRNS, GIF transparency, 16-bit PNGs, CMYK and progressive
JPEGs, EXIF orientation, animated GIFs, WebP.
"""

import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from keras_diffusion.data.decode import load_image, parse_background

RED = (220, 30, 40)
# A colour stored under fully transparent pixels: what a decoder that drops
# alpha shows (smeared edge colours in real emoji files).
GARBAGE = (13, 250, 90)


def _decode(path, size=8, **kwargs):
    array, _ = load_image(path, (size, size), **kwargs)
    return array


def _half_transparent_rgba(size=8):
    """Left half: garbage colour under alpha 0; right half: opaque red."""
    image = np.zeros((size, size, 4), np.uint8)
    image[:, : size // 2] = (*GARBAGE, 0)
    image[:, size // 2 :] = (*RED, 255)
    return image


def _png_bytes(array, color_type, bit_depth=16, trns=None):
    """A PNG written by hand: Pillow cannot write 16-bit colour PNGs."""
    height, width = array.shape[:2]
    dtype = ">u2" if bit_depth == 16 else "u1"
    rows = b"".join(b"\x00" + array[y].astype(dtype).tobytes() for y in range(height))

    def chunk(kind, data):
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 0)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
    if trns is not None:
        png += chunk(b"tRNS", trns)
    return png + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


@pytest.mark.parametrize(
    "background, rgb",
    [("white", (255, 255, 255)), ("black", (0, 0, 0)), ("10,200,30", (10, 200, 30))],
)
def test_rgba_transparent_pixels_are_exactly_the_background(tmp_path, background, rgb):
    path = tmp_path / "sprite.png"
    Image.fromarray(_half_transparent_rgba(16), "RGBA").save(path)
    decoded = _decode(path, size=16, background=background)
    # Away from the edge (bicubic reaches 2 pixels), exact colours.
    assert (decoded[:, :5] == rgb).all()
    assert (decoded[:, -5:] == RED).all()
    fully_transparent = np.zeros((12, 12, 4), np.uint8)
    fully_transparent[..., :3] = GARBAGE
    Image.fromarray(fully_transparent, "RGBA").save(path)
    assert (_decode(path, size=8, background=background) == rgb).all()


def test_partial_alpha_is_blended(tmp_path):
    image = np.zeros((4, 4, 4), np.uint8)
    image[...] = (0, 0, 0, 128)
    Image.fromarray(image, "RGBA").save(tmp_path / "a.png")
    decoded = _decode(tmp_path / "a.png", size=4, background="white")
    np.testing.assert_allclose(decoded, 127, atol=1)


def test_la_greyscale_with_alpha(tmp_path):
    image = np.zeros((8, 8, 2), np.uint8)
    image[:, :4] = (77, 0)  # grey under full transparency
    image[:, 4:] = (40, 255)
    Image.fromarray(image, "LA").save(tmp_path / "la.png")
    decoded = _decode(tmp_path / "la.png", size=8, background="white")
    assert (decoded[:, :2] == 255).all()
    assert (decoded[:, -2:] == 40).all()


def test_palette_png_with_trns(tmp_path):
    indices = np.zeros((8, 8), np.uint8)
    indices[:, 4:] = 1
    image = Image.fromarray(indices, "P")
    image.putpalette([*GARBAGE, *RED] + [0] * 762)
    image.save(tmp_path / "p.png", transparency=0)  # index 0 is transparent
    decoded = _decode(tmp_path / "p.png", size=8, background="black")
    assert (decoded[:, :2] == 0).all()
    assert (decoded[:, -2:] == RED).all()


def test_gif_transparency_and_first_frame_only(tmp_path):
    frames = []
    for colour in (RED, (0, 0, 255)):
        indices = np.zeros((8, 8), np.uint8)
        indices[:, 4:] = 1
        frame = Image.fromarray(indices, "P")
        frame.putpalette([*GARBAGE, *colour] + [0] * 762)
        frames.append(frame)
    path = tmp_path / "anim.gif"
    frames[0].save(
        path, save_all=True, append_images=frames[1:], transparency=0, duration=100
    )
    assert Image.open(path).n_frames == 2
    decoded = _decode(path, size=8, background="white")
    assert (decoded[:, :2] == 255).all()
    assert (decoded[:, -2:] == RED).all()  # the first frame, not the blue one


@pytest.mark.parametrize("color_type", [0, 2, 4, 6])
def test_16_bit_pngs_are_scaled_not_clipped(tmp_path, color_type):
    grey = np.array([[0, 257 * 128, 65535, 257 * 64]] * 4, np.uint16)
    channels = {0: 1, 2: 3, 4: 2, 6: 4}[color_type]
    array = np.stack([grey] * channels, axis=-1)
    if color_type in (4, 6):
        array[..., -1] = 65535  # opaque
    path = tmp_path / "deep.png"
    path.write_bytes(_png_bytes(array, color_type))
    decoded = _decode(path, size=4, resize="stretch")
    np.testing.assert_array_equal(decoded[0, :, 0], [0, 128, 255, 64])


def test_16_bit_grey_with_trns(tmp_path):
    grey = np.array([[300, 65535]], np.uint16).repeat(2, axis=0)
    path = tmp_path / "t.png"
    path.write_bytes(_png_bytes(grey, 0, trns=struct.pack(">H", 300)))
    decoded, _ = load_image(path, (2, 2), background="black", resize="stretch")
    np.testing.assert_array_equal(decoded[:, 0], 0)
    np.testing.assert_array_equal(decoded[:, 1], 255)


def test_grey_to_rgb_and_rgb_to_grey(tmp_path):
    Image.fromarray(np.full((8, 8), 90, np.uint8), "L").save(tmp_path / "g.png")
    rgb = _decode(tmp_path / "g.png", channels=3)
    assert rgb.shape == (8, 8, 3) and (rgb == 90).all()
    Image.fromarray(np.full((8, 8, 3), RED, np.uint8)).save(tmp_path / "c.png")
    grey = _decode(tmp_path / "c.png", channels=1)
    luma = round(0.299 * RED[0] + 0.587 * RED[1] + 0.114 * RED[2])
    assert grey.shape == (8, 8, 1) and (np.abs(grey.astype(int) - luma) <= 1).all()
    Image.fromarray(np.full((8, 8, 3), 255, np.uint8)).save(tmp_path / "w.png")
    assert (_decode(tmp_path / "w.png", channels=1) == 255).all()


@pytest.mark.parametrize("kind", ["cmyk", "progressive"])
def test_cmyk_and_progressive_jpegs(tmp_path, kind):
    image = Image.fromarray(np.full((16, 16, 3), RED, np.uint8))
    path = tmp_path / "photo.jpg"
    if kind == "cmyk":
        image.convert("CMYK").save(path, quality=95)
        assert Image.open(path).mode == "CMYK"
    else:
        image.save(path, quality=95, progressive=True)
        assert Image.open(path).info.get("progressive")
    decoded = _decode(path, size=8)
    assert np.abs(decoded.astype(int) - RED).max() <= 8


def test_exif_orientation_is_honoured(tmp_path):
    # Stored 16 wide x 8 high with red on the left; orientation 6 means the
    # viewer rotates it 90 degrees clockwise: 8 wide x 16 high, red on top.
    stored = np.zeros((8, 16, 3), np.uint8)
    stored[:, :8] = RED
    exif = Image.Exif()
    exif[0x0112] = 6
    path = tmp_path / "rotated.jpg"
    Image.fromarray(stored).save(path, exif=exif, quality=95)
    decoded, source_size = load_image(path, (16, 8), resize="stretch")
    assert source_size == (8, 16)
    assert np.abs(decoded[:6].astype(int) - RED).max() <= 12
    assert decoded[-6:].max() <= 12


def test_webp(tmp_path):
    Image.fromarray(_half_transparent_rgba(8), "RGBA").save(
        tmp_path / "s.webp", lossless=True
    )
    decoded = _decode(tmp_path / "s.webp", size=8)
    assert (decoded[:, :2] == 255).all() and (decoded[:, -2:] == RED).all()


def test_resize_modes_on_a_wide_image(tmp_path):
    # 8 high x 24 wide: white | red | white thirds.
    wide = np.full((8, 24, 3), 255, np.uint8)
    wide[:, 8:16] = RED
    Image.fromarray(wide).save(tmp_path / "wide.png")
    crop = _decode(tmp_path / "wide.png", size=8, resize="crop")
    assert (crop == RED).all()  # the centre square
    pad = _decode(tmp_path / "wide.png", size=24, resize="pad", background="black")
    # Fitted to 24 wide x 8 high, centred: 8 black rows above and below.
    assert (pad[:8] == 0).all() and (pad[-8:] == 0).all()
    assert (pad[8:16, 11:13] == RED).all() and (pad[8:16, :2] == 255).all()
    # 8 high x 24 wide to 24 x 24: rows repeat, columns stay.
    stretch = _decode(tmp_path / "wide.png", size=24, resize="stretch")
    assert (stretch[:, :6] == 255).all() and (stretch[:, 10:14] == RED).all()


def test_pad_with_a_colour_in_greyscale(tmp_path):
    Image.fromarray(np.zeros((4, 8), np.uint8), "L").save(tmp_path / "g.png")
    pad = _decode(tmp_path / "g.png", size=8, channels=1, resize="pad")
    assert (pad[:2] == 255).all() and (pad[3:5] == 0).all()


@pytest.mark.parametrize(
    "value", ["pink", "1,2", "0,0,256", "-1,0,0", "a,b,c", (1, 2), 5, (1.0, 2, 3)]
)
def test_bad_backgrounds_name_the_argument(value):
    with pytest.raises(ValueError, match=r"`background`.*Received: background="):
        parse_background(value)


def test_background_spellings():
    assert parse_background(" White ") == (255, 255, 255)
    assert parse_background("1, 2, 3") == (1, 2, 3)
    assert parse_background((4, 5, 6)) == (4, 5, 6)
