"""The mean-flow process: its target, its sampler's jumps, a model that trains
with two time inputs, samples in one call, round-trips and resumes."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf
from keras import ops

import keras_diffusion as kd
from keras_diffusion.run import TrainConfig
from keras_diffusion.schedules.process import TrainingStep
from tests.denoisers import tiny_unet
from tests.run import preemption_test
from tests.schedules.few_calls import check_round_trip_and_edits, fit_tiny

T = 2.0
CENTRE = 0.3


def _step(network, seed=(3, 4)):
    # Every example the same image: the data a point mass at CENTRE.
    x0 = tf.fill((6, 8, 8, 1), CENTRE)
    seeds = tuple(tf.constant(s, tf.int32) for s in ((seed[0], 0), (seed[1], 0)))
    return TrainingStep(x0, None, seeds, False, lambda inputs, _: network(*inputs))


def _exact(z, time):
    """The mean velocity of a point mass at CENTRE: every path is straight,
    so u(z, r, t) = v(z, t) = (z - CENTRE) / t for every r."""
    return (z - CENTRE) / ops.reshape(time[:, 0] / T, (-1, 1, 1, 1))


def test_the_exact_mean_flow_is_the_loss_minimum_at_every_interval():
    # The target v - (t - r) du/dt holds the forward-mode derivative along
    # the path (dz/dt = v, d/dt of the pair (t T, (t - r) T) = (T, T)): for
    # the exact u it is 0 and the loss vanishes; a derivative without the
    # time's tangent, or with the interval's time held fixed, would not.
    schedule = kd.MeanFlowSchedule(interval_share=1.0, adaptive_power=0.0)
    assert float(schedule.training_loss(_step(_exact))) < 1e-9

    def drifts(z, time):  # exact at r = t only: the loss sees the interval
        return _exact(z, time) + 0.1 * ops.reshape(time[:, 1], (-1, 1, 1, 1))

    assert float(schedule.training_loss(_step(drifts))) > 1e-3
    at_the_end = kd.MeanFlowSchedule(interval_share=0.0, adaptive_power=0.0)
    assert float(at_the_end.training_loss(_step(drifts))) < 1e-9


def test_the_interval_draw_keeps_its_share_and_its_order():
    schedule = kd.MeanFlowSchedule(interval_share=0.25)
    t, r = schedule.draw_interval(4096, tf.constant([1, 2], "int32"))
    t, r = np.asarray(t), np.asarray(r)
    assert np.all(r <= t) and np.all((0.0 < r) & (t < 1.0))
    assert np.mean(r < t) == pytest.approx(0.25, abs=0.03)
    time = np.asarray(schedule.time_input(t, r))
    want = np.stack([t * T, (t - r) * T, np.zeros_like(t)], 1)  # w = 1: w - 1
    np.testing.assert_allclose(time, want, rtol=1e-6)
    two = kd.MeanFlowSchedule(guidance_max=1.0)  # no guidance column
    assert two.time_inputs == 2 and np.asarray(two.time_input(t, r)).shape[1] == 2


def test_the_adaptive_weight_divides_each_example_by_its_error():
    # ||e||^2 / sg(||e||^2 + c)^p: with p = 1 each example's loss is near 1
    # where its error is large, whatever its size.
    def far(z, time):
        return _exact(z, time) + 5.0

    plain = kd.MeanFlowSchedule(adaptive_power=0.0).training_loss(_step(far))
    adaptive = kd.MeanFlowSchedule(adaptive_power=1.0).training_loss(_step(far))
    assert float(plain) == pytest.approx(25.0, rel=1e-4)
    assert float(adaptive) == pytest.approx(25.0 / (25.0 + 1e-3), rel=1e-5)


def _labelled_step(network, null_offset=0.0):
    """A step of 6 labelled examples, the last two dropped to the null
    (label 3), whose network answers `network(z, time)` and, on the null
    labels, that plus `null_offset`; records each call's time and labels."""
    calls = []

    def call(inputs, _):
        z, time, labels = inputs
        calls.append((np.asarray(time), np.asarray(labels)))
        null = ops.reshape(ops.cast(labels == 3, "float32"), (-1, 1, 1, 1))
        return network(z, time) + null_offset * null

    dropped = tf.constant([False] * 4 + [True] * 2)
    labels = tf.constant([0, 1, 2, 0, 3, 3], tf.int32)
    step = dataclasses.replace(
        _step(lambda *a: None),
        labels=labels,
        call_denoiser=call,
        unconditional=lambda: (tf.fill([6], 3), dropped),
    )
    return step, calls


