"""Judge a model's samples against a held-out image folder, at low resolution.

`digits_quality` for any image folder. The folder holds images the model did
not train on (split them off before training). They are decoded exactly as
the training pipeline decodes a folder (`load_directory_arrays`: the same
compositing over `background`, the same `resize`, then scaled to [-1, 1] as
`from_directory` scales), so real and generated images meet in one space
(judge a model with the `background` and `resize` it was trained with;
`folder_judge.judge_saved_model` reads them from the run's config.json):

- both are area-downsampled to `native_size` x `native_size` (8x8 block
  means: colour layout and coarse shape, not texture);
- projected onto a PCA (20 components, at most half the folder less one)
  fitted on half A of the folder (a fixed permutation, `seed`);
- the Frechet distance of the samples to half B is divided by the *floor*:
  the distance of as many real images of half A to half B. Equal sample
  sizes give both the same finite-sample bias, so real images score about 1.

Measured on the test fixtures (tests/shape_folders.py: random coloured
ellipses and rectangles on white, a quarter of them RGBA on a transparent
canvas, judged at 16x16; a held-out folder of 300, halves of 150, floor 1.63):
150 fresh images of the same kind score 0.89-1.06 (five seeds); uniform noise
in [-1, 1] 63; the mean image repeated (a blurred mean) 13.7; one real image
repeated 27; an untrained U-Net's samples 61. Real images with Gaussian noise
of std 0.1 score 1.0, of std 0.3 1.8: 8x8 block means average pixel noise
away, so `roughness` flags it instead (0.13 and 0.24 against real's 0.07).

Besides `fd_ratio`, `score` gives two cheap figures at full resolution, each
beside real's: `mean_std`, the per-pixel standard deviation across the
samples (near 0 for a collapsed model), and `roughness`, the mean absolute
difference of neighbouring pixels (0.67 for uniform noise).

Example:

```python
import keras
from keras_diffusion import folder_quality

model = keras.saving.load_model("runs/emoji/model.keras")
score = folder_quality.judge_model(model, "emoji_heldout/")
print(folder_quality.summary(score))  # FD/floor ... (fd ..., floor ...); ...
```
"""

import numpy as np

from keras_diffusion.conditioning import conditioned_on_text
from keras_diffusion.data import decode
from keras_diffusion.data.directory import load_directory_arrays
from keras_diffusion.data.pipeline import check_image_size
from keras_diffusion.metrics.native import PCAFrechet, area_downsample
from keras_diffusion.models.sampling import output_shape
from keras_diffusion.utils.checks import check_int

# What `judge_saved_model` prints, in order.
REPORTED = ("fd", "floor", "fd_ratio")


def to_unit_range(images):
    """uint8 images to float32 in [-1, 1], as the training pipeline scales."""
    scale = np.float32(2.0 / 255.0)
    scaled = np.asarray(images, np.float32) * scale + np.float32(-1.0)
    return np.clip(scaled, -1.0, 1.0)


def _pixel_statistics(images):
    """`(mean_std, roughness)` of `(n, h, w, c)` images in [-1, 1]."""
    mean_std = float(np.mean(np.std(images, axis=0)))
    dx = np.abs(np.diff(images, axis=2)).mean()
    dy = np.abs(np.diff(images, axis=1)).mean()
    return mean_std, float((dx + dy) / 2.0)


