"""`benchmarks.text_judges`: the judges of a text model's emoji, on images
made here: a colour named by its hue after calibration on other shapes, a
balanced accuracy that a majority category cannot fake, skin brightness."""

import numpy as np

from benchmarks import text_judges

HUES = {"red": 0, "orange": 30, "yellow": 55, "green": 120, "blue": 215, "purple": 285}


def _shape(hue, rng, size=32):
    """A coloured square on white, in [-1, 1], at a jittered place."""
    image = np.ones((size, size, 3))
    rgb = _hsv(hue, 0.9, 0.9)
    x, y = rng.integers(4, 12, 2)
    image[y : y + 16, x : x + 16] = rgb
    return image * 2.0 - 1.0


def _hsv(hue, saturation, value):
    import colorsys

    return np.array(colorsys.hsv_to_rgb(hue / 360.0, saturation, value))


def test_a_colour_is_named_by_its_hue_calibrated_on_other_shapes():
    rng = np.random.default_rng(0)
    images, captions = [], []
    for colour, hue in HUES.items():
        for shape in ("circle", "square", "apple"):
            images.append(_shape(hue + rng.uniform(-5, 5), rng))
            captions.append(f"large {colour} {shape}")
    images.append(_shape(150, rng))
    captions.append("purple heart")  # a composition: never a calibration
    judge = text_judges.ColourJudge(images, captions)
    assert abs(judge.references["purple"] - 285) < 6
    purple = [_shape(280, rng), _shape(290, rng), _shape(120, rng)]
    assert [judge.colour(i) for i in purple] == ["purple", "purple", "green"]
    assert judge.share(purple, "purple") == round(2 / 3, 3)
    assert judge.colour(np.ones((32, 32, 3))) is None  # white: no colour


def test_balanced_accuracy_counts_each_category_alike():
    rng = np.random.default_rng(0)
    categories = ["people"] * 60 + ["flags"] * 20 + ["food"] * 20
    hue = {"people": 30, "flags": 215, "food": 120}
    images = np.stack([_shape(hue[c], rng) for c in categories])
    classifier = text_judges.CategoryClassifier(images, categories, components=8)
    rates = classifier.rates(images, categories)
    assert rates["balanced"] == 1.0 and rates["per_category"]["flags"] == [1.0, 20]
    # Everything drawn as the majority: raw 0.6, balanced a third.
    majority = np.stack([_shape(30, rng) for _ in categories])
    rates = classifier.rates(majority, categories)
    assert rates["rate"] == 0.6 and rates["balanced"] == round(1 / 3, 3)


def test_a_lighter_skin_reads_brighter():
    light = np.ones((1, 32, 32, 3)) * 0.0 + _hsv(30, 0.4, 0.95) * 2 - 1
    dark = np.ones((1, 32, 32, 3)) * 0.0 + _hsv(25, 0.6, 0.45) * 2 - 1
    assert text_judges.tones_right(light, dark) == (1, 1.0)
    assert text_judges.tones_right(dark, light) == (1, 0.0)
    white = np.ones((1, 32, 32, 3))
    judged, share = text_judges.tones_right(white, dark)  # no skin: not judged
    assert judged == 0 and np.isnan(share)