def test_guidance_as_a_condition_trains_on_the_guided_velocity():
    # The path moves at v~ = w v + (1 - w) u(z, t, t | null), the network's
    # own unconditional velocity: for the point mass an exact null branch
    # gives v~ = v, and the exact mean flow is the loss's zero at every w.
    schedule = kd.MeanFlowSchedule(interval_share=1.0, adaptive_power=0.0)
    step, calls = _labelled_step(_exact)
    assert float(schedule.training_loss(step)) < 1e-9
    (null_time, null_labels), (time, labels) = calls
    # The null branch: the guided half of the batch (guidance_share 0.5),
    # the null labels, r = t, w = 1; then the whole batch, each example's
    # w - 1 in [0, guidance_max - 1] in that half, 0 in the rest and where
    # dropped.
    np.testing.assert_array_equal(null_labels, [3] * 3)
    np.testing.assert_array_equal(null_time[:, 1:], 0.0)
    np.testing.assert_array_equal(labels, [0, 1, 2, 0, 3, 3])
    w = time[:, 2] + 1.0
    assert np.all((1.0 < w[:3]) & (w[:3] < 2.0)) and np.all(w[3:] == 1.0)
    # An unconditional branch off by 1 moves the target by (1 - w): the
    # conditional examples' loss sees it, and only theirs.
    step, _ = _labelled_step(_exact, null_offset=1.0)
    assert float(schedule.training_loss(step)) > 1e-2
    # Without guidance as a condition the null branch is never called.
    step, calls = _labelled_step(_exact, null_offset=1.0)
    plain = kd.MeanFlowSchedule(
        interval_share=1.0, adaptive_power=0.0, guidance_max=1.0
    )
    plain.training_loss(step)
    assert len(calls) == 1 and calls[0][0].shape == (6, 2)


@pytest.mark.parametrize("guidance_max, calls", [(3.0, [(2, 3)]), (1.0, [(4, 2)])])
def test_a_guided_image_is_one_call_where_guidance_is_a_condition(guidance_max, calls):
    # Trained as a condition, the scale is the network's third time column
    # and a guided image one call of the batch; otherwise classifier-free
    # guidance calls the conditional and null branches (a doubled batch).
    schedule = kd.MeanFlowSchedule(guidance_max=guidance_max)
    net = tiny_unet(num_classes=3, widths=(4,), time_inputs=schedule.time_inputs)
    model = kd.DiffusionModel(net, schedule, num_classes=3, seed=0)
    seen, denoise = [], model.denoise

    def recorded(x_t, t, *args, **kwargs):
        seen.append((x_t.shape[0], t.shape[1], np.asarray(t)))
        return denoise(x_t, t, *args, **kwargs)

    model.denoise = recorded
    tf.config.run_functions_eagerly(True)
    try:
        model.generate(2, labels=[0, 1], guidance_scale=2.5, seed=0, verbose=0)
    finally:
        tf.config.run_functions_eagerly(False)
    assert [s[:2] for s in seen] == calls
    if guidance_max > 1.0:
        np.testing.assert_allclose(seen[0][2], [[T, T, 1.5]] * 2)


def test_the_sampler_jumps_down_each_interval_in_one_call():
    schedule = kd.MeanFlowSchedule()
    x_T = tf.constant(np.random.default_rng(2).normal(size=(3, 4, 4, 1)), "float32")
    seen = []

    def denoise(x, t):  # u = t / T at each call: the level it starts from
        seen.append(np.asarray(t[0]).tolist())
        return tf.zeros_like(x) + ops.reshape(t[:, 0] / T, (-1, 1, 1, 1))

    one = kd.MeanFlowSampler().sample(denoise, x_T, schedule)
    assert seen == [[2.0, 2.0]]  # (t T, (t - r) T): from 1 down to 0
    np.testing.assert_allclose(one, x_T - 1.0, atol=1e-6)
    seen.clear()
    two = kd.MeanFlowSampler(2, levels=(1.0, 0.4)).sample(denoise, x_T, schedule)
    np.testing.assert_allclose(seen, [[2.0, 1.2], [0.8, 0.8]], rtol=1e-6)
    # z_0.4 = z_1 - 0.6 u(1), then z_0 = z_0.4 - 0.4 u(0.4): no fresh noise.
    np.testing.assert_allclose(two, x_T - 0.6 * 1.0 - 0.4 * 0.4, atol=1e-6)


