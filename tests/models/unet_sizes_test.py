import pytest

from keras_diffusion import UNet
from keras_diffusion.models.unet_sizes import MODEL_SIZES, unet_settings

# The parameter counts (millions) the module docstring and the README give.
DOCUMENTED = {
    ("tiny", 16): 0.62,
    ("tiny", 64): 1.02,
    ("small", 16): 2.48,
    ("small", 32): 4.11,
    ("small", 64): 4.26,
}


@pytest.mark.parametrize("size, image_size", sorted(DOCUMENTED))
def test_documented_parameter_counts(size, image_size):
    unet = UNet((image_size, image_size, 3), **unet_settings(size, image_size))
    assert unet.count_params() / 1e6 == pytest.approx(
        DOCUMENTED[size, image_size], abs=0.005
    )


def test_levels_follow_the_image_size():
    levels = {
        s: len(unet_settings("small", s)["widths"]) for s in (8, 16, 32, 64, 128, 48)
    }
    # Down to 4x4 up to 32 pixels, to 8x8 above: 48, 24, 12 (6 is below 8).
    assert levels == {8: 2, 16: 3, 32: 4, 64: 4, 128: 5, 48: 3}
    for size in MODEL_SIZES:
        settings = unet_settings(size, 64)
        assert len(settings["attention_levels"]) == len(settings["widths"])
        # Attention at 16x16 (level 2 of 64, 32, 16, 8) except in the tiny U-Net.
        assert settings["attention_levels"][2] == (size != "tiny")
    widths = [unet_settings(size, 32)["widths"][0] for size in MODEL_SIZES]
    assert widths == sorted(widths) and len(set(widths)) == 4


def test_an_unknown_size_names_the_argument():
    with pytest.raises(ValueError, match="model_size='huge'"):
        unet_settings("huge", 32)
