"""RePaintSampler against diffusers' RePaintScheduler, its jump schedule, and
the refusals."""

import numpy as np
import pytest
import tensorflow as tf

from keras_diffusion import EDMSchedule, FlowMatchSchedule, NoiseSchedule
from keras_diffusion.samplers import RePaintSampler, loop
from keras_diffusion.samplers.repaint import jump_schedule

SEED = tf.constant([5, 0], tf.int32)
SHAPE = (2, 4, 4, 3)


def _network(x, t):
    """A deterministic, nonlinear stand-in for the noise network."""
    if type(x).__module__.startswith("torch"):
        t = t.float().reshape(-1, 1, 1, 1) if t.ndim else t.float()
        return 0.4 * x + 0.2 * (2 * x + t / 100).sin()
    t = tf.reshape(t, (-1, 1, 1, 1))
    return 0.4 * x + 0.2 * tf.sin(2.0 * x + t / 100.0)


def _arrays():
    rng = np.random.default_rng(3)
    x_T = rng.standard_normal(SHAPE).astype(np.float32)
    images = rng.uniform(-1, 1, SHAPE).astype(np.float32)
    keep = np.zeros((2, 4, 4, 1), np.float32)
    keep[:, :2] = 1.0  # the top half kept
    keep[1, 3, 3] = 1.0
    return x_T, images, keep


def _nchw(a):
    import torch

    return torch.from_numpy(np.ascontiguousarray(a.transpose(0, 3, 1, 2)))


def _diffusers(monkeypatch, num_steps, jump_length, jump_n_sample, eta):
    """RePaintPipeline's loop on RePaintScheduler, our noise injected."""
    import diffusers
    from diffusers.schedulers import scheduling_repaint

    draws = iter(range(10**6))

    def randn_tensor(shape, **kwargs):
        k = next(draws)
        nhwc = (shape[0], *shape[2:], shape[1])
        return _nchw(loop.noise(SEED, k, nhwc).numpy())

    monkeypatch.setattr(scheduling_repaint, "randn_tensor", randn_tensor)
    scheduler = diffusers.RePaintScheduler(num_train_timesteps=100, eta=eta)
    scheduler.set_timesteps(num_steps, jump_length, jump_n_sample)
    x_T, images, keep = _arrays()
    x, original, mask = _nchw(x_T), _nchw(images), _nchw(keep)  # theirs: 1 keeps
    t_last = scheduler.timesteps[0] + 1
    for t in scheduler.timesteps:
        if t < t_last:
            out = _network(x, t)
            x = scheduler.step(out, t, x, original, mask).prev_sample
        else:
            x = scheduler.undo_step(x, t_last)
        t_last = t
    return x.numpy().transpose(0, 2, 3, 1)


@pytest.mark.parametrize(
    "num_steps, jump_length, jump_n_sample, eta",
    [(10, 3, 3, 0.0), (20, 5, 2, 1.0), (7, 10, 1, 0.5)],
)
def test_matches_diffusers_repaint(
    monkeypatch, num_steps, jump_length, jump_n_sample, eta
):
    pytest.importorskip("diffusers")
    pytest.importorskip("torch")
    expected = _diffusers(monkeypatch, num_steps, jump_length, jump_n_sample, eta)
    x_T, images, keep = _arrays()
    sampler = RePaintSampler(num_steps, jump_length, jump_n_sample, eta)
    edit = loop.Edit(tf.constant(images), tf.constant(keep))
    got = sampler.sample(_network, x_T, NoiseSchedule(100), seed=SEED, edit=edit)
    error = float(np.abs(got.numpy() - expected).max())
    print(f"\nRePaint {num_steps}/{jump_length}/{jump_n_sample} eta {eta}: {error:.2e}")
    assert error < 1e-5


def test_runs_on_the_samplers_one_loop(monkeypatch):
    # No loop of its own: one `loop.run`, a row a noise draw, the jumps back
    # rows without a model call between the steps down.
    runs = []

    def run(denoise_fn, x, tables, *args, **kwargs):
        runs.append(tables)
        return original(denoise_fn, x, tables, *args, **kwargs)

    original = loop.run
    monkeypatch.setattr(loop, "run", run)
    x_T, images, keep = _arrays()
    sampler, schedule = RePaintSampler(6, 2, 2, eta=0.5), NoiseSchedule(60)
    edit = loop.Edit(tf.constant(images), tf.constant(keep))
    got = sampler.sample(_network, x_T, schedule, seed=SEED, edit=edit)
    (tables,) = runs
    calls = tables["call"] > 0
    np.testing.assert_array_equal(tables["t"][calls], sampler.timesteps(schedule))
    # What `describe` and a run's sampling cost count: the jumps' calls too.
    assert sampler.evaluations(sampler.steps(schedule)) == calls.sum() == 10
    assert (~calls).sum() == 4 * 10  # two jumps of two steps of 10 timesteps
    np.testing.assert_array_equal(got[:, :2], images[:, :2])


def test_jump_schedule_is_repaints():
    # Figure 9 of the paper: down one at a time, back up every jump_length.
    assert jump_schedule(6, 2, 2).tolist() == [5, 4, 3, 2, 3, 4, 3, 2, 1, 0, 1, 2, 1, 0]
    assert jump_schedule(4, 10, 10).tolist() == [3, 2, 1, 0]  # no room to jump
    rows = RePaintSampler(6, 2, 2).timesteps(NoiseSchedule(60))
    assert rows.tolist() == [50, 40, 30, 20, 30, 20, 10, 0, 10, 0]


@pytest.mark.parametrize("schedule", [EDMSchedule(), FlowMatchSchedule()])
def test_runs_on_a_noise_schedule_only(schedule):
    with pytest.raises(ValueError, match="\\('repaint'\\) does not run"):
        RePaintSampler(5).sample(_network, _arrays()[0], schedule)


def test_a_noised_start_is_refused():
    x_T, images, _ = _arrays()
    edit = loop.Edit(tf.constant(images), None, begin_step=2)
    with pytest.raises(ValueError, match="begin_step=2"):
        RePaintSampler(5).sample(_network, x_T, NoiseSchedule(100), edit=edit)


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"jump_length": 0}, "jump_length=0"),
        ({"jump_n_sample": 0}, "jump_n_sample=0"),
        ({"eta": 1.5}, "eta=1.5"),
        ({"clip_sample": "yes"}, "clip_sample='yes'"),
    ],
)
def test_bad_options_are_refused(kwargs, fragment):
    with pytest.raises((TypeError, ValueError), match=fragment):
        RePaintSampler(5, **kwargs)


def test_zero_terminal_snr_needs_v_prediction():
    # With T steps the first is at t = T - 1, where alphas_cumprod is 0.
    schedule = NoiseSchedule(20, "cosine", rescale_zero_terminal_snr=True)
    with pytest.raises(ValueError, match="prediction_type='epsilon'"):
        RePaintSampler(20, 3, 2).sample(_network, _arrays()[0], schedule)
    x = RePaintSampler(20, 3, 2).sample(
        _network, _arrays()[0], schedule, prediction_type="v_prediction", seed=SEED
    )
    assert np.isfinite(x.numpy()).all()
