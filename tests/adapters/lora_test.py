"""LoRA on a DiffusionModel: only the factors train, the base weights stay
bit for bit, files and merges keep what the model samples."""

import re

import keras
import numpy as np
import pytest

import keras_diffusion as kd
from keras_diffusion.adapters import lora
from tests.denoisers import conv_denoiser


def _unet_model(**kwargs):
    keras.utils.set_random_seed(0)
    # One level, attention in its middle block alone: every kind of adapted
    # layer (convolutions, dense layers, attention projections) in one
    # attention block's trace, not four (the level's down and two up).
    unet = kd.UNet(
        (8, 8, 1),
        widths=(8,),
        num_res_blocks=1,
        attention_levels=(False,),
        mid_attention=True,
        groups=2,
    )
    sampler = kd.DDIMSampler(num_steps=2)  # a short trace: what it samples is compared
    return kd.DiffusionModel(unet, ema_decay=0.9, seed=1, sampler=sampler, **kwargs)


def _images():
    return np.random.default_rng(0).uniform(-1, 1, (16, 8, 8, 1)).astype("float32")


def _fit(model, epochs=1):
    model.compile(optimizer=keras.optimizers.Adam(1e-2), steps_per_execution=1)
    model.fit(_images(), epochs=epochs, batch_size=8, verbose=0)
    return model


def _base(model):
    return [
        np.array(v.numpy()) for v in model.denoiser.weights if not lora.is_factor(v)
    ]


@pytest.fixture(scope="module")
def trained():
    """`(original, lora_model, base_before)`: rank-2 LoRA on a tiny U-Net
    with post-hoc profiles, trained 2 epochs."""
    original = _unet_model(posthoc_ema=[0.05, 0.1])
    model = kd.enable_lora(original, 2)
    before = _base(model)
    return original, _fit(model, epochs=2), before


def test_only_the_factors_train_and_the_base_stays_bit_for_bit(trained):
    original, model, before = trained
    unet = model.denoiser
    adapted = lora.adaptable_layers(unet)
    # Every convolution, dense layer and attention projection: 2 factors each.
    assert len(unet.trainable_weights) == 2 * len(adapted)
    assert all(lora.is_factor(v) for v in unet.trainable_weights)
    assert any("attn" in path and path.endswith("query") for path in adapted)
    expected = sum(
        int(np.prod(getattr(layer, name).shape))
        for layer in adapted.values()
        for name in lora.FACTORS
    )
    assert sum(int(np.prod(v.shape)) for v in unet.trainable_weights) == expected
    # The copy starts from the original's weights; training left them alone.
    for a, b in zip(before, _base(original), strict=True):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(_base(model), before, strict=True):
        np.testing.assert_array_equal(a, b)
    assert max(np.abs(v.numpy()).max() for v in unet.trainable_weights[1::2]) > 0
    # The averages follow the factors, not the frozen weights.
    assert len(model.ema.shadows) == len(unet.trainable_weights)
    assert model.power_ema.updates() == int(model.optimizer.iterations.numpy())


def test_a_fresh_adapter_samples_as_the_model_it_adapts():
    original = _unet_model()
    adapted = kd.enable_lora(original, 4, layers=["*attn*"])
    paths = [p for p, layer in lora.adaptable_layers(adapted.denoiser).items()
             if layer.lora_enabled]  # fmt: skip
    assert paths and all("attn" in p for p in paths)
    np.testing.assert_array_equal(
        adapted.generate(2, seed=0, verbose=0), original.generate(2, seed=0, verbose=0)
    )


def _hint(model):
    """The paths the refusal of a pattern that matches nothing suggests."""
    with pytest.raises(ValueError, match="paths look like") as info:
        kd.enable_lora(model, 1, layers=["*nothing*"])
    listed = re.search(r"look like: (.*?)\. Received", str(info.value))
    return listed.group(1).split(", ")


