"""The extractors that make a control image of a training image."""

import numpy as np
import pytest

from keras_diffusion.conditioning import control


def _square(background=-1.0, ink=1.0):
    """A 4x4 square of ink in the middle of an 8x8 image, 3 channels."""
    image = np.full((1, 8, 8, 3), background, np.float32)
    image[:, 2:6, 2:6] = ink
    return image


def test_the_silhouette_is_the_pixels_away_from_the_background():
    expected = np.zeros((1, 8, 8, 1), np.float32)
    expected[:, 2:6, 2:6] = 1.0
    np.testing.assert_array_equal(np.asarray(control.silhouette(_square())), expected)
    # A white background (a folder's default), and ink in one channel only.
    on_white = _square(background=1.0, ink=1.0)
    on_white[:, 2:6, 2:6, 0] = -1.0
    out = control.silhouette(on_white, background=1.0)
    np.testing.assert_array_equal(np.asarray(out), expected)
    # Anti-aliasing within the threshold is background.
    faint = _square(ink=-0.9)
    assert not np.asarray(control.silhouette(faint)).any()


def test_edges_outline_the_square_and_leave_flat_regions():
    out = np.asarray(control.edges(_square()))[0, ..., 0]
    assert out.shape == (8, 8)
    assert out[3:5, 3:5].sum() == 0  # inside: flat
    assert out[0, :].sum() == 0 and out[:, 0].sum() == 0  # far outside: flat
    assert out[2, 2:6].all() and out[5, 2:6].all()  # the border: edges
    assert out[2:6, 1].all() and out[2:6, 6].all()


def test_an_extractor_is_checked_by_name_and_options():
    assert control.check_extractor("edges") == {"name": "edges", "threshold": 1.0}
    assert control.check_extractor(
        {"name": "silhouette", "background": [1.0, 1.0, 1.0]}
    ) == {"name": "silhouette", "background": [1.0, 1.0, 1.0], "threshold": 0.2}
    with pytest.raises(ValueError, match="'edgs'"):
        control.check_extractor("edgs")
    with pytest.raises(ValueError, match="takes.*'threshold'.*Received.*'sigma'"):
        control.check_extractor({"name": "edges", "sigma": 1.0})
    with pytest.raises(TypeError, match="extractor=3"):
        control.check_extractor(3)
