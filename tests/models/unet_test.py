"""UNet: its config, which `keras.saving` rebuilds the denoiser from."""

import keras
import numpy as np

from keras_diffusion import UNet
from keras_diffusion.layers import ResidualBlock
from tests.denoisers import tiny_unet


def test_config_round_trip_keeps_every_argument_and_the_dtype():
    unet = UNet(
        (8, 8, 3),
        widths=(8, 16),
        num_res_blocks=1,
        attention_levels=(False, True),
        num_classes=4,
        embedding_dim=24,
        num_heads=2,
        groups=4,
        dropout=0.1,
        dtype="mixed_bfloat16",
    )
    config = unet.get_config()
    assert config["dtype"] == keras.dtype_policies.serialize(unet.dtype_policy)
    restored = UNet.from_config(config)
    assert restored.dtype_policy.name == "mixed_bfloat16"
    # The layers take the model's policy, not the global one (float32 here).
    assert restored.get_layer("stem").compute_dtype == "bfloat16"
    assert restored.get_layer("prediction").compute_dtype == "float32"
    assert restored.get_config() == config
    assert restored.count_params() == unet.count_params()


def test_saved_unet_loads_with_its_weights(tmp_path):
    unet = tiny_unet()
    # Distinct values in every variable: a weight restored into another layer
    # of the same shape (say, one GroupNorm's gamma for another's) shows.
    for index, variable in enumerate(unet.weights):
        rng = np.random.default_rng(index)
        variable.assign(rng.normal(0.0, 0.3, variable.shape).astype(variable.dtype))
    path = str(tmp_path / "unet.keras")
    unet.save(path)
    loaded = keras.saving.load_model(path)

    # Layer by layer, in the order the config builds them; every variable
    # keeps its path (`down_0_res_0/conv_1/kernel`: no numbered name).
    for layer, twin in zip(unet.layers, loaded.layers, strict=True):
        assert type(twin) is type(layer)
        for weight, restored in zip(layer.weights, twin.weights, strict=True):
            name = weight.path
            assert restored.path == weight.path, name
            np.testing.assert_array_equal(restored.numpy(), weight.numpy(), name)
    x = np.random.default_rng(0).normal(size=(2, 8, 8, 1)).astype("float32")
    t = np.array([3.0, 7.0], "float32")
    np.testing.assert_allclose(loaded([x, t]), unet([x, t]), rtol=1e-5, atol=1e-6)


def test_remat_gives_the_same_loss_and_gradients_and_refuses_dropout():
    import pytest
    import tensorflow as tf

    # One level with attention: a residual and an attention block, each kind.
    shape, kwargs = (8, 8, 1), {"widths": (8,), "attention_levels": (True,)}
    kept = UNet(shape, num_res_blocks=1, **kwargs)
    rng = np.random.default_rng(0)
    kept.set_weights([rng.normal(0, 0.2, w.shape) for w in kept.get_weights()])
    recomputed = UNet.from_config({**kept.get_config(), "remat": True})
    recomputed.set_weights(kept.get_weights())
    x = tf.constant(rng.normal(size=(4, *shape)), "float32")
    t = tf.constant([1.0, 10.0, 100.0, 500.0])

    @tf.function  # as in a train step: remat's recomputation is traced
    def loss_and_gradients(unet):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(unet([x, t]) - x))
        return loss, tape.gradient(loss, unet.trainable_variables)

    loss, gradients = loss_and_gradients(kept)
    loss_r, gradients_r = loss_and_gradients(recomputed)
    np.testing.assert_allclose(loss_r, loss, rtol=1e-6)
    for a, b in zip(gradients_r, gradients, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)
    assert recomputed.get_config()["remat"] is True
    with pytest.raises(ValueError, match="dropout"):
        UNet(shape, remat=True, dropout=0.1, **kwargs)
    with pytest.raises(ValueError, match="dropout"):  # a block of one's own too
        ResidualBlock(8, remat=True, dropout=0.1)


def _cross_attention_unet(**overrides):
    overrides = {"widths": (4, 8), "attention_levels": (False, True), **overrides}
    unet = tiny_unet(cross_attention_dim=6, **overrides)
    rng = np.random.default_rng(0)
    for variable in unet.weights:
        variable.assign(rng.normal(0.0, 0.3, variable.shape).astype("float32"))
    return unet


def _context(tokens, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(2, tokens, 6)).astype("float32")


def test_cross_attention_unet_attends_to_a_context_of_any_length(tmp_path):
    from keras_diffusion.layers import TransformerBlock

    unet = _cross_attention_unet()
    assert [i.name for i in unet.inputs] == ["x_t", "t", "context"]
    attending = [
        layer.name for layer in unet.layers if isinstance(layer, TransformerBlock)
    ]
    # The attention level, both ways, and the middle block.
    assert attending == ["down_1_attn_0", "mid_attn", "up_1_attn_0", "up_1_attn_1"]
    x = np.random.default_rng(1).normal(size=(2, 8, 8, 1)).astype("float32")
    t = np.array([3.0, 700.0], "float32")
    out = np.asarray(unet([x, t, _context(3)]))
    assert out.shape == x.shape
    assert np.asarray(unet([x, t, _context(9)])).shape == x.shape
    assert not np.allclose(unet([x, t, _context(3, seed=2)]), out, atol=1e-4)
    # The pooled context reaches the blocks without attention too: with no
    # attention anywhere, the context still changes the output.
    flat = _cross_attention_unet(attention_levels=None, mid_attention=False)
    assert not any(isinstance(layer, TransformerBlock) for layer in flat.layers)
    flat_out = np.asarray(flat([x, t, _context(3)]))
    assert not np.allclose(flat([x, t, _context(3, seed=2)]), flat_out, atol=1e-5)

    path = str(tmp_path / "unet.keras")
    unet.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.get_config() == unet.get_config()
    np.testing.assert_allclose(loaded([x, t, _context(5)]), unet([x, t, _context(5)]))


def test_no_cross_attention_dim_builds_the_same_unet():
    two_levels = dict(widths=(4, 8), attention_levels=(False, True))
    plain = tiny_unet(**two_levels)
    given = tiny_unet(**two_levels, cross_attention_dim=None)
    assert [i.name for i in given.inputs] == ["x_t", "t"]
    layers_of = [(layer.name, type(layer)) for layer in given.layers]
    assert layers_of == [(layer.name, type(layer)) for layer in plain.layers]
    assert [w.path for w in given.weights] == [w.path for w in plain.weights]
    assert given.get_config()["mid_attention"] is True
