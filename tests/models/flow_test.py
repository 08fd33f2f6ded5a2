"""DiffusionModel on a FlowMatchSchedule: the velocity train step, its draws,
sampling, saving, and the options it refuses."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

from keras_diffusion import (
    DDIMSampler,
    DiffusionModel,
    DPMSolverSampler,
    EulerSampler,
    FlowMatchSchedule,
)
from keras_diffusion.schedules.process import TrainingStep
from keras_diffusion.utils import stateless
from tests.denoisers import conv_denoiser

FIXED_SEED = tf.constant([3, 4], dtype="int32")


def make_flow_model(schedule=None, jit_compile=False, **kwargs):
    model = DiffusionModel(conv_denoiser(), schedule or FlowMatchSchedule(), **kwargs)
    model.compile(optimizer=keras.optimizers.Adam(3e-3), jit_compile=jit_compile)
    return model


def test_loss_is_the_velocity_error_at_diffusers_timesteps():
    # The train loss, recomputed in float64 from the same draws:
    # ||F(x_s, s T) - (n - x0)||^2 with x_s = (1 - s) x0 + s n.
    schedule = FlowMatchSchedule(shift=3.0, logit_mean=0.3, logit_std=0.8)
    denoiser = conv_denoiser()
    model = DiffusionModel(denoiser, schedule, ema_decay=None)
    x0 = np.random.default_rng(1).uniform(-1, 1, (6, 8, 8, 1)).astype("float32")
    got = float(model.diffusion_loss(x0, seed=FIXED_SEED))

    level_seed, noise_seed, _ = tf.unstack(
        tf.random.experimental.stateless_split(FIXED_SEED, 3)
    )
    s = schedule.draw_levels(6, level_seed).numpy().astype(np.float64)
    noise = stateless.normal((6, 8, 8, 1), noise_seed).numpy().astype(np.float64)
    s_b = s[:, None, None, None]
    x_s = (1.0 - s_b) * x0 + s_b * noise
    out = denoiser([x_s.astype("float32"), (s * 1000).astype("float32")]).numpy()
    want = np.mean((out - (noise - x0)) ** 2)
    assert got == pytest.approx(want, rel=1e-4)


@pytest.mark.parametrize("level", [0.0, 1.0])
def test_the_path_ends_at_the_data_and_at_the_noise(monkeypatch, level):
    # At s = 0 the network sees x0 and timestep 0; at s = 1 the noise and
    # timestep T: a network answering n - x0 there has zero loss.
    monkeypatch.setattr(
        FlowMatchSchedule, "draw_levels", lambda *args: tf.fill([4], level)
    )
    x0 = np.random.default_rng(2).uniform(-1, 1, (4, 8, 8, 1)).astype("float32")
    seen = {}

    def call(inputs, training):
        seen["x"], seen["t"] = inputs[0].numpy(), inputs[1].numpy()
        # The noise is the input at s = 1; at s = 0 it is not seen: answer
        # the velocity of the input as if it were the noise.
        return inputs[0] - x0

    step = TrainingStep(x0, None, (FIXED_SEED, FIXED_SEED), True, call)
    loss = FlowMatchSchedule().training_loss(step)
    np.testing.assert_array_equal(seen["t"], np.full(4, 1000.0 * level))
    if level == 0.0:
        np.testing.assert_array_equal(seen["x"], x0)
        # The answer 0 is off by the whole velocity n - x0.
        noise = stateless.normal((4, 8, 8, 1), FIXED_SEED).numpy()
        assert float(loss) == pytest.approx(np.mean((noise - x0) ** 2), rel=1e-5)
    else:
        assert float(loss) < 1e-12


def _levels(schedule, n=20000):
    return schedule.draw_levels(n, FIXED_SEED).numpy().astype(np.float64)


def test_level_draws_follow_timestep_sampling_and_shift():
    # logit-normal: logit(u) ~ N(mean, std**2), then the shift.
    schedule = FlowMatchSchedule(shift=3.0, logit_mean=-0.5, logit_std=0.7)
    s = _levels(schedule)
    u = s / (3.0 - 2.0 * s)  # the inverse of the shift
    logit = np.log(u / (1 - u))
    assert stats.kstest(logit, stats.norm(-0.5, 0.7).cdf).pvalue > 1e-3
    # uniform: u ~ U(0, 1).
    u = _levels(FlowMatchSchedule(timestep_sampling="uniform"))
    assert stats.kstest(u, "uniform").pvalue > 1e-3
    # mode: the CDF of 1 - u - scale (cos^2(pi u / 2) - 1 + u), a decreasing
    # map f of u ~ U(0, 1), is P(f(u) <= x) = 1 - f^-1(x).
    scale = 1.29
    grid = np.linspace(0, 1, 100001)
    f = 1 - grid - scale * (np.cos(np.pi * grid / 2) ** 2 - 1 + grid)
    s = _levels(FlowMatchSchedule(timestep_sampling="mode", mode_scale=scale))
    assert (
        stats.kstest(s, lambda x: 1 - np.interp(x, f[::-1], grid[::-1])).pvalue > 1e-3
    )
    assert 0.0 <= s.min() and s.max() <= 1.0


@pytest.mark.parametrize("jit_compile", [False, True])
def test_fresh_levels_every_step(toy_images, jit_compile):
    denoiser = conv_denoiser(record=True)
    model = DiffusionModel(denoiser, FlowMatchSchedule(), ema_decay=None)
    model.compile(optimizer="sgd", steps_per_execution=4, jit_compile=jit_compile)
    model.fit(toy_images, epochs=1, batch_size=8, verbose=0)
    recorder = denoiser.get_layer("timestep_recorder")
    steps = len(toy_images) // 8
    assert int(recorder.count.numpy()) == steps
    means = recorder.history.numpy()[:steps]
    assert len(np.unique(np.round(means, 2))) == steps
    # t = 1000 s, s logit-normal(0, 1): mean 500 by symmetry, std ~208.
    assert abs(means.mean() - 500.0) < 4.5 * 208 / np.sqrt(steps * 8)


def test_same_seed_same_training_other_seed_other(toy_images):
    weights = []
    for seed in (5, 5, 6):
        keras.utils.set_random_seed(7)
        model = make_flow_model(seed=seed)
        model.fit(toy_images[:32], epochs=1, batch_size=16, verbose=0, shuffle=False)
        weights.append([v.numpy() for v in model.denoiser.trainable_variables])
    for a, b in zip(weights[0], weights[1], strict=True):
        np.testing.assert_array_equal(a, b)
    assert any(
        not np.array_equal(a, c) for a, c in zip(weights[0], weights[2], strict=True)
    )


def test_a_tiny_flow_model_learns_the_toy_data(toy_images):
    keras.utils.set_random_seed(3)
    model = make_flow_model(jit_compile=True)
    before = float(model.diffusion_loss(toy_images, seed=FIXED_SEED))
    model.fit(toy_images, epochs=8, batch_size=16, verbose=0)
    after = float(model.diffusion_loss(toy_images, seed=FIXED_SEED))
    # Measured: 1.38 -> 0.47, a factor 0.34.
    assert after < 0.5 * before, (before, after)


def test_generate_with_guidance_round_trips(make_unet, toy_images, tmp_path):
    # A one-level U-Net: guidance and the round trip do not depend on the
    # depth, and its trace is shorter.
    model = DiffusionModel(
        make_unet(num_classes=3, widths=(4,)),
        FlowMatchSchedule(shift=2.0, timestep_sampling="mode"),
        class_dropout=0.2,
        seed=1,
    )
    model.compile(optimizer=keras.optimizers.Adam(3e-3), jit_compile=False)
    labels = np.arange(32) % 3
    model.fit(toy_images[:32], labels, epochs=1, batch_size=16, verbose=0)
    sampler = EulerSampler(4)
    plain = model.generate(3, sampler=sampler, labels=[0, 1, 2], seed=0)
    guided = model.generate(
        3, sampler=sampler, labels=[0, 1, 2], guidance_scale=3.0, seed=0
    )
    assert np.isfinite(guided).all() and np.abs(guided - plain).max() > 1e-4
    # The default sampler is DPM-Solver++ in 16 steps (docs/quality.md).
    np.testing.assert_array_equal(
        model.generate(2, labels=[0, 1], seed=4),
        model.generate(2, sampler=DPMSolverSampler(16), labels=[0, 1], seed=4),
    )

    path = str(tmp_path / "flow.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.schedule.get_config() == model.schedule.get_config()
    np.testing.assert_allclose(
        loaded.generate(
            3, sampler=sampler, labels=[0, 1, 2], guidance_scale=3.0, seed=0
        ),
        guided,
        atol=1e-6,
    )


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"prediction_type": "v_prediction"}, "prediction_type='v_prediction'"),
        ({"prediction_type": "sample"}, "prediction_type='sample'"),
        ({"loss_weighting": "min_snr"}, "loss_weighting='min_snr'"),
    ],
)
def test_options_that_do_not_apply_to_flow_are_refused(make_unet, kwargs, fragment):
    with pytest.raises(ValueError, match=fragment) as info:
        DiffusionModel(make_unet(), FlowMatchSchedule(), **kwargs)
    assert "FlowMatchSchedule" in str(info.value) and "velocity" in str(info.value)


def test_a_ddim_sampler_is_refused_on_a_flow_model(make_unet):
    model = DiffusionModel(make_unet(), FlowMatchSchedule())
    with pytest.raises(ValueError, match="\\('ddim'\\) does not run on the 'flow'"):
        model.generate(1, sampler=DDIMSampler(5), seed=0)


def test_a_sampler_that_does_not_apply_is_refused_at_construction(make_unet):
    # Refused before anything is built, not in the first `generate`; the
    # message names the values that apply, as `sampler=` takes them.
    with pytest.raises(ValueError, match="the samplers that do: dpm\\|euler\\|heun"):
        DiffusionModel(make_unet(), FlowMatchSchedule(), sampler="ddim")


def test_add_noise_and_velocity_are_tensors_as_the_vp_schedules_are():
    # float32 maths, of x0's dtype, as NoiseSchedule's (they were NumPy
    # float64 before, usable only as test oracles).
    schedule = FlowMatchSchedule()
    x0 = keras.ops.ones((2, 4, 4, 1), "float16")
    noise = keras.ops.zeros((2, 4, 4, 1), "float16")
    x_s = schedule.add_noise(x0, noise, np.array([0.25, 1.0], "float32"))
    assert keras.ops.is_tensor(x_s) and x_s.dtype == "float16"
    np.testing.assert_allclose(keras.ops.convert_to_numpy(x_s)[:, 0, 0, 0], [0.75, 0])
    v = schedule.velocity(x0, noise)
    assert keras.ops.is_tensor(v) and np.all(keras.ops.convert_to_numpy(v) == -1)
