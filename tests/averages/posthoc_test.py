"""Post-hoc EMA: snapshots of the power-function profiles and their
reconstruction (EDM2)."""

import keras
import numpy as np
import pytest

from keras_diffusion import DiffusionModel, NoiseSchedule
from keras_diffusion.averages import posthoc
from keras_diffusion.averages.power_ema import PowerFunctionEMA, gamma_of
from keras_diffusion.callbacks.posthoc_snapshots import PosthocSnapshots
from tests.denoisers import conv_denoiser


def _snapshotted_run(folder, sigma_rels, steps=240, every=20):
    """A random walk of 3 weights, tracked by `sigma_rels`, snapshotted every
    `every` updates; returns the directly tracked profiles of the walk."""
    rng = np.random.default_rng(1)
    variable = keras.Variable(np.zeros(3, np.float32))
    tracked = PowerFunctionEMA([variable], sigma_rels)
    direct = PowerFunctionEMA([variable], (0.05, 0.075, 0.1, 0.15))
    walk = np.cumsum(rng.normal(size=(steps, 3)), axis=0).astype(np.float32)
    for t, value in enumerate(walk, start=1):
        variable.assign(value)
        tracked.update([variable])
        direct.update([variable])
        if t % every == 0:
            posthoc.write_snapshot(folder, tracked)
    return direct


def test_a_tracked_width_is_reconstructed_exactly_and_others_closely(tmp_path):
    direct = _snapshotted_run(str(tmp_path), (0.05, 0.1))
    assert posthoc.snapshot_steps(str(tmp_path)) == list(range(20, 241, 20))
    widths = dict(zip((0.05, 0.075, 0.1, 0.15), direct.values(), strict=True))
    for sigma_rel, (expected,) in widths.items():
        (values,), error = posthoc.reconstruct(str(tmp_path), sigma_rel)
        spread = np.abs(expected).max()
        difference = np.abs(values - expected).max() / spread
        print(f"sigma_rel {sigma_rel}: weights' error {error:.2e}, "
              f"max |difference| / max |theta| {difference:.2e}")  # fmt: skip
        if sigma_rel in (0.05, 0.1):  # a tracked profile: its own snapshot
            assert error < 1e-6 and difference < 1e-5
        else:  # between (0.075) and beyond (0.15) the tracked two
            assert difference < 0.01


def test_reconstruction_at_an_earlier_update_uses_the_snapshots_up_to_it(tmp_path):
    _snapshotted_run(str(tmp_path), (0.05, 0.1))
    terms, error = posthoc.coefficients(str(tmp_path), 0.1, at=100)
    assert {t for t, _, _ in terms} == {20, 40, 60, 80, 100} and error < 1e-6
    with pytest.raises(ValueError, match="at=241"):
        posthoc.coefficients(str(tmp_path), 0.1, at=241)
    with pytest.raises(ValueError, match="No post-hoc EMA snapshots"):
        posthoc.coefficients(str(tmp_path / "none"), 0.1)


def test_reconstruction_before_the_first_snapshot_is_refused_by_its_update(tmp_path):
    _snapshotted_run(str(tmp_path), (0.05, 0.1))
    with pytest.raises(ValueError, match=r"first snapshot's, 20, .*Received: at=3"):
        posthoc.coefficients(str(tmp_path), 0.1, at=3)


class _ConstantProfiles:
    """What `write_snapshot` reads of a `PowerFunctionEMA` whose weights
    never changed: every profile equals them at every update."""

    def __init__(self, values, sigma_rels, t):
        self.sigma_rels = sigma_rels
        self.gammas = tuple(gamma_of(s) for s in sigma_rels)
        self._values, self._t = values, t

    def updates(self):
        return self._t

    def values(self):
        return [self._values for _ in self.gammas]


