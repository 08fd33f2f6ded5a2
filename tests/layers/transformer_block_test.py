"""TransformerBlock: shapes for any context length, the context's effect, its
sublayers' paths, config round trip, a training step, mixed precision.
Its parity with diffusers' Transformer2DModel is
tests/interop/diffusers_parity_test.py's (UNet2DConditionModel)."""

import numpy as np
import pytest

from keras_diffusion.layers import TransformerBlock

CHANNELS, CONTEXT_DIM = 8, 6


def _inputs(tokens=3, seed=0, batch=2):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, 4, 4, CHANNELS)).astype("float32")
    context = rng.normal(size=(batch, tokens, CONTEXT_DIM)).astype("float32")
    return [x, context]


def _randomised(layer, inputs):
    layer(inputs)
    rng = np.random.default_rng(1)
    for weight in layer.weights:
        weight.assign(rng.normal(0.0, 0.3, weight.shape).astype("float32"))
    return layer


def test_a_fresh_block_is_the_identity_and_its_sublayers_are_named():
    layer = TransformerBlock(num_heads=2, groups=2, name="block")
    x, context = _inputs()
    np.testing.assert_array_equal(layer([x, context]), x)
    paths = {w.path.rsplit("/", 1)[0] for w in layer.weights}
    expected = {"block/norm", "block/proj_in", "block/proj_out", "block/ff_in"}
    expected |= {f"block/attn_{i}/to_{p}" for i in (1, 2) for p in "qkv"}
    expected |= {f"block/norm_{i}" for i in (1, 2, 3)} | {"block/attn_2/to_out"}
    assert expected <= paths, sorted(paths)


def test_any_context_length_and_the_context_changes_the_output():
    layer = _randomised(TransformerBlock(num_heads=2, groups=2), _inputs())
    x, context = _inputs(tokens=3)
    out = np.asarray(layer([x, context]))
    assert out.shape == x.shape
    longer = np.asarray(layer(_inputs(tokens=7)))
    assert longer.shape == x.shape
    other = np.asarray(layer([x, context[::-1]]))
    assert not np.allclose(other, out, atol=1e-4)
    # One batch's context changes that batch's output only.
    np.testing.assert_allclose(layer([x[:1], context[:1]]), out[:1], atol=1e-5)


def test_config_round_trip_and_gradient_step(
    check_config_round_trip, check_gradient_step
):
    layer = TransformerBlock(num_heads=2, head_dim=3, groups=4, epsilon=1e-5)
    inputs = _inputs()
    config = check_config_round_trip(_randomised(layer, inputs), inputs)
    assert config["head_dim"] == 3 and config["epsilon"] == 1e-5
    fresh = TransformerBlock(num_heads=2, groups=2)
    check_gradient_step(fresh, inputs, np.zeros_like(inputs[0]) + 0.5)


def test_mixed_precision(check_mixed_precision):
    check_mixed_precision(
        lambda **kw: TransformerBlock(groups=2, **kw),
        _inputs(),
        "mixed_bfloat16",
        "dtype argument",
    )


def test_channels_must_divide_by_groups():
    with pytest.raises(ValueError, match="groups=3"):
        TransformerBlock(groups=3)(_inputs())