class FolderQuality:
    """Scores images against a held-out image folder (see the module).

    Args:
        directory: str or path-like, the held-out folder (searched
            recursively, as `from_directory` does).
        image_size: int or `(height, width)`, the samples' size: a multiple
            of `native_size`.
        channels: `1` or `3`, as the model was trained. Defaults to `3`.
        background: the colour under transparency, as the model was trained
            (see `from_directory`). Defaults to `"white"`.
        resize: `"crop"`, `"pad"` or `"stretch"`, as the model was trained.
            Defaults to `"crop"`.
        native_size: int, the side images are compared at. Defaults to `8`.
        num_components: int, PCA components (capped at `num_samples - 1`).
            Defaults to `20`.
        num_samples: int, the sample size the floor is measured at, at most
            half the folder; or `None` for half the folder (rounded down).
            Defaults to `None`.
        seed: int, the permutation that splits the folder in halves.
            Defaults to `0`.
        caption_column: str, a captioned folder's caption column, for a
            text model: it is judged on samples of half A's captions
            (`prompts`), as the floor on half A's images. Defaults to
            `None`: the images alone (their metadata is not read).

    Attributes:
        directory: the held-out folder, as given.
        background, resize: the preprocessing of its images (`background`
            by its name, as `decode.background_name` gives it).
        floor: float, the Frechet distance of `num_samples` images of half A
            to half B.
        num_samples: int, how many images `score` takes.
        num_images: int, the images decoded from the folder.
        prompts: `num_samples` captions of half A, or `None` (none).
    """

    def __init__(
        self,
        directory,
        image_size,
        channels=3,
        background=decode.DEFAULT_BACKGROUND,
        resize=decode.DEFAULT_RESIZE,
        native_size=8,
        num_components=20,
        num_samples=None,
        seed=0,
        caption_column=None,
    ):
        size = check_image_size(image_size, allow_none=False)
        self.native_size = check_int("native_size", native_size, 1)
        if size[0] % native_size or size[1] % native_size:
            raise ValueError(
                f"Argument `image_size` must be a multiple of native_size="
                f"{native_size}. Received: image_size={image_size!r}"
            )
        check_int("num_components", num_components, 1)
        if num_samples is not None:
            check_int("num_samples", num_samples, 2)
        self.seed = check_int("seed", seed, 0)
        images, captions, _, _ = load_directory_arrays(
            directory,
            size,
            channels=channels,
            background=background,
            resize=resize,
            caption_column=caption_column,
        )
        if len(images) < 4:
            raise ValueError(
                "Argument `directory` must hold at least 4 images (two halves "
                f"of 2). Received: directory={directory!r} with {len(images)}"
            )
        self.directory = directory
        self.background = decode.background_name(background)
        self.resize = resize
        self.image_shape = (*size, channels)
        self.num_images = len(images)
        images = to_unit_range(images)
        order = np.random.default_rng(seed).permutation(len(images))
        half_a, half_b = order[: len(order) // 2], order[len(order) // 2 :]
        native = self.features(images)
        self._frechet = PCAFrechet(
            native[half_a], native[half_b], num_samples, num_components
        )
        self.num_samples = self._frechet.num_samples
        self.num_components = self._frechet.num_components
        self.floor = self._frechet.floor
        self._real = _pixel_statistics(images[half_b])
        self.prompts = None
        if captions is not None and captions.dtype.kind in "OSU":
            self.prompts = [str(c) for c in captions[half_a][: self.num_samples]]

    def features(self, images):
        """Area-downsamples images to flat `native_size` x `native_size` rows."""
        native = area_downsample(images, self.native_size)
        return native.reshape(len(native), -1)

    def check_images(self, images):
        """`images` as a float array, or a `ValueError` naming what is wrong."""
        images = np.asarray(images, np.float64)
        if images.shape[1:] != self.image_shape or images.ndim != 4:
            raise ValueError(
                f"Argument `images` must have shape (num_samples, "
                f"{', '.join(str(d) for d in self.image_shape)}). "
                f"Received: images.shape={images.shape}"
            )
        if len(images) != self.num_samples:
            raise ValueError(
                f"Argument `images` must hold exactly num_samples="
                f"{self.num_samples} images, the size the floor is measured at. "
                f"Received: {len(images)} images"
            )
        if not np.all(np.isfinite(images)):
            raise ValueError("Argument `images` must be finite. Received NaN or inf.")
        low, high = images.min(), images.max()
        if low < -1.0 - 1e-5 or high > 1.0 + 1e-5:
            raise ValueError(
                "Argument `images` must be in [-1, 1]. "
                f"Received: values in [{low:g}, {high:g}]"
            )
        return images

    def score(self, images):
        """Scores `num_samples` images in [-1, 1] of shape `image_shape`.

        Returns:
            dict: `fd` (Frechet distance to half B), `floor`, `fd_ratio`
            (`fd / floor`: about 1 for real images), `mean_std` and
            `roughness` (see the module) with `real_mean_std` and
            `real_roughness`, those of half B.
        """
        images = self.check_images(images)
        fd = self._frechet.distance(self.features(images))
        mean_std, roughness = _pixel_statistics(images)
        return {
            "fd": fd,
            "floor": self.floor,
            "fd_ratio": fd / self.floor,
            "mean_std": mean_std,
            "real_mean_std": self._real[0],
            "roughness": roughness,
            "real_roughness": self._real[1],
        }


def judge_model(
    model,
    directory=None,
    quality=None,
    sampler=None,
    seed=0,
    guidance_scale=1.0,
    batch_size=None,
    *,
    verbose=0,
    **folder_options,
):
    """Generates `num_samples` images with the EMA weights and scores them.

    Args:
        model: a `DiffusionModel` (a conditional one samples random classes).
        directory: the held-out folder, or `None` with `quality`.
        quality: a `FolderQuality` to reuse (the floor is measured once per
            folder), or `None` for one of `directory` (`quality_for`).
        sampler: a sampler or its name; `None` for the model's default
            (DDIM, 50 steps, unless the model has its own).
        seed: int, the sampling seed. Defaults to `0`.
        guidance_scale: float, for a conditional model. Defaults to `1.0`.
        batch_size: images per compiled call, or `None` (`generate`'s).
        verbose: 0, or 1 for a line on what is generated and a progress bar.
        **folder_options: with `directory`, `FolderQuality`'s options
            (`background` and `resize` as the model was trained,
            `native_size`, `num_components`, `num_samples`, and a text
            model's `caption_column`, its run's; `None` for `"text"`).

    Returns:
        `FolderQuality.score`'s dict, with `num_samples`.
    """
    if not (hasattr(model, "generate") and hasattr(model, "image_shape")):
        raise TypeError(
            "Argument `model` must be a keras_diffusion.DiffusionModel. "
            f"Received: model={model!r}"
        )
    shape = output_shape(model)
    if (quality is None) == (directory is None):
        raise ValueError(
            "Pass exactly one of `directory` and `quality`. "
            f"Received: directory={directory!r}, quality={quality!r}"
        )
    if quality is None:
        quality = quality_for(model, directory, **folder_options)
    elif folder_options:
        raise ValueError(
            "The options of a folder's judge go with `directory`; `quality` "
            "holds its own. Received: "
            + ", ".join(f"{k}={v!r}" for k, v in sorted(folder_options.items()))
        )
    if quality.image_shape != shape:
        raise ValueError(
            f"Argument `quality` scores images of shape {quality.image_shape}, "
            f"but the model generates {shape}. Received: quality={quality!r}"
        )
    condition = {}
    if conditioned_on_text(model):
        if quality.prompts is None:
            raise ValueError(
                "A text model is judged on a captioned folder (its "
                "metadata.jsonl or metadata.csv): this one has no captions. "
                f"Received: directory={quality.directory!r}"
            )
        condition = {"prompts": quality.prompts}
    if verbose:
        prompts = " for half A's captions" if condition else ""
        print(f"Generating {quality.num_samples} images to judge{prompts}")
    images = model.generate(
        quality.num_samples,
        sampler=sampler,
        guidance_scale=guidance_scale,
        seed=seed,
        batch_size=batch_size,
        verbose=verbose,
        **condition,
    )
    return {**quality.score(images), "num_samples": quality.num_samples}


def quality_for(model, directory, caption_column=None, **options):
    """The `FolderQuality` of `directory` at `model`'s image shape, with
    `options` (`FolderQuality`'s) and, for a text model, its captions in
    `caption_column` (`caption_column_of`)."""
    height, width, channels = output_shape(model)
    return FolderQuality(
        directory,
        (height, width),
        channels=channels,
        caption_column=caption_column_of(model, caption_column),
        **options,
    )


def caption_column_of(model, column=None):
    """The caption column `model` is judged with: for a text model `column`
    (its run's `caption_column`), or `"text"` where that is `None`; `None`
    for any other model (the folder's images alone)."""
    if not conditioned_on_text(model):
        return None
    return column or "text"


def summary(score):
    """One line of a score's figures, e.g. for a report."""
    return (
        f"FD/floor {score['fd_ratio']:.2f} (fd {score['fd']:.4g}, floor "
        f"{score['floor']:.4g}); pixel std {score['mean_std']:.2f} (real "
        f"{score['real_mean_std']:.2f}), roughness {score['roughness']:.2f} "
        f"(real {score['real_roughness']:.2f})"
    )
