"""Judge a digits model's samples as a distribution, at the data's resolution.

The embedded digits are 8x8; the `digits` preset trains on them upsampled
(bilinear) to 16x16. Samples are therefore compared where the data lives:

- area-downsample the samples back to 8x8 (2x2 means at 16x16), and send the
  real digits through the same path (8x8 -> bilinear 16x16 -> 8x8), so that
  both sides see the same resize blur;
- project onto a PCA (20 components) fitted on half A of the real digits
  (a fixed permutation, seed 0);
- Frechet distance of the samples to half B, divided by the *floor*: the
  distance of as many real digits from half A to half B. Equal sample sizes
  give both the same finite-sample bias, so real digits score about 1 (the
  floor is 0.10 at 500; another 500 of half A score 0.9); real digits with
  Gaussian noise of std 0.2 at 16x16 (clipped to [-1, 1]) score 1.4, of std
  0.4 score 3.6.
- "confident": a logistic regression (C=0.5) fitted on half A at the
  sample's resolution gives its top class a probability >= 0.8; 89% of the
  held-out real digits are confident. Its top class also gives the class
  coverage and the agreement with the label a sample was drawn for.

Measured on the default run (`python scripts/train.py`, seeds 0 and 1; 500
samples a kind, DDIM-50; docs/quality.md has the ablations): labels 0-9 at
guidance 1 score 1.4-1.5 (0.87-0.89 of real's confident fraction); at
guidance 2 about 5.5 (1.08: guidance trades diversity for fidelity);
`generate(n)` (random classes) 1.3 (0.91); the null class 4.6-6.2 (about
0.5).

Needs scikit-learn (`pip install ".[test]"`).

Example:

```python
import keras
from keras_diffusion import digits_quality

model = keras.saving.load_model("runs/digits/model.keras")
scores = digits_quality.judge_model(model, guidance_scale=2.0)
for kind, score in scores.items():
    print(digits_quality.summary(kind, score))
```
"""

import numpy as np

from keras_diffusion.data.digits import load_digits_arrays
from keras_diffusion.metrics.native import PCAFrechet, area_downsample
from keras_diffusion.utils.checks import check_choice, check_float, check_int

NATIVE_SIZE = 8
# The sample kinds of `judge_model`: labels 0-9 balanced at guidance 1, the
# same at the given guidance, `generate(n)` as a user calls it (labels=None:
# random classes), and the null class (labels="unconditional").
KINDS = ("conditional", "guided", "generate", "null_class")


