"""Helpers of the few-call processes' tests (the few-step process and the
mean flow): a tiny fitted model, and its round trip through a file with
every sampling path."""

import keras
import numpy as np

import keras_diffusion as kd
from tests.denoisers import tiny_unet


def fit_tiny(schedule, jit, epochs, **unet):
    """A one-level U-Net of 3 classes (and the null class) fitted on 8
    random 8x8 images: `(model, images)`. The loop, the file and the edits
    do not depend on the depth, and its traces are shorter."""
    unet = {"widths": (4,), "attention_levels": (False,), **unet}
    net = tiny_unet(num_classes=3, **unet)
    model = kd.DiffusionModel(net, schedule, num_classes=3, seed=0)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), jit_compile=jit)
    images = np.random.default_rng(0).uniform(-1, 1, (8, 8, 8, 1)).astype("float32")
    history = model.fit(
        (images, np.arange(8) % 3), batch_size=4, epochs=epochs, verbose=0
    )
    assert np.isfinite(history.history["loss"]).all()
    return model, images


def check_round_trip_and_edits(model, images, guided, edit, tmp_path):
    """The model's `.keras` file generates its images (guided, with the
    sampler `guided`, too); inpainting keeps the kept half; img2img at
    strength 0.5 with the sampler `edit` redraws the images. Returns the
    loaded model."""
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    for kwargs in ({}, {"sampler": guided, "labels": [0, 1], "guidance_scale": 2.0}):
        want = model.generate(2, seed=5, verbose=0, **kwargs)
        got = loaded.generate(2, seed=5, verbose=0, **kwargs)
        np.testing.assert_allclose(got, want, atol=1e-6)
    assert loaded.schedule.get_config() == model.schedule.get_config()
    mask = np.zeros((2, 8, 8, 1), "float32")
    mask[:, 4:] = 1.0
    filled = loaded.inpaint(images[:2], mask, labels=[0, 1], seed=1, verbose=0)
    np.testing.assert_array_equal(filled[:, :4], images[:2, :4])
    edited = loaded.img2img(
        images[:2], 0.5, labels=[0, 1], sampler=edit, seed=1, verbose=0
    )
    assert edited.shape == (2, 8, 8, 1) and np.isfinite(edited).all()
    assert not np.allclose(edited, images[:2], atol=1e-3)
    return loaded