def test_each_sampler_and_network_fits_its_process_alone():
    mean, flow = kd.MeanFlowSchedule(), kd.FlowMatchSchedule()
    assert mean.default_sampler() == ("meanflow", 1)
    with pytest.raises(ValueError, match="the samplers that do: meanflow"):
        kd.EulerSampler(4).validate(mean)
    with pytest.raises(ValueError, match="does not run on"):
        kd.MeanFlowSampler().validate(flow)
    with pytest.raises(ValueError, match=r"time_inputs=3.*time_inputs=1"):
        kd.DiffusionModel(tiny_unet(), mean)
    with pytest.raises(ValueError, match="interval_share=1.5"):
        kd.MeanFlowSchedule(interval_share=1.5)
    with pytest.raises(ValueError, match="adaptive_power=-1"):
        kd.MeanFlowSchedule(adaptive_power=-1)
    with pytest.raises(ValueError, match="guidance_max=0.5"):
        kd.MeanFlowSchedule(guidance_max=0.5)


def test_one_time_input_leaves_the_unet_as_it_was():
    # The second time input costs the other processes nothing: a config
    # without the key (an earlier file's) builds the same U-Net, whose
    # outputs match weight for weight.
    net = tiny_unet(num_classes=3)
    config = net.get_config()
    assert config.pop("time_inputs") == 1
    before = kd.UNet.from_config(config)
    assert [w.shape for w in before.weights] == [w.shape for w in net.weights]
    before.set_weights(net.get_weights())
    x = np.random.default_rng(0).normal(size=(2, 8, 8, 1)).astype("float32")
    inputs = [x, np.array([3.0, 700.0], "float32"), np.array([0, 2])]
    np.testing.assert_array_equal(before(inputs), net(inputs))
    pair = tiny_unet(time_inputs=2)
    assert pair.inputs[1].shape == (None, 2)
    # Its time MLP takes both columns' features: the first layer is wider.
    assert pair.count_params() > tiny_unet().count_params()


def test_a_model_trains_and_samples_in_one_call_after_a_round_trip(tmp_path):
    model, images = fit_tiny(kd.MeanFlowSchedule(), False, 2, time_inputs=3)
    # Guided in two jumps; img2img in one, the second of two from half the
    # noise.
    two = kd.MeanFlowSampler(2)
    loaded = check_round_trip_and_edits(model, images, two, two, tmp_path)
    assert loaded.denoiser.inputs[1].shape == (None, 3)
    with pytest.raises(ValueError, match="meanflow"):
        kd.to_diffusers(loaded, str(tmp_path / "out"))


def test_it_resumes_mid_epoch_as_the_uninterrupted_run(tmp_path):
    # tests/run/preemption_test.py's run, its SIGTERM in the second epoch.
    assert preemption_test.resumed_difference(tmp_path, kd.MeanFlowSchedule()) <= 1e-6


def test_a_run_takes_the_process_s_own_defaults_and_refuses_remat():
    from keras_diffusion.run import flags
    from keras_diffusion.schedules.registry import declared_settings

    config = TrainConfig(process="meanflow").resolve()
    assert (config.sampler, config.sampling_steps, config.timesteps) == (
        "meanflow",
        1,
        2,
    )
    assert config.guidance_scale == 1.25  # the process's, on a guided grid
    # A setting it shares with flow matching, at its own default there and
    # flow matching's elsewhere; the flag's table shows both.
    assert (config.logit_mean, config.logit_std) == (-1.0, 2.0)
    assert TrainConfig(process="flow").resolve().logit_mean == 0.0
    setting, _ = declared_settings()["logit_mean"]
    assert flags.shown_default(setting) == "0.0 (meanflow: -1.0)"
    assert TrainConfig(process="meanflow", logit_mean=0.5).resolve().logit_mean == 0.5
    with pytest.raises(ValueError, match=r"`remat` \(--remat\).*'meanflow'"):
        TrainConfig(process="meanflow", remat=True).resolve()


def test_files_saved_before_guidance_was_a_condition_keep_two_time_inputs():
    # A config.json or `.keras` file of the release before `guidance_max`
    # trained without it: its run resumes, and its model loads, as it was.
    from keras_diffusion.run import config as train_config

    config = TrainConfig(process="meanflow").resolve()
    assert config.guidance_max == 2.0
    sections = config.sections()
    del sections["process"]["guidance_max"]
    assert train_config.upgrade(sections)["process"]["guidance_max"] == 1.0
    saved = kd.MeanFlowSchedule().get_config()
    del saved["guidance_max"]
    assert kd.MeanFlowSchedule.from_config(saved).time_inputs == 2
