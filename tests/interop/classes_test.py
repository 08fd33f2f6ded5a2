"""Class labels as diffusers counts them, both ways, and the docs' loop.

A diffusers `UNet2DModel` with `num_class_embeds=N` has N classes and no
null class: it samples each class conditionally, and guidance is refused
with the reason. A model built here keeps its null class, index
`num_classes`, and exports it as the last of `num_classes + 1` embeddings.
"""

import json
import os
import re

import keras
import numpy as np
import pytest

import keras_diffusion

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
# num_class_embeds=3, saved by diffusers.
CLASSES_3 = os.path.join(FIXTURES, "pipeline_unet_layout")
DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "interop.md")


def _random_weights(model, seed=0):
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        variable.assign(rng.normal(0.0, 0.3, variable.shape).astype("float32"))


def _conditional_model(null_class=True, image_shape=(8, 8, 1)):
    unet = keras_diffusion.UNet(
        image_shape,
        widths=(4, 8),
        num_res_blocks=1,
        attention_levels=(False, True),
        num_classes=3,
        groups=2,
        null_class=null_class,
    )
    _random_weights(unet)
    return keras_diffusion.DiffusionModel(unet, keras_diffusion.NoiseSchedule(100))


@pytest.fixture(scope="module")
def classes_3():
    """The diffusers fixture of 3 classes, loaded once for the tests that
    only read it (sample, export, save)."""
    return keras_diffusion.from_diffusers(CLASSES_3)


def _export(model, folder):
    with pytest.warns(UserWarning, match="DDPMPipeline cannot pass class labels"):
        return keras_diffusion.to_diffusers(model, folder)


def test_num_class_embeds_are_all_classes(classes_3):
    model = classes_3
    assert model.num_classes == 3 and model.denoiser.null_class is False
    embeddings = model.denoiser.get_layer("label_embedding").embeddings
    assert tuple(embeddings.shape)[0] == 3
    # Every class samples, the last one included.
    sampler = keras_diffusion.DDIMSampler(num_steps=2)
    images = model.generate(3, sampler=sampler, labels=[0, 1, 2], seed=0, verbose=0)
    assert images.shape == (3, 8, 8, 1) and np.isfinite(images).all()
    drawn = model.generate(4, sampler=sampler, seed=0, verbose=0)
    assert drawn.shape == (4, 8, 8, 1)


@pytest.mark.parametrize(
    "kwargs, named",
    [
        ({"labels": [0, 1], "guidance_scale": 2.0}, "guidance_scale=2.0"),
        ({"guidance_scale": 3.0}, "guidance_scale=3.0"),
        ({"labels": "unconditional"}, "labels='unconditional'"),
    ],
)
def test_guidance_without_a_null_class_is_refused_with_the_reason(
    classes_3, kwargs, named
):
    model = classes_3
    with pytest.raises(ValueError, match="need a null class") as info:
        model.generate(2, sampler=keras_diffusion.DDIMSampler(2), **kwargs)
    message = str(info.value)
    assert named in message and "num_class_embeds are all classes" in message


def test_label_dropout_without_a_null_class_is_refused():
    unet = keras_diffusion.from_diffusers(CLASSES_3).denoiser
    with pytest.raises(ValueError, match="`class_dropout` needs a null class"):
        keras_diffusion.DiffusionModel(unet, class_dropout=0.1)


def test_a_null_class_can_be_asked_for():
    model = keras_diffusion.from_diffusers(CLASSES_3, null_class=True)
    assert model.num_classes == 2 and model.denoiser.null_class is True
    sampler = keras_diffusion.DDIMSampler(num_steps=2)
    guided = model.generate(2, sampler=sampler, labels=[0, 1], guidance_scale=2.0)
    assert np.isfinite(guided).all()
    with pytest.raises(TypeError, match="`null_class`"):
        keras_diffusion.from_diffusers(CLASSES_3, null_class="yes")


def test_a_model_built_here_exports_its_null_class_and_gets_it_back(tmp_path):
    model = _conditional_model()
    folder = _export(model, str(tmp_path / "export"))
    with open(os.path.join(folder, "unet", "config.json")) as file:
        config = json.load(file)
    assert config["num_class_embeds"] == 4
    assert config["_keras_diffusion"] == {"null_class": True}
    reloaded = keras_diffusion.from_diffusers(folder)
    assert reloaded.num_classes == 3 and reloaded.denoiser.null_class is True
    rng = np.random.default_rng(1)
    x = rng.normal(size=(4, 8, 8, 1)).astype("float32")
    t = np.array([0.0, 10.0, 50.5, 99.0], "float32")
    labels = np.array([0, 1, 2, 3], "int32")  # 3: the null class
    np.testing.assert_allclose(
        reloaded.denoiser([x, t, labels]), model.denoiser([x, t, labels]), atol=1e-6
    )


def test_a_model_without_a_null_class_exports_as_many_embeddings(classes_3, tmp_path):
    model = classes_3
    folder = _export(model, str(tmp_path / "export"))
    with open(os.path.join(folder, "unet", "config.json")) as file:
        config = json.load(file)
    assert config["num_class_embeds"] == 3 and "_keras_diffusion" not in config
    assert keras_diffusion.from_diffusers(folder).num_classes == 3


def test_null_class_survives_a_keras_file(classes_3, tmp_path):
    model = classes_3
    path = str(tmp_path / "model.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    assert restored.denoiser.null_class is False and restored.num_classes == 3


def _docs_snippet():
    """The loop of docs/interop.md that samples a class-conditional export."""
    with open(DOCS, encoding="utf-8") as file:
        blocks = re.findall(r"```python\n(.*?)```", file.read(), re.S)
    (snippet,) = [b for b in blocks if "class_labels=" in b and "scheduler.step" in b]
    return snippet


def test_the_docs_loop_samples_an_export_as_ddim_sampler_does(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("diffusers")
    model = _conditional_model(image_shape=(8, 8, 3))
    # The sampler a digits run of scripts/train.py saves, and so exports.
    model.sampler = keras_diffusion.DDIMSampler(num_steps=50)
    folder = _export(model, str(tmp_path / "export"))
    namespace = {"folder": folder}
    exec(compile(_docs_snippet(), DOCS, "exec"), namespace)
    images = namespace["images"]
    labels = namespace["labels"].numpy().astype("int32")
    guidance_scale = namespace["guidance_scale"]
    # The same start, through generate's sampler (DDIM-50) with guidance.
    generator = torch.Generator().manual_seed(0)
    x_T = torch.randn(len(labels), 3, 8, 8, generator=generator).numpy()
    null = np.full_like(labels, model.num_classes)

    def denoise(x, t):
        out = model.denoise(
            keras.ops.concatenate([x, x]),
            keras.ops.concatenate([t, t]),
            np.concatenate([labels, null]),
        )
        cond, uncond = keras.ops.split(out, 2)
        return uncond + guidance_scale * (cond - uncond)

    x0 = keras_diffusion.DDIMSampler(num_steps=50).sample(
        denoise, x_T.transpose(0, 2, 3, 1), model.schedule
    )
    ours = np.clip(np.asarray(x0) / 2 + 0.5, 0.0, 1.0)
    error = float(np.abs(ours - images).max())
    print(f"\ndocs loop vs DDIMSampler: max abs difference {error:.2e}")
    assert images.shape == (len(labels), 8, 8, 3) and error < 1e-3
