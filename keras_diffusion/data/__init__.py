"""Input pipelines: images to float32 NHWC batches in [-1, 1] for `model.fit`.

Every loader returns a `tf.data.Dataset` (cache, seeded shuffle, batch,
optional random horizontal flip, `prefetch(AUTOTUNE)`) yielding images, or
`(images, labels)` with int32 labels, or `(images, captions)` with
`tf.string` captions, and carrying a `class_names` attribute.

- `from_arrays`: NumPy arrays (uint8, or floats in [0, 1] / [-1, 1]), with
  class ids or captions.
- `from_directory`: a folder of images, optionally with class subfolders, or
  captioned by a `metadata.jsonl` / `metadata.csv` (Hugging Face's
  imagefolder layout, `keras_diffusion.data.captions`).
- `from_keras_dataset`: `keras.datasets` mnist, fashion_mnist, cifar10.
- `load_digits`: the embedded 8x8 handwritten digits at 16x16, no network.
- `ArrayPyDataset`: the same as a `keras.utils.PyDataset`.
- `PRESETS`, `get_preset`, `make_dataset`: named setups for the scripts,
  each with its recipes (`Recipe`: measured settings, one for a CPU).
"""

from keras_diffusion.data.datasets import make_dataset
from keras_diffusion.data.digits import load_digits, load_digits_arrays
from keras_diffusion.data.directory import IMAGE_EXTENSIONS, from_directory
from keras_diffusion.data.keras_datasets import (
    DatasetDownloadError,
    from_keras_dataset,
    load_keras_arrays,
)
from keras_diffusion.data.pipeline import from_arrays
from keras_diffusion.data.presets import (
    DATASET_NAMES,
    DEFAULT_DATASET,
    IMAGE_GPU_TRAINING,
    PRESETS,
    RECIPE_NAMES,
    TRAINING_SETTINGS,
    Preset,
    Recipe,
    get_preset,
)
from keras_diffusion.data.py_dataset import ArrayPyDataset

__all__ = [
    "DATASET_NAMES",
    "DEFAULT_DATASET",
    "IMAGE_EXTENSIONS",
    "IMAGE_GPU_TRAINING",
    "PRESETS",
    "RECIPE_NAMES",
    "TRAINING_SETTINGS",
    "ArrayPyDataset",
    "DatasetDownloadError",
    "Preset",
    "Recipe",
    "from_arrays",
    "from_directory",
    "from_keras_dataset",
    "get_preset",
    "load_digits",
    "load_digits_arrays",
    "load_keras_arrays",
    "make_dataset",
]
