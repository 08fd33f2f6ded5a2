"""The judges of a text model's images on the captioned emoji
(`benchmarks/text_quality.py`): the category a classifier reads, the skin
tone's brightness, and the hue of a colour-object composition.

Each is fitted or calibrated on the real training images only, and gives
its figure on the real held-out images too: the ceiling a model's images
are read against.
"""

import re

import numpy as np

from benchmarks.emoji_text import COMPOSITIONS
from keras_diffusion.metrics.native import area_downsample

TONES = ("light", "medium-light", "medium", "medium-dark", "dark")
# The colours a composition's hue is told among: its own and every other
# one the emoji shapes come in (red is the hearts' and apples' own colour).
COLOURS = ("red", "orange", "yellow", "green", "blue", "purple")
# The training captions that calibrate each colour's hue: a colour word on
# one of the compositions' shapes.
_SHAPES = r"(heart|circle|square|diamond|book|apple)"


class CategoryClassifier:
    """A logistic regression of the emoji categories, each category weighted
    alike (`class_weight="balanced"`), over a 64-component PCA of 16x16
    block means (standardized), fitted on the real training images. On the
    held-out split it reads real images at a balanced accuracy of 0.52
    (chance: 0.11), where a ridge regression of 8x8 block means read 0.34,
    most of it People & Body's."""

    def __init__(self, images, categories, components=64):
        from sklearn.decomposition import PCA
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        self.model = make_pipeline(
            PCA(components, random_state=0),
            StandardScaler(),
            LogisticRegression(class_weight="balanced", max_iter=2000),
        )
        self.model.fit(self._blocks(images), list(categories))

    @staticmethod
    def _blocks(images):
        blocks = area_downsample(images, min(16, images.shape[1]))
        return blocks.reshape(len(images), -1).astype(np.float64)

    def predict(self, images):
        return [str(c) for c in self.model.predict(self._blocks(images))]

    def rates(self, images, categories):
        """`{"rate", "balanced", "per_category"}`: the share of `images`
        read as their `categories`; the mean of that share over the
        categories present (each counted alike, as balanced accuracy); and
        each category's `[share, count]`."""
        predicted = self.predict(images)
        right = np.array([p == c for p, c in zip(predicted, categories, strict=True)])
        categories = np.asarray([str(c) for c in categories])
        per_category = {
            name: [round(float(right[categories == name].mean()), 3),
                   int((categories == name).sum())]
            for name in sorted(set(categories))
        }  # fmt: skip
        return {
            "rate": round(float(right.mean()), 3),
            "balanced": round(float(np.mean([r for r, _ in per_category.values()])), 3),
            "per_category": per_category,
        }


def skin_luminance(image):
    """Mean luminance of an image's skin pixels (the emoji skin palette's
    warm hues: red >= green >= blue, saturation 0.15-0.75), `nan` if none."""
    rgb = (np.asarray(image, np.float64) + 1.0) / 2.0
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    high, low = rgb.max(-1), rgb.min(-1)
    saturation = (high - low) / np.maximum(high, 1e-6)
    skin = (r >= g) & (g >= b) & (saturation > 0.15) & (saturation < 0.75)
    skin &= high > 0.15  # outlines
    if not skin.any():
        return float("nan")
    return float(np.mean(0.299 * r[skin] + 0.587 * g[skin] + 0.114 * b[skin]))


def tone_pairs(rows):
    """The names of held-out emoji with one skin tone, each once."""
    names = []
    for row in rows:
        name, _, tone = row["text"].partition(": ")
        if tone.endswith(" skin tone") and tone[: -len(" skin tone")] in TONES:
            if name not in names:
                names.append(name)
    return names


def tones_right(light, dark):
    """`(pairs judged, share right)`: a pair is right when the light
    image's skin is the brighter (pairs with no skin pixels left out)."""
    pairs = [
        (skin_luminance(a), skin_luminance(b)) for a, b in zip(light, dark, strict=True)
    ]
    judged = [(a, b) for a, b in pairs if np.isfinite(a) and np.isfinite(b)]
    if not judged:
        return 0, float("nan")
    return len(judged), round(float(np.mean([a > b for a, b in judged])), 3)


def hue(image):
    """The circular mean hue (degrees) of an image's coloured pixels
    (saturation and value above 0.35: the white background, the outlines
    and greys left out), `nan` where under 2% of the pixels are coloured."""
    rgb = (np.asarray(image, np.float64) + 1.0) / 2.0
    high, low = rgb.max(-1), rgb.min(-1)
    coloured = (high > 0.35) & ((high - low) / np.maximum(high, 1e-6) > 0.35)
    if coloured.mean() < 0.02:
        return float("nan")
    r, g, b = (rgb[..., i][coloured] for i in range(3))
    # The hexagonal hue's Cartesian form: atan2(sqrt(3)(g - b), 2r - g - b).
    angle = np.arctan2(np.sqrt(3.0) * (g - b), 2.0 * r - g - b)
    return float(np.degrees(np.angle(np.mean(np.exp(1j * angle)))) % 360.0)


class ColourJudge:
    """Names an image's colour among `COLOURS` by its hue's nearest
    reference, each colour's the circular mean hue of the training images
    that put that colour word on an emoji shape ("large green square")."""

    def __init__(self, images, captions):
        self.references = {}
        for colour in COLOURS:
            pattern = re.compile(rf"^(large |small )?{colour} {_SHAPES}$")
            hues = [
                hue(image)
                for image, caption in zip(images, captions, strict=True)
                if pattern.match(caption) and caption not in COMPOSITIONS
            ]
            hues = [h for h in hues if np.isfinite(h)]
            if not hues:
                raise ValueError(f"No training image calibrates the colour {colour!r}")
            mean = np.angle(np.mean(np.exp(1j * np.radians(hues))))
            self.references[colour] = float(np.degrees(mean) % 360.0)

    def colour(self, image):
        """The nearest reference colour of `image`'s hue, `None` if colourless."""
        h = hue(image)
        if not np.isfinite(h):
            return None
        distance = {
            c: abs((h - ref + 180.0) % 360.0 - 180.0)
            for c, ref in self.references.items()
        }
        return min(distance, key=distance.get)

    def share(self, images, colour):
        """The share of `images` named `colour`."""
        return round(float(np.mean([self.colour(i) == colour for i in images])), 3)
