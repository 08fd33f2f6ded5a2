"""The few-step process: its objective, its curriculum, its sampler, and a
model that trains, samples in one call and round-trips."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

import keras_diffusion as kd
from keras_diffusion.samplers import loop
from keras_diffusion.schedules.consistency_schedule import MAX_CURRICULUM_STAGES
from keras_diffusion.schedules.process import TrainingStep
from tests.denoisers import tiny_unet
from tests.run import preemption_test
from tests.schedules.few_calls import check_round_trip_and_edits, fit_tiny


def _step(unet, iteration, labels=None, seed=(3, 4)):
    x0 = tf.constant(np.random.default_rng(0).uniform(-1, 1, (6, 8, 8, 1)), "float32")
    seeds = tuple(tf.constant(s, tf.int32) for s in ((seed[0], 0), (seed[1], 0)))

    def call(inputs, training):
        return unet(inputs, training=training)

    return TrainingStep(x0, labels, seeds, False, call, iteration=iteration)


@pytest.fixture(scope="module")
def unet():
    net = tiny_unet()
    rng = np.random.default_rng(1)
    for variable in net.trainable_variables:  # zero-initialised outputs move
        variable.assign(variable.numpy() + rng.normal(0, 0.1, variable.shape))
    return net


@pytest.mark.parametrize("training", ["discrete", "continuous"])
def test_its_first_stage_is_flow_matching(unet, training):
    # ECT's start: with the gap the whole level (r = 0) the target is the
    # velocity, and the loss flow matching's on the same draws.
    flow = kd.FlowMatchSchedule(logit_mean=-0.4)
    few = kd.ConsistencySchedule(logit_mean=-0.4, training=training, curriculum_steps=8)
    want = float(flow.training_loss(_step(unet, 0)))
    assert float(few.training_loss(_step(unet, 0))) == pytest.approx(want, rel=1e-5)
    assert float(few.training_loss(_step(unet, 5))) != pytest.approx(want, rel=1e-3)


def test_the_last_stage_at_the_bound_still_tells_its_levels_apart():
    bound = MAX_CURRICULUM_STAGES
    few = kd.ConsistencySchedule(curriculum_steps=0, curriculum_stages=bound)
    # The levels training draws, and the top ones, where s's ulp is largest.
    s = ops.concatenate(
        [
            few.draw_levels(4096, tf.constant([1, 2], "int32")),
            ops.convert_to_tensor([0.999, 1.0 - 2**-20]),
        ]
    )
    rho = few.gap(0)
    r = (1.0 - rho) * s  # as `training_loss` forms the lower level, float32
    assert r.dtype == "float32" and bool(ops.all(r < s))
    # The gap the finite difference divides by keeps its leading bits.
    error = ops.abs((s - r) - rho * s) / (rho * s)
    assert float(ops.max(error)) <= 2.0**-5
    with pytest.raises(ValueError, match=f"at most {bound}.*curriculum_stages=21"):
        kd.ConsistencySchedule(curriculum_stages=bound + 1)


def test_the_curriculum_halves_the_gap_each_stage():
    few = kd.ConsistencySchedule(curriculum_steps=8, curriculum_stages=4)
    gaps = [float(few.gap(tf.constant(i, tf.int64))) for i in (0, 1, 2, 5, 7, 8, 99)]
    assert gaps == [1.0, 1.0, 0.5, 0.25, 0.125, 0.125, 0.125]
    at_once = kd.ConsistencySchedule(curriculum_steps=0, curriculum_stages=4)
    assert float(at_once.gap(0)) == 0.125
    assert float(kd.ConsistencySchedule(curriculum_stages=1).gap(10**6)) == 1.0


def test_a_small_gap_gives_the_continuous_loss(unet):
    # The discrete target v - r (F_s - F_r) / (s - r) tends to the
    # continuous v - s dF/ds as the gap closes (last stage, 2**-10), on a
    # time input slow enough for the gap to resolve (s * 4).
    kwargs = dict(num_train_timesteps=4, curriculum_steps=0, curriculum_stages=11)
    discrete = kd.ConsistencySchedule(**kwargs)
    continuous = kd.ConsistencySchedule(training="continuous", **kwargs)
    step = _step(unet, 0)
    want = float(continuous.training_loss(step))
    assert float(discrete.training_loss(step)) == pytest.approx(want, rel=2e-2)


class _Constant(keras.Model):
    """F = c everywhere: x0 = x - s c at each call."""

    def __init__(self, c):
        super().__init__()
        self.c = c

    def call(self, inputs):
        return tf.zeros_like(inputs[0]) + self.c


def test_the_sampler_takes_one_call_and_renoises_between_calls():
    few = kd.ConsistencySchedule()
    x_T = tf.constant(np.random.default_rng(2).normal(size=(3, 4, 4, 1)), "float32")
    seen = []

    def denoise(x, t):
        seen.append(float(t[0]))
        return tf.zeros_like(x) + 0.25

    one = kd.ConsistencySampler(1).sample(denoise, x_T, few)
    np.testing.assert_allclose(one, x_T - 0.25, atol=1e-6)
    two = kd.ConsistencySampler(2, levels=(1.0, 0.4))
    seen.clear()
    got = two.sample(denoise, x_T, few, seed=7)
    assert seen == [1000.0, pytest.approx(400.0)]  # traced once each: s * T
    # Call 1: x0 = x_T - 0.25, noised to 0.4 with the loop's draw; call 2.
    z = loop.noise(kd.samplers.base.seed_tensor(7), 0, tf.shape(x_T))
    x = 0.6 * (x_T - 0.25) + 0.4 * z
    np.testing.assert_allclose(got, x - 0.4 * 0.25, atol=1e-5)
    assert kd.ConsistencySampler(4).noise_levels().tolist() == [1.0, 0.75, 0.5, 0.25]


@pytest.mark.parametrize(
    "kwargs, error, fragment",
    [
        ({"num_steps": 0}, ValueError, "num_steps"),
        ({"num_steps": 2, "levels": (1.0,)}, ValueError, "levels=[1.0]"),
        ({"num_steps": 2, "levels": (0.5, 0.9)}, ValueError, "decreasing"),
        ({"num_steps": 1, "levels": (1.5,)}, ValueError, "levels"),
        ({"num_steps": 1, "levels": 0.5}, TypeError, "levels=0.5"),
    ],
)
def test_bad_sampler_settings_are_refused(kwargs, error, fragment):
    with pytest.raises(error, match=None) as caught:
        kd.ConsistencySampler(**kwargs)
    assert fragment in str(caught.value)


def test_each_sampler_steps_on_its_own_process_alone():
    few, flow = kd.ConsistencySchedule(), kd.FlowMatchSchedule()
    with pytest.raises(ValueError, match="the samplers that do: consistency"):
        kd.DPMSolverSampler(4).validate(few)
    for schedule in (flow, kd.NoiseSchedule()):
        with pytest.raises(ValueError, match="does not run on"):
            kd.ConsistencySampler(2).validate(schedule)
    with pytest.raises(ValueError, match="training"):
        kd.ConsistencySchedule(training="jvp")
    with pytest.raises(ValueError, match="curriculum_steps"):
        kd.ConsistencySchedule(curriculum_steps=-1)


def test_a_model_trains_and_samples_in_one_call_after_a_round_trip(tmp_path):
    schedule = kd.ConsistencySchedule(curriculum_steps=4)
    model, images = fit_tiny(schedule, False, 2)
    # The default sampler: two calls, from the process's table.
    assert kd.ConsistencySchedule.default_sampler() == ("consistency", 2)
    # Guided in one call; img2img from half the noise, the second of two.
    one, two = kd.ConsistencySampler(1), kd.ConsistencySampler(2)
    check_round_trip_and_edits(model, images, one, two, tmp_path)


def test_it_resumes_mid_epoch_as_the_uninterrupted_run(tmp_path):
    # tests/run/preemption_test.py's run, its SIGTERM at update 12 of 20
    # inside the curriculum's stage 2 of 4: the stage follows the restored
    # optimizer's count.
    schedule = kd.ConsistencySchedule(curriculum_steps=20, curriculum_stages=4)
    assert preemption_test.resumed_difference(tmp_path, schedule) <= 1e-6