def test_listed_layer_paths_select_themselves_and_stay_from_load_to_load(tmp_path):
    model = _unet_model()
    paths = list(lora.adaptable_layers(model.denoiser))
    assert {"down_0_res_0/conv_1", "mid_attn/attention/query"} <= set(paths)
    model.save(tmp_path / "m.keras")
    first, second = (keras.saving.load_model(tmp_path / "m.keras") for _ in "12")
    assert list(lora.adaptable_layers(first.denoiser)) == paths
    assert list(lora.adaptable_layers(second.denoiser)) == paths
    hint = _hint(second)
    assert hint and set(hint) <= set(paths)
    for source, chosen in ((model, paths), (second, hint)):
        adapted = kd.enable_lora(source, 1, layers=chosen)
        found = lora.adaptable_layers(adapted.denoiser)
        assert [p for p, layer in found.items() if layer.lora_enabled] == chosen


def test_cross_attention_paths_are_named_and_stay_from_load_to_load(tmp_path):
    unet = kd.UNet(
        (8, 8, 1),
        widths=(8,),
        num_res_blocks=1,
        attention_levels=(True,),
        groups=2,
        cross_attention_dim=4,
    )
    paths = list(lora.adaptable_layers(unet))
    cross = [f"mid_attn/attn_2/{name}" for name in ("to_q", "to_k", "to_v", "to_out")]
    assert set(cross) | {"down_0_attn_0/proj_in", "context_mlp_1"} <= set(paths)
    unet.save(tmp_path / "unet.keras")
    loaded = keras.saving.load_model(tmp_path / "unet.keras")
    assert list(lora.adaptable_layers(loaded)) == paths
    chosen = lora.apply(loaded, 2, 2.0, layers=["*attn_2/to_*"])
    # Four transformer blocks (down, middle, two up), four projections each.
    assert len(chosen) == 4 * 4 and set(cross) <= set(chosen)
    assert all(w.name in lora.FACTORS for w in loaded.trainable_weights)


def test_a_saved_lora_model_samples_alike_and_trains_on(trained, tmp_path):
    _, model, before = trained
    path = tmp_path / "lora.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.lora == model.lora
    for a, b in zip(loaded.get_weights(), model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)  # base and factors apart, exactly
    np.testing.assert_array_equal(
        loaded.generate(2, seed=0, verbose=0), model.generate(2, seed=0, verbose=0)
    )
    # Keras' own files would hold the merged kernel and zero both factors,
    # an adapter whose gradients are all zero: this one trains on. (A few
    # factors may barely move in one step: an embedding projection adds a
    # constant per channel, which group normalisation partly removes.)
    factors = [v.numpy() for v in loaded.denoiser.trainable_weights]
    _fit(loaded)
    after = [v.numpy() for v in loaded.denoiser.trainable_weights]
    moved = [not np.array_equal(a, b) for a, b in zip(factors, after, strict=True)]
    assert sum(moved) >= 0.9 * len(moved)
    for a, b in zip(_base(loaded), before, strict=True):
        np.testing.assert_array_equal(a, b)


