"""SampleGrid: a grid of EMA samples from a fixed seed, every few epochs."""

import os

import numpy as np

from keras_diffusion.callbacks.periodic_sampling import PeriodicSampling
from keras_diffusion.utils import images as images_lib
from keras_diffusion.utils.images import grid_prompts


class SampleGrid(PeriodicSampling):
    """Writes a PNG grid of EMA samples from a fixed seed every `every` epochs.

    The same seed (and labels) every time, so successive grids show the same
    noise turning into digits, not new draws. The PNG is written to a
    temporary file and renamed, so a crash never leaves a truncated image.
    For a class-conditional model the default labels give one row per class.

    Args:
        filepath: str, where to write; may contain `{epoch}` (1-based), e.g.
            `"samples/epoch_{epoch:04d}.png"`.
        num_images: int, images in the grid. Defaults to `64`.
        every: int, write after every `every`-th epoch. Defaults to `1`.
        seed: int, the sampling seed. Defaults to `0`.
        sampler: a `keras_diffusion.samplers` sampler, or `None` for the
            model's default (`DiffusionModel.generate`'s). Defaults to `None`.
        labels: optional labels for a conditional model; `None` gives rows of
            classes `0, 1, ...` (see `keras_diffusion.utils.images.class_rows`).
            Defaults to `None`.
        guidance_scale: float, classifier-free guidance weight. Defaults to
            `1.0`.
        rows: int or `None`; `None` uses one row per class for a conditional
            model and a square grid otherwise. Defaults to `None`.
        log_dir: optional str; when given, the grid is also written to
            TensorBoard there (`tf.summary.image`, tag `samples`).
            Defaults to `None`.
        prompts: optional list of str, for a text model: a row of the grid
            each (`labels` is then for class labels only). Defaults to
            `None`.
        captioned_filepath: optional str, with `prompts`: also write the
            grid with each prompt under its image there (may contain
            `{epoch}`). Defaults to `None`.
        control: optional control images for a model with a ControlNet
            (float `(k, H, W, C)` in [0, 1]), repeated over the grid's
            images in turn; the grid shows each sample after its control.
            Defaults to `None`.

    Example:

    ```python
    model.fit(ds, epochs=20, callbacks=[SampleGrid("run/grid_{epoch}.png", every=5)])
    ```
    """

    def __init__(
        self,
        filepath,
        num_images=64,
        every=1,
        seed=0,
        sampler=None,
        labels=None,
        guidance_scale=1.0,
        rows=None,
        log_dir=None,
        prompts=None,
        captioned_filepath=None,
        control=None,
    ):
        if not isinstance(filepath, (str, os.PathLike)):
            raise TypeError(
                f"Argument `filepath` must be a path. Received: filepath={filepath!r}"
            )
        super().__init__(num_images, every, seed, sampler, guidance_scale)
        self.filepath = os.fspath(filepath)
        self.labels = labels
        self.rows = rows
        self.log_dir = log_dir
        self.prompts = None if prompts is None else [str(p) for p in prompts]
        if self.prompts is not None and not self.prompts:
            raise ValueError("Argument `prompts` must hold a prompt. Received: []")
        self.captioned_filepath = captioned_filepath
        self.control = None if control is None else np.asarray(control, np.float32)
        self._writer = None

    def on_train_begin(self, logs=None):
        if getattr(self.model, "controlnet", None) is not None and self.control is None:
            raise ValueError(
                "The model has a ControlNet: SampleGrid needs `control`, the "
                "control images its grid is drawn under. Received: control=None"
            )

    def _labels_and_rows(self):
        if self.prompts is not None:
            prompts, rows = grid_prompts(self.prompts, self.num_images)
            return prompts, (rows if self.rows is None else self.rows)
        if self.labels is not None:
            return self.labels, self.rows
        num_classes = getattr(self.model, "num_classes", None)
        labels, rows = images_lib.class_rows(num_classes, self.num_images)
        return labels, (rows if self.rows is None else self.rows)

    def generate(self):
        """The grid's images, `(num_images, H, W, C)` in [-1, 1]."""
        labels, _ = self._labels_and_rows()
        kwargs = {}
        if labels is not None:
            argument = "labels" if self.prompts is None else "prompts"
            kwargs = {argument: labels, "guidance_scale": self.guidance_scale}
        count = self.num_images if labels is None else len(labels)
        if self.control is not None:
            kwargs["control"] = self._controls(count)
        return self.model.generate(
            count,
            sampler=self.sampler,
            seed=self.seed,
            verbose=0,
            **kwargs,
        )

    def _controls(self, count):
        """The grid's `count` controls: `control`'s images in turn."""
        return np.resize(self.control, (count,) + self.control.shape[1:])

    def write(self, epoch=None, filepath=None):
        """Samples and writes the grid now; returns the path written.

        Args:
            epoch: int, the 1-based epoch for `{epoch}` and TensorBoard's step.
            filepath: optional path overriding `self.filepath`.
        """
        _, rows = self._labels_and_rows()
        samples = self.generate()
        path = (filepath or self.filepath).format(epoch=epoch or 0)
        folder = os.path.dirname(os.path.abspath(path))
        os.makedirs(folder, exist_ok=True)
        if self.control is None:
            grid = images_lib.save_grid(samples, path, rows=rows)
        else:  # each sample after its control, the rows of the samples' grid
            rows = rows or images_lib.square_rows(len(samples))
            tiles = images_lib.beside_controls(self._controls(len(samples)), samples)
            grid = images_lib.save_grid(tiles, path, rows=rows)
        if self.prompts is not None and self.captioned_filepath is not None:
            prompts, _ = self._labels_and_rows()
            images_lib.save_caption_grid(
                samples,
                prompts,
                self.captioned_filepath.format(epoch=epoch or 0),
                rows=rows,
            )
        if self.log_dir is not None:
            self._log_image(grid, epoch or 0)
        return path

    def _log_image(self, grid, step):
        import tensorflow as tf

        if self._writer is None:
            self._writer = tf.summary.create_file_writer(self.log_dir)
        with self._writer.as_default():
            tf.summary.image("samples", grid[None], step=step)
        self._writer.flush()

    def on_epoch_end(self, epoch, logs=None):
        if self.due(epoch):
            self.write(epoch + 1)
