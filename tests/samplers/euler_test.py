"""EulerSampler: as diffusers' pipelines run EulerDiscreteScheduler."""

import numpy as np

from keras_diffusion.samplers import EulerSampler
from keras_diffusion.schedules.noise_schedule import NoiseSchedule


def test_diffusers_pipeline_loop(deter_sample, dummy_model):
    # Computed with diffusers 0.42.1 as its pipelines use the scheduler:
    # latents = sample * init_noise_sigma; the model gets
    # scale_model_input(latents); `step` gets the unscaled latents. (Its unit
    # test feeds the scaled sample to `step`; that pins another number.)
    # `sample` multiplies x_T by init_noise_sigma itself, so the harness
    # start goes in as x_T.
    for spacing, prediction_type, total, mean in [
        ("linspace", "epsilon", 169.4608, 0.220652),
        ("linspace", "v_prediction", 48.7027, 0.063415),
        ("leading", "epsilon", 172.0067, 0.223967),
    ]:
        sampler = EulerSampler(10, timestep_spacing=spacing)
        x = sampler.sample(dummy_model, deter_sample, NoiseSchedule(), prediction_type)
        x = np.abs(x.numpy())
        assert abs(x.sum() - total) < 1e-2, (spacing, prediction_type, x.sum())
        assert abs(x.mean() - mean) < 1e-3, (spacing, prediction_type, x.mean())


def test_model_sees_the_variance_preserving_input():
    schedule = NoiseSchedule()
    abar = schedule.alphas_cumprod_float64
    for spacing in ("linspace", "leading"):
        sampler = EulerSampler(4, timestep_spacing=spacing)
        t0 = int(sampler.timesteps(schedule)[0])
        sigma = np.sqrt((1 - abar[t0]) / abar[t0])
        # init_noise_sigma: sigma_max, or sqrt(sigma_max**2 + 1) for "leading".
        init = sigma if spacing == "linspace" else np.sqrt(sigma**2 + 1)
        seen = []

        def denoise(x, t, seen=seen):
            seen.append((x.numpy(), t.numpy()))
            return 0.0 * x

        sampler.sample(denoise, np.ones((2, 1, 1, 1), np.float32), schedule)
        expected = init / np.sqrt(sigma**2 + 1)
        np.testing.assert_allclose(seen[0][0], expected, rtol=1e-6, err_msg=spacing)
        np.testing.assert_array_equal(seen[0][1], [t0, t0])


def test_linspace_timesteps_are_fractional():
    t = EulerSampler(7).timesteps(NoiseSchedule())
    np.testing.assert_array_equal(t, [999, 832.5, 666, 499.5, 333, 166.5, 0])
    assert t.dtype == np.float32