def _timeline(updates, snapshots=16, sigma_rels=(0.05, 0.1)):
    """A run's `(t, gamma)` pairs: `snapshots` over `updates`, as
    `scripts/train.py` spaces them (`PosthocSnapshots`)."""
    every = -(-updates // snapshots)
    steps = sorted({*range(every, updates + 1, every), updates})
    return [(t, gamma_of(s)) for t in steps for s in sigma_rels]


def test_a_constant_weight_is_reconstructed_as_itself_at_every_width(tmp_path):
    # The combination's coefficients sum to 1 (EDM2 divides them by their
    # sum): without it a weight that never changed came back as 0.9916 of
    # itself at 0.01 and 0.9802 at 0.25 on this timeline (2,900 updates).
    constant = [np.full((2, 3), 0.7, np.float32), np.float32([-1.5])]
    for t, _ in _timeline(2900)[::2]:
        posthoc.write_snapshot(
            str(tmp_path), _ConstantProfiles(constant, (0.05, 0.1), t)
        )
    for sigma_rel in [*np.geomspace(0.01, 0.25, 11), 0.27]:
        for at in (None, 1000):
            values, _ = posthoc.reconstruct(str(tmp_path), sigma_rel, at)
            for value, expected in zip(values, constant, strict=True):
                np.testing.assert_allclose(value, expected, rtol=1e-6)


# EDM2's solve, ported from NVlabs/edm2 `training/phema.py`
# (`power_function_correlation`, `solve_posthoc_coefficients`; `p_dot_p` and
# `solve_weights` in the paper's algorithm 2): the inner products of the
# continuous-time profiles (gamma + 1) t^gamma / t_max^(gamma + 1) on
# [0, t_max], solved exactly, then divided by their sum.
def _edm2_p_dot_p(t_a, gamma_a, t_b, gamma_b):
    t_ratio = t_a / t_b
    t_exp = np.where(t_a < t_b, gamma_b, -gamma_a)
    t_max = np.maximum(t_a, t_b)
    num = (gamma_a + 1) * (gamma_b + 1) * t_ratio**t_exp
    den = (gamma_a + gamma_b + 1) * t_max
    return num / den


def _edm2_solve(t_i, gamma_i, t_r, gamma_r):
    rv = lambda x: np.float64(x).reshape(-1, 1)  # noqa: E731
    cv = lambda x: np.float64(x).reshape(1, -1)  # noqa: E731
    a = _edm2_p_dot_p(rv(t_i), rv(gamma_i), cv(t_i), cv(gamma_i))
    b = _edm2_p_dot_p(rv(t_i), rv(gamma_i), cv(t_r), cv(gamma_r))
    x = np.linalg.solve(a, b)
    return (x / np.sum(x, axis=0))[:, 0]


def test_the_coefficients_match_edm2s_solve_on_a_runs_timeline(tmp_path):
    # The digits' default run: 725 updates, 16 snapshots. The two differ
    # only in their inner product (per-update sums here, EDM2's integrals),
    # which tells bins of one update apart: measured, the largest difference
    # is 6.2e-4 of the largest coefficient (at 0.01, where they reach 18.7),
    # 1.9e-4 at 0.25 and below 2e-5 from 0.05 to 0.2. Unnormalised, ours
    # differed by 2% at 0.25 (their sum 0.980); on 58 updates the two
    # differ by up to 9% (docs/quality.md, "Post-hoc EMA").
    timeline = _timeline(725)
    for t, _ in timeline[::2]:
        posthoc.write_snapshot(
            str(tmp_path), _ConstantProfiles([np.zeros(1)], (0.05, 0.1), t)
        )
    t_i, gamma_i = np.array(timeline).T
    for sigma_rel in (0.01, 0.02, 0.05, 0.069, 0.1, 0.15, 0.2, 0.25):
        terms, _ = posthoc.coefficients(str(tmp_path), sigma_rel)
        assert [t for t, _, _ in terms] == list(t_i)  # the same order
        ours = [x for _, _, x in terms]
        theirs = _edm2_solve(t_i, gamma_i, 725, gamma_of(sigma_rel))
        tolerance = 1e-3 * np.abs(theirs).max()
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=tolerance)


def test_a_model_tracks_its_profiles_saves_them_and_snapshots_in_fit(tmp_path):
    images = np.random.default_rng(0).uniform(-1, 1, (16, 8, 8, 1)).astype("float32")
    model = DiffusionModel(
        conv_denoiser(convs=1), NoiseSchedule(100), posthoc_ema=[0.05, 0.1]
    )
    model.compile(optimizer=keras.optimizers.Adam(1e-3), jit_compile=False)
    folder = str(tmp_path / "snapshots")
    (tmp_path / "snapshots").mkdir()
    (tmp_path / "snapshots" / posthoc.snapshot_name(99)).write_bytes(b"")
    snapshots = PosthocSnapshots(folder, every=3, last=8)
    model.fit(images, batch_size=2, epochs=1, verbose=0, callbacks=[snapshots])
    # Every 3 updates and the last; one from an abandoned future removed.
    assert posthoc.snapshot_steps(folder) == [3, 6, 8]
    assert model.power_ema.updates() == 8
    values, _ = posthoc.reconstruct(folder, 0.1)
    for value, tracked in zip(values, model.power_ema.values()[1], strict=True):
        np.testing.assert_allclose(value, tracked, atol=1e-6)
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.posthoc_ema == (0.05, 0.1)
    for a, b in zip(loaded.power_ema.values(), model.power_ema.values(), strict=True):
        np.testing.assert_array_equal(a[0], b[0])
    with pytest.raises(ValueError, match="posthoc_ema"):
        DiffusionModel(conv_denoiser(convs=1), posthoc_ema=0.5)