def test_backups_hold_the_factors_and_check_the_base_by_checksum(trained, tmp_path):
    original, model, _ = trained
    full, backup = tmp_path / "full.weights.h5", tmp_path / "backup.weights.h5"
    model.save_weights(full)
    with lora.base_kernels_by_checksum():
        model.save_weights(backup)
    kernels = sum(
        lora.keras_internals.lora_base_kernel(layer).numpy().nbytes
        for layer in lora.adaptable_layers(model.denoiser).values()
    )
    assert backup.stat().st_size <= full.stat().st_size - kernels

    def rebuilt():  # what a resumed run builds: the same base, fresh factors
        copy = kd.enable_lora(original, 2)
        copy.compile(optimizer=keras.optimizers.Adam(1e-2))
        copy.optimizer.build(copy.trainable_variables)
        return copy

    copy = rebuilt()
    copy.load_weights(backup)
    for a, b in zip(copy.get_weights(), model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    # Other base weights than the backup's are refused, not trained on.
    copy = rebuilt()
    path, layer = list(lora.adaptable_layers(copy.denoiser).items())[3]
    kernel = lora.keras_internals.lora_base_kernel(layer)
    kernel.assign(kernel.numpy() + 1.0)
    with lora.base_kernels_by_checksum() as mismatched:
        copy.load_weights(backup)
    assert mismatched == [path] and "/" in path  # the layer's path, not name
    with pytest.raises(ValueError, match=f"{path}.*other base.*--overwrite"):
        lora.check_base_unchanged(mismatched)


def test_merging_folds_the_ema_factors_into_plain_kernels(trained, tmp_path):
    _, model, _ = trained
    merged = kd.merge_lora(model)
    assert merged.lora is None and merged.power_ema is None
    assert not any(lora.is_factor(v) for v in merged.denoiser.weights)
    np.testing.assert_allclose(
        merged.generate(2, seed=0, verbose=0),
        model.generate(2, seed=0, verbose=0),
        atol=1e-4,
    )
    # An export to diffusers is of the merged weights.
    kd.to_diffusers(model, tmp_path / "export", verbose=0)
    back = kd.from_diffusers(str(tmp_path / "export"))
    for a, b in zip(back.denoiser.get_weights(), merged.denoiser.get_weights(),
                    strict=True):  # fmt: skip
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_a_functional_denoiser_keeps_its_adapter_through_a_file(tmp_path):
    keras.utils.set_random_seed(0)
    model = kd.enable_lora(kd.DiffusionModel(conv_denoiser(), seed=0), 1)
    _fit(model)
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    for a, b in zip(loaded.get_weights(), model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"rank": 0}, ValueError, "Argument `rank` .*Received: rank=0$"),
        ({"rank": "4"}, TypeError, "Argument `rank` .*Received: rank='4'$"),
        ({"rank": 2, "alpha": -1.0}, ValueError, "Argument `alpha` .*alpha=-1.0$"),
        ({"rank": 2, "alpha": 0.0}, ValueError, "Argument `alpha` .*alpha=0.0$"),
        ({"rank": 2, "layers": "*attn*"}, TypeError, "Argument `layers` "),
        ({"rank": 2, "layers": ["*nothing*"]}, ValueError, "'\\*nothing\\*'"),
    ],
)
def test_bad_settings_are_refused_by_name_before_anything_changes(kwargs, error, match):
    model = _unet_model()
    weights = model.get_weights()
    with pytest.raises(error, match=match):
        kd.enable_lora(model, **kwargs)
    assert model.lora is None
    assert all(v.trainable for v in model.denoiser.trainable_weights)
    for a, b in zip(model.get_weights(), weights, strict=True):
        np.testing.assert_array_equal(a, b)


def test_lora_twice_or_on_something_else_is_refused():
    adapted = kd.enable_lora(_unet_model(), 2)
    with pytest.raises(ValueError, match="LoRA already"):
        kd.enable_lora(adapted, 2)
    with pytest.raises(TypeError, match="DiffusionModel"):
        kd.enable_lora(adapted.denoiser, 2)
    with pytest.raises(ValueError, match="no LoRA"):
        kd.merge_lora(_unet_model())


def test_a_lora_checkpoint_fine_tunes_on_from_its_merged_weights(trained, tmp_path):
    from keras_diffusion.run import init_from

    _, model, _ = trained
    model.save(tmp_path / "lora.keras")
    checkpoint = init_from.load(str(tmp_path / "lora.keras"))
    assert checkpoint.model.lora is None  # a plain U-Net, for any run's flags
    merged = kd.merge_lora(model)
    for a, b in zip(checkpoint.model.denoiser.get_weights(),
                    merged.denoiser.get_weights(), strict=True):  # fmt: skip
        np.testing.assert_array_equal(a, b)
