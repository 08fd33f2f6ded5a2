"""A process the library does not ship, written here: it trains with `fit`,
samples with the samplers that step on its family, saves and loads as
`.keras`, resumes mid-epoch and resolves in a `TrainConfig`, with no library
file edited (docs/architecture.md, "Adding a process").

The process is the variance-exploding SDE of Song et al. (2021) in EDM's
Table 1 form: x = x0 + sigma n with log-uniform training sigmas, the network
called on x itself and log(sigma / 2), predicting the scaled noise -n
(c_skip = 1, c_out = sigma, c_in = 1, loss weight 1 / sigma**2).
"""

import keras
import numpy as np
import pytest
from keras import ops

from keras_diffusion import DiffusionModel, samplers
from keras_diffusion.data import from_arrays
from keras_diffusion.run import config
from keras_diffusion.schedules import Process, register_process, sigma_tables
from keras_diffusion.utils import stateless
from tests.denoisers import conv_denoiser
from tests.run import preemption_test


@register_process
@keras.saving.register_keras_serializable(package="keras_diffusion_tests")
class VESchedule(Process):
    """Song et al.'s variance-exploding SDE, stepped as EDM's Table 1 VE."""

    name = "ve"
    sampler_family = "sigma"
    objective_note = "the network predicts the scaled noise -n"
    run_settings = {"sigma_min": "sigma_min", "sigma_max": "sigma_max"}
    network_inputs = "log(sigma / 2) on x0 + sigma n"
    default_samplers = {"*": ("euler", 8)}

    def __init__(self, sigma_min=0.02, sigma_max=20.0):
        self.sigma_min = float(sigma_min)
        self.sigma_max = float(sigma_max)

    def sigmas(self, num_steps):
        return np.geomspace(self.sigma_max, self.sigma_min, int(num_steps))

    @property
    def init_sigma(self):
        return self.sigma_max

    def preconditioning(self, sigma, xp=np):
        ones = xp.ones_like(sigma)
        return ones, sigma, ones, xp.log(0.5 * sigma)

    def training_loss(self, step):
        u = stateless.uniform([step.batch_size], step.seeds[0])
        sigma = self.sigma_min * (self.sigma_max / self.sigma_min) ** u
        noise = step.noise()
        out = step.network(
            step.x0 + step.per_example(sigma) * noise, ops.log(0.5 * sigma)
        )
        # lambda ||D - x0||^2 = ||F - (x0 - x) / sigma||^2 = ||F + n||^2.
        return ops.mean(step.mean_square(out + noise))

    def output_tables(self, plan, prediction_type):
        return sigma_tables(self, plan)

    def get_config(self):
        return {"sigma_min": self.sigma_min, "sigma_max": self.sigma_max}


def _model():
    keras.utils.set_random_seed(0)
    model = DiffusionModel(conv_denoiser(), VESchedule(), seed=0)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), jit_compile=False)
    return model


def test_it_trains_samples_and_round_trips(tmp_path):
    model = _model()
    images = np.random.default_rng(0).integers(0, 256, (40, 8, 8), np.uint8)
    model.fit(from_arrays(images, batch_size=4, seed=5), epochs=1, verbose=0)
    assert np.isfinite(model.loss_tracker.result().numpy())
    # Its own default sampler (the class's table), and each sampler of the
    # "sigma" family; DDIM steps on alphas_cumprod and is refused by name.
    np.testing.assert_array_equal(
        model.generate(2, seed=0, verbose=0),
        model.generate(2, sampler=samplers.EulerSampler(8), seed=0, verbose=0),
    )
    for sampler in (samplers.EulerSampler(4), samplers.HeunSampler(3)):
        images = model.generate(2, sampler=sampler, seed=1, verbose=0)
        assert images.shape == (2, 8, 8, 1) and np.isfinite(images).all()
    with pytest.raises(ValueError, match="the samplers that do: dpm\\|euler\\|heun"):
        model.generate(1, sampler="ddim")
    dpm = samplers.DPMSolverSampler(4)
    want = model.generate(2, sampler=dpm, seed=3, verbose=0)
    path = str(tmp_path / "ve.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded.schedule, VESchedule)
    got = loaded.generate(2, sampler=dpm, seed=3, verbose=0)
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_it_resumes_mid_epoch_as_the_uninterrupted_run(tmp_path):
    # tests/run/preemption_test.py's run (a SIGTERM during a compiled call of
    # 4 steps, a resume from the step backup) on this process.
    assert preemption_test.resumed_difference(tmp_path, VESchedule()) <= 1e-6


def test_a_run_config_selects_it_by_name():
    resolved = config.TrainConfig(process="ve", sigma_max=10.0).resolve()
    assert (resolved.process, resolved.schedule) == ("ve", "ve")
    assert (resolved.sigma_min, resolved.sigma_max) == (0.02, 10.0)
    assert (resolved.sampler, resolved.sampling_steps) == ("euler", 8)
    assert resolved.prediction_type is None and resolved.beta_schedule is None
    with pytest.raises(ValueError, match=r"\('ddim'\).*'ve'.*dpm\|euler\|heun"):
        config.TrainConfig(process="ve", sampler="ddim").resolve()
