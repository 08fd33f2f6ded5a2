"""Behaviour shared by all samplers: input checks, compiled loop, seeds, saving."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_diffusion import samplers
from keras_diffusion.samplers import (
    DDIMSampler,
    DDPMSampler,
    DPMSolverSampler,
    EulerSampler,
    HeunSampler,
)
from keras_diffusion.schedules import Levels, Process
from keras_diffusion.schedules.noise_schedule import NoiseSchedule

SCHEDULE = NoiseSchedule()

# Few steps each; every sampler ends at a clean sample.
SAMPLERS = {
    "ddpm": lambda spacing: DDPMSampler(10, timestep_spacing=spacing),
    "ddim": lambda spacing: DDIMSampler(10, timestep_spacing=spacing),
    "ddim_eta": lambda spacing: DDIMSampler(10, eta=1.0, timestep_spacing=spacing),
    "dpm": lambda spacing: DPMSolverSampler(10, timestep_spacing=spacing),
    "euler": lambda spacing: EulerSampler(10, timestep_spacing=spacing),
}


def _x0():
    return np.linspace(-0.9, 0.9, 2 * 4 * 4 * 3, dtype=np.float32).reshape(2, 4, 4, 3)


# Loops rather than parametrization: the suite's per-test teardown costs
# more than a case.
@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_exact_denoiser_of_a_point_returns_the_point(name, oracle):
    x0 = _x0()
    x_T = np.random.default_rng(0).standard_normal(x0.shape).astype(np.float32)
    for prediction_type in ("epsilon", "v_prediction", "sample"):
        for spacing in ("leading", "trailing", "linspace"):
            sampler = SAMPLERS[name](spacing)
            denoise = oracle(SCHEDULE, x0, prediction_type)
            out = sampler.sample(denoise, x_T, SCHEDULE, prediction_type, seed=3)
            assert out.dtype == tf.float32
            np.testing.assert_allclose(
                out.numpy(), x0, atol=2e-4, err_msg=f"{prediction_type}, {spacing}"
            )


# Enough steps that the discretisation bias (the solvers under-disperse with
# few steps) is below 2%; the sampling error of the std is 0.4%.
def test_gaussian_data_gets_its_standard_deviation(gaussian_oracle):
    denoise = gaussian_oracle(SCHEDULE, 0.5)
    x_T = tf.random.stateless_normal((8192, 1, 1, 1), seed=(1, 2))
    for sampler in (
        DDPMSampler(),
        DDIMSampler(500, eta=1.0, timestep_spacing="trailing"),
        DDIMSampler(200, timestep_spacing="trailing"),
        DPMSolverSampler(50),
        EulerSampler(200),
    ):
        run = tf.function(lambda x, s=sampler: s.sample(denoise, x, SCHEDULE, seed=7))
        out = run(x_T).numpy()
        assert abs(out.std() - 0.5) < 0.015, (sampler, out.std())
        assert abs(out.mean()) < 0.015, (sampler, out.mean())


class _Path(Process):
    """A process of its own path, x = alpha (x0 + k n), over levels k that it
    gives (`sampling_levels`); the network gets x / alpha and k and predicts
    x0. `scaled=False` is the same process stepped on x0 + k n."""

    name = "path-test"
    sampler_family = "sigma"

    def __init__(self, scaled):
        self.scaled = scaled

    def _alpha(self, k):
        return 1.0 / np.sqrt(1.0 + k**2) if self.scaled else np.ones_like(k)

    def sampling_levels(self, spacing):
        k = np.append(np.geomspace(20.0, 0.05, spacing.num_steps), 0.0)
        alpha = self._alpha(k)
        return Levels(alpha, alpha * k, {"k": k[:-1]}, float(alpha[0] * k[0]))

    def output_tables(self, plan, prediction_type):
        k = plan["k"]
        alpha, ones = self._alpha(k), np.ones_like(k)
        return {
            "t": k,
            "in_scale": 1.0 / alpha,
            "x0_x": 0.0 * k,
            "x0_out": ones,
            "eps_x": 1.0 / (alpha * k),
            "eps_out": -1.0 / k,
            "a_state": alpha,
            "s_state": alpha * k,
        }


def test_samplers_over_levels_step_on_the_state_the_process_scales():
    # Euler, Heun and DPM-Solver are k-diffusion's samplers over the levels
    # k: on x = alpha (x0 + k n) they make the samples they make on x0 + k n.
    def network(u, k):
        return tf.tanh(u) / (1.0 + tf.reshape(k, (-1, 1, 1, 1)))

    x_T = np.random.default_rng(3).standard_normal((2, 4, 4, 1)).astype("float32")
    for sampler in (EulerSampler(6), HeunSampler(5), DPMSolverSampler(6)):
        want = sampler.sample(network, x_T, _Path(scaled=False)).numpy()
        got = sampler.sample(network, x_T, _Path(scaled=True)).numpy()
        assert np.abs(want).max() > 0.1, sampler
        np.testing.assert_allclose(got, want, atol=1e-5, err_msg=sampler.name)


def test_denoiser_is_traced_once_inside_tf_function(dummy_model, deter_sample):
    for sampler in (DDIMSampler(10, eta=0.5), DPMSolverSampler(10), EulerSampler(10)):
        calls = []

        def denoise(x, t, calls=calls):
            calls.append(1)
            return dummy_model(x, t)

        run = tf.function(
            lambda x, s=sampler, d=denoise: s.sample(d, x, SCHEDULE),
            input_signature=[tf.TensorSpec((None, 8, 8, 3), tf.float32)],
        )
        out = run(tf.constant(deter_sample))
        run(tf.constant(deter_sample[:2]))  # another batch size, same trace
        assert len(calls) == 1, repr(sampler)
        eager = sampler.sample(dummy_model, deter_sample, SCHEDULE, seed=None)
        if sampler.get_config().get("eta", 0.0) == 0.0:
            np.testing.assert_allclose(out.numpy(), eager.numpy(), atol=1e-5)


def test_tensor_seed_in_tf_function_matches_eager_int_seed(dummy_model, deter_sample):
    sampler = DDIMSampler(10, eta=1.0)
    run = tf.function(
        lambda x, seed: sampler.sample(dummy_model, x, SCHEDULE, seed=seed)
    )
    graph = run(tf.constant(deter_sample), tf.constant([5, 0])).numpy()
    eager = sampler.sample(dummy_model, deter_sample, SCHEDULE, seed=5).numpy()
    np.testing.assert_allclose(graph, eager, atol=1e-6)


def test_jit_compile(dummy_model, deter_sample):
    x = tf.constant(deter_sample)
    for eta in (0.0, 1.0):
        sampler = DDIMSampler(10, eta=eta)
        run = tf.function(
            lambda x, seed, s=sampler: s.sample(dummy_model, x, SCHEDULE, seed=seed),
            jit_compile=True,
        )
        first = run(x, tf.constant([5, 0])).numpy()
        np.testing.assert_array_equal(run(x, tf.constant([5, 0])).numpy(), first)
        if eta == 0.0:  # XLA draws other noise than TF kernels for one seed.
            eager = sampler.sample(dummy_model, deter_sample, SCHEDULE).numpy()
            np.testing.assert_allclose(first, eager, atol=1e-5)


def test_seed_fixes_the_noise_of_stochastic_samplers(dummy_model, deter_sample):
    for sampler in (DDPMSampler(10), DDIMSampler(10, eta=1.0)):
        a = sampler.sample(dummy_model, deter_sample, SCHEDULE, seed=1).numpy()
        b = sampler.sample(dummy_model, deter_sample, SCHEDULE, seed=1).numpy()
        c = sampler.sample(dummy_model, deter_sample, SCHEDULE, seed=2).numpy()
        np.testing.assert_array_equal(a, b)
        assert np.abs(a - c).max() > 1e-3


def test_float16_denoiser_output_gives_float32_sample(deter_sample):
    def denoise(x, t):
        return tf.cast(x * 0.1, tf.float16)

    out = DDIMSampler(5).sample(denoise, deter_sample.astype(np.float16), SCHEDULE)
    assert out.dtype == tf.float32


def test_serialization_round_trip():
    for sampler in [
        DDPMSampler(None, timestep_spacing="trailing", clip_sample=True),
        DDPMSampler(10, steps_offset=1, variance_type="fixed_large"),
        DDIMSampler(25, 0.3, "linspace", 1, True, 2.0, set_alpha_to_one=False),
        DPMSolverSampler(12, "leading", 1, True, "sigma_min", lower_order_final=False),
        EulerSampler(7, timestep_spacing="trailing", use_karras_sigmas=True),
    ]:
        config = keras.saving.serialize_keras_object(sampler)
        restored = keras.saving.deserialize_keras_object(config)
        assert type(restored) is type(sampler)
        assert restored.get_config() == sampler.get_config()
        np.testing.assert_array_equal(
            restored.timesteps(SCHEDULE), sampler.timesteps(SCHEDULE)
        )


def test_get_by_name_config_or_instance():
    expected = {
        "ddim": DDIMSampler,
        "ddpm": DDPMSampler,
        "dpm": DPMSolverSampler,
        "euler": EulerSampler,
    }
    for name, cls in expected.items():
        sampler = samplers.get(name, num_steps=7)
        assert type(sampler) is cls
        assert sampler.num_steps == 7
    ddim = samplers.get("ddim", num_steps=12, eta=0.5)
    assert ddim.get_config() == DDIMSampler(12, eta=0.5).get_config()
    assert samplers.get(ddim) is ddim
    restored = samplers.get(keras.saving.serialize_keras_object(ddim))
    assert type(restored) is DDIMSampler
    assert restored.get_config() == ddim.get_config()


@pytest.mark.parametrize(
    "args, kwargs, error, words",
    [
        (("plms",), {}, ValueError, "name='plms'"),
        ((None,), {}, TypeError, "name=None"),
        ((3,), {}, TypeError, "name=3"),
        (
            (keras.saving.serialize_keras_object(keras.layers.Dense(1)),),
            {},
            TypeError,
            "name={",
        ),
        ((DDIMSampler(),), {"num_steps": 5}, ValueError, "kwargs="),
        (("ddim",), {"num_steps": 0}, ValueError, "num_steps=0"),
    ],
)
def test_get_bad_input(args, kwargs, error, words):
    with pytest.raises(error, match="Argument `|Keyword") as info:
        samplers.get(*args, **kwargs)
    assert words in str(info.value)


ZERO_SNR = NoiseSchedule(rescale_zero_terminal_snr=True)

BAD_INPUT = [
    # (make the sampler, sample kwargs or None, error, words in the message)
    (lambda: DDIMSampler(num_steps=0), None, ValueError, "num_steps=0"),
    (lambda: DDIMSampler(num_steps=2.5), None, TypeError, "num_steps=2.5"),
    (lambda: EulerSampler(num_steps="10"), None, TypeError, "num_steps='10'"),
    (lambda: DDPMSampler(num_steps=True), None, TypeError, "num_steps=True"),
    (lambda: DDIMSampler(eta=-0.1), None, ValueError, "eta=-0.1"),
    (
        lambda: DDIMSampler(timestep_spacing="uniform"),
        None,
        ValueError,
        "timestep_spacing='uniform'",
    ),
    (lambda: DPMSolverSampler(steps_offset=-1), None, ValueError, "steps_offset=-1"),
    (
        lambda: DDPMSampler(variance_type="learned_range"),
        None,
        ValueError,
        "variance_type='learned_range'",
    ),
    (
        lambda: DDPMSampler(clip_sample_range=0.0),
        None,
        ValueError,
        "clip_sample_range=0.0",
    ),
    (lambda: DDIMSampler(clip_sample="yes"), None, TypeError, "clip_sample='yes'"),
    (
        lambda: DDIMSampler(set_alpha_to_one=None),
        None,
        TypeError,
        "set_alpha_to_one=None",
    ),
    (
        lambda: DPMSolverSampler(final_sigmas_type="max"),
        None,
        ValueError,
        "final_sigmas_type='max'",
    ),
    (lambda: EulerSampler(use_karras_sigmas=1), None, TypeError, "use_karras_sigmas=1"),
    (lambda: DDIMSampler(2000), {}, ValueError, "num_steps=2000"),
    (lambda: DDPMSampler(1001), {}, ValueError, "num_steps=1001"),
    (lambda: DDIMSampler(10, steps_offset=150), {}, ValueError, "steps_offset=150"),
    (
        lambda: DDIMSampler(10),
        {"prediction_type": "eps"},
        ValueError,
        "prediction_type='eps'",
    ),
    (lambda: DDIMSampler(10), {"schedule": "linear"}, TypeError, "schedule='linear'"),
    (lambda: DDPMSampler(10), {"seed": "abc"}, TypeError, "seed='abc'"),
    (
        lambda: DDPMSampler(10),
        {"seed": tf.constant([1, 2, 3])},
        ValueError,
        "seed.shape=(3,)",
    ),
    (
        lambda: DDIMSampler(10, timestep_spacing="trailing"),
        {"schedule": ZERO_SNR},
        ValueError,
        "prediction_type='epsilon'",
    ),
]


def test_bad_input_names_the_argument_and_value():
    for make, kwargs, error, words in BAD_INPUT:
        with pytest.raises(error) as info:
            sampler = make()
            if kwargs is not None:
                kwargs = {"schedule": SCHEDULE, **kwargs}
                sampler.sample(lambda x, t: x, np.zeros((1, 2, 2, 1)), **kwargs)
        message = str(info.value)
        assert words in message, (words, message)
        assert "Argument `" in message, message