class DigitsQuality:
    """Scores digit images against the embedded digits (see the module).

    Args:
        image_size: int, the samples' side: a multiple of 8. Defaults to `16`.
        num_samples: int, the sample size the floor is measured at; score
            exactly this many images. At most 898 (half the digits).
            Defaults to `500`.
        num_components: int, PCA components. Defaults to `20`.
        confidence: float, the probability that counts as confident.
            Defaults to `0.8`.
        seed: int, the permutation that splits the real digits in halves.
            Defaults to `0`.

    Attributes:
        floor: float, Frechet distance of `num_samples` real digits of half
            A to half B.
        real_confident: float, the confident fraction of half B.
    """

    def __init__(
        self, image_size=16, num_samples=500, num_components=20, confidence=0.8, seed=0
    ):
        from sklearn.linear_model import LogisticRegression

        self.image_size = check_int("image_size", image_size, NATIVE_SIZE)
        if image_size % NATIVE_SIZE:
            raise ValueError(
                "Argument `image_size` must be a multiple of 8. "
                f"Received: image_size={image_size!r}"
            )
        self.num_samples = check_int("num_samples", num_samples, 2)
        self.num_components = check_int("num_components", num_components, 1)
        self.confidence = check_float("confidence", confidence, 0.0, 1.0)
        self.seed = check_int("seed", seed, 0)
        images, labels = load_digits_arrays(image_size)
        order = np.random.default_rng(seed).permutation(len(images))
        half_a, half_b = order[: len(order) // 2], order[len(order) // 2 :]
        if num_samples > len(half_a):
            raise ValueError(
                f"Argument `num_samples` must be at most {len(half_a)}. "
                f"Received: num_samples={num_samples!r}"
            )
        native = self.downsample(images)
        self._frechet = PCAFrechet(
            native[half_a], native[half_b], num_samples, num_components
        )
        self.floor = self._frechet.floor
        self._classifier = LogisticRegression(C=0.5, max_iter=3000)
        self._classifier.fit(images[half_a].reshape(len(half_a), -1), labels[half_a])
        self.real_confident = float(np.mean(self._top(images[half_b])[1]))

    def downsample(self, images):
        """Area-downsamples `(n, size, size, 1)` images to flat 8x8 rows."""
        images = np.asarray(images, np.float64)
        if images.shape[1:] != (self.image_size, self.image_size, 1):
            raise ValueError(
                f"Images must have shape (n, {self.image_size}, {self.image_size}, "
                f"1). Received: {images.shape}"
            )
        return area_downsample(images, NATIVE_SIZE).reshape(len(images), -1)

    def classify(self, images):
        """`(predicted, confident)` of images in [-1, 1]: the top class of the
        logistic regression, and whether its probability >= `confidence`."""
        return self._top(np.asarray(images, np.float32))

    def held_out(self):
        """`(images, labels)` of half B, which the classifier never saw."""
        images, labels = load_digits_arrays(self.image_size)
        order = np.random.default_rng(self.seed).permutation(len(images))
        half_b = order[len(order) // 2 :]
        return images[half_b], labels[half_b]

    def _top(self, images):
        probs = self._classifier.predict_proba(images.reshape(len(images), -1))
        return probs.argmax(1), probs.max(1) >= self.confidence

    def score(self, images, labels=None):
        """Scores `num_samples` images in [-1, 1] of shape `(n, size, size, 1)`.

        Args:
            images: the samples.
            labels: optional, the classes they were drawn for.

        Returns:
            dict: `fd` (Frechet distance to half B), `fd_ratio` (over the
            floor), `confident` (fraction), `confident_ratio` (over the real
            digits'), `classes` (distinct predicted classes) and, with
            `labels`, `agreement` (fraction predicted as their label).
        """
        fd = self._frechet.distance(self.downsample(images))
        predicted, confident = self._top(np.asarray(images, np.float32))
        result = {
            "fd": fd,
            "fd_ratio": fd / self.floor,
            "confident": float(np.mean(confident)),
            "confident_ratio": float(np.mean(confident)) / self.real_confident,
            "classes": int(len(np.unique(predicted))),
        }
        if labels is not None:
            result["agreement"] = float(np.mean(predicted == np.asarray(labels)))
        return result


def sample_kind(model, kind, num_samples, guidance_scale=2.0, sampler=None, seed=0):
    """Samples `num_samples` images of one of `KINDS` from a conditional model.

    Returns:
        `(images, labels)`: labels are `None` for "generate" (the model draws
        them) and "null_class".
    """
    check_choice("kind", kind, KINDS)
    labels = None
    kwargs = {}
    if kind in ("conditional", "guided"):
        labels = np.arange(num_samples) % model.num_classes
        kwargs["labels"] = labels.tolist()
    if kind == "guided":
        kwargs["guidance_scale"] = guidance_scale
    if kind == "null_class":
        kwargs["labels"] = "unconditional"
    images = model.generate(
        num_samples, sampler=sampler, seed=seed, verbose=0, **kwargs
    )
    return images, labels


def judge_model(
    model, guidance_scale=2.0, sampler=None, kinds=KINDS, quality=None, seed=123
):
    """Scores a conditional digits model's samples of each kind.

    Args:
        model: a class-conditional `DiffusionModel` trained on the digits.
        guidance_scale: float, the guidance of the "guided" kind (the run's
            `guidance_scale`). Defaults to `2.0`.
        sampler: a sampler; `None` for `generate`'s default (the model's own).
        kinds: the kinds to sample, from `KINDS`. Defaults to all.
        quality: a `DigitsQuality`, or `None` for one at the model's image
            size with 500 samples. Defaults to `None`.
        seed: int, the sampling seed of every kind. Defaults to `123`.

    Returns:
        dict of kind -> `DigitsQuality.score` dict.
    """
    if quality is None:
        quality = DigitsQuality(image_size=model.image_shape[0])
    scores = {}
    for kind in kinds:
        images, labels = sample_kind(
            model, kind, quality.num_samples, guidance_scale, sampler, seed
        )
        scores[kind] = quality.score(images, labels)
    return scores


def summary(kind, score):
    """One line of a score's figures, e.g. for a test's or a report's output."""
    line = (
        f"{kind}: FD/floor {score['fd_ratio']:.2f}, confident "
        f"{score['confident']:.2f} ({score['confident_ratio']:.2f} of real), "
        f"{score['classes']} classes"
    )
    if "agreement" in score:
        line += f", agreement {score['agreement']:.2f}"
    return line
