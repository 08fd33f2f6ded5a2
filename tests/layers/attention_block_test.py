"""AttentionBlock: shapes, config round trip, a training step, mixed precision."""

import keras
import numpy as np
import pytest

from keras_diffusion.layers import AttentionBlock

CHANNELS = 8


def feature_map(batch=2, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(batch, 8, 8, CHANNELS)).astype("float32")


def test_output_shape_and_dtype():
    layer = AttentionBlock(num_heads=2, groups=2)
    outputs = layer(feature_map())
    assert tuple(outputs.shape) == (2, 8, 8, CHANNELS)
    assert keras.backend.standardize_dtype(outputs.dtype) == "float32"
    symbolic = AttentionBlock(num_heads=2, groups=2)(keras.Input((8, 8, CHANNELS)))
    assert tuple(symbolic.shape) == (None, 8, 8, CHANNELS)


def test_channels_must_divide_by_num_heads():
    with pytest.raises(ValueError, match="num_heads=3"):
        AttentionBlock(num_heads=3, groups=2)(feature_map())


def _numpy_attention(layer, x):
    """diffusers' spatial attention in NumPy: GroupNorm, q/k/v to heads *
    head_dim, softmax(q k^T / sqrt(head_dim)) v, the output back to C."""
    batch, height, width, channels = x.shape
    groups = layer.groups
    h = x.reshape(batch, -1, groups, channels // groups)
    mean = h.mean(axis=(1, 3), keepdims=True)
    var = h.var(axis=(1, 3), keepdims=True)
    h = ((h - mean) / np.sqrt(var + layer.epsilon)).reshape(batch, -1, channels)
    gamma, beta = (np.asarray(w) for w in layer.norm.weights)
    h = h * gamma + beta
    weights = {
        "/".join(w.path.split("/")[-2:]): np.asarray(w) for w in layer.attention.weights
    }

    def project(name):  # (C, heads, head_dim) -> (batch, heads, HW, head_dim)
        out = np.einsum("bnc,chd->bhnd", h, weights[f"{name}/kernel"])
        return out + weights[f"{name}/bias"][None, :, None]

    q, k, v = project("query"), project("key"), project("value")
    logits = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    heads = probs @ v
    out = np.einsum("bhnd,hdc->bnc", heads, weights["attention_output/kernel"])
    out = out + weights["attention_output/bias"]
    return x + out.reshape(x.shape)


@pytest.mark.parametrize("num_heads, head_dim", [(2, 3), (1, 3), (3, 4), (2, None)])
def test_heads_of_head_dim_channels_need_not_cover_the_channels(num_heads, head_dim):
    # diffusers' rule for widths that attention_head_dim does not divide:
    # 8 channels, 2 heads of 3 -> queries, keys and values of 6 channels.
    layer = AttentionBlock(num_heads=num_heads, groups=2, head_dim=head_dim)
    x = feature_map()
    layer(x)
    size = head_dim or CHANNELS // num_heads
    shapes = {
        "/".join(w.path.split("/")[-2:]): tuple(w.shape)
        for w in layer.attention.weights
    }
    assert shapes["query/kernel"] == (CHANNELS, num_heads, size)
    assert shapes["attention_output/kernel"] == (num_heads, size, CHANNELS)
    for index, weight in enumerate(layer.weights):
        rng = np.random.default_rng([2, index])
        weight.assign(rng.normal(0.0, 0.3, weight.shape).astype(weight.dtype))
    np.testing.assert_allclose(layer(x), _numpy_attention(layer, x), atol=2e-5)


def test_head_dim_is_serialised_and_defaults_to_the_old_layout():
    layer = AttentionBlock(num_heads=2, groups=2, head_dim=3)
    config = layer.get_config()
    assert config["head_dim"] == 3
    assert AttentionBlock.from_config(config).head_dim == 3
    # A config saved before head_dim existed builds channels // num_heads.
    old = {k: v for k, v in AttentionBlock(num_heads=2, groups=2).get_config().items()}
    old.pop("head_dim")
    restored = AttentionBlock.from_config(old)
    restored(feature_map())
    assert tuple(restored.attention.weights[0].shape) == (CHANNELS, 2, CHANNELS // 2)
    with pytest.raises(ValueError, match="head_dim=0"):
        AttentionBlock(head_dim=0)


def test_equivariant_to_a_permutation_of_the_positions():
    # No positional encoding, and GroupNorm's statistics ignore the order:
    # permuting the H*W pixels permutes the output alike.
    layer = AttentionBlock(num_heads=2, groups=2)
    x = feature_map()
    order = np.random.default_rng(3).permutation(64)

    def permute(a):
        return np.asarray(a).reshape(2, 64, CHANNELS)[:, order].reshape(x.shape)

    outputs = keras.ops.convert_to_numpy(layer(x))
    np.testing.assert_allclose(layer(permute(x)), permute(outputs), atol=1e-5)
    assert not np.allclose(outputs, x, atol=1e-3)  # the attention adds something


def test_every_position_attends_to_every_other():
    layer = AttentionBlock(num_heads=1, groups=2)
    x = feature_map()
    nudged = x.copy()
    nudged[:, 0, 0] += 1.0
    a = keras.ops.convert_to_numpy(layer(x))
    b = keras.ops.convert_to_numpy(layer(nudged))
    # The far corner moves, and the other image of the batch does not.
    assert np.abs(a[:, 7, 7] - b[:, 7, 7]).min() > 1e-6
    nudged_first = x.copy()
    nudged_first[0, 0, 0] += 1.0
    c = keras.ops.convert_to_numpy(layer(nudged_first))
    np.testing.assert_array_equal(c[1], a[1])


def test_config_round_trip_gives_the_same_output(check_config_round_trip):
    layer = AttentionBlock(num_heads=2, groups=4, name="attention")
    x = feature_map()
    layer(x)
    for index, weight in enumerate(layer.weights):
        rng = np.random.default_rng([1, index])
        weight.assign(rng.normal(0.0, 0.3, weight.shape).astype(weight.dtype))
    config = check_config_round_trip(layer, x)
    assert config["num_heads"] == 2 and config["groups"] == 4


def test_gradient_step(check_gradient_step):
    # (The key bias shifts every logit of a query alike, which the softmax
    # ignores: its gradient is zero, so only finiteness is asked of each.)
    layer = AttentionBlock(num_heads=2, groups=2)
    check_gradient_step(layer, feature_map(), feature_map(seed=5))


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
@pytest.mark.parametrize("how", ["global policy", "dtype argument"])
def test_mixed_precision(policy, how, check_mixed_precision):
    outputs = check_mixed_precision(
        lambda **kw: AttentionBlock(num_heads=2, groups=2, **kw),
        feature_map(),
        policy,
        how,
    )
    assert np.isfinite(keras.ops.convert_to_numpy(outputs).astype("float32")).all()
