"""The default run's samples, judged as a distribution at the digits' 8x8.

Runs `python scripts/train.py` exactly as a user would (the default digits
configuration, nothing shortened), then scores 250 samples of each kind with
`keras_diffusion.evaluation.digits_quality` (its docstring has the metric): the Frechet
distance in a PCA space of the native 8x8 digits over the floor measured
here (as many real digits against the other half, so real digits score 1),
and the fraction a logistic regression classifies with probability >= 0.8,
as a share of the real digits' (0.89). Measured on the default run with
seeds 0 and 1 at 500 samples a kind (DDIM-50; docs/quality.md), FD/floor and
confident share:

| kind | FD/floor | confident |
|---|---:|---:|
| labels 0-9, guidance 1 | 1.52, 1.36 | 0.87, 0.89 |
| labels 0-9, the grid's guidance (2.0) | 5.51, 5.64 | 1.08, 1.08 |
| `generate(n)` (random classes) | 1.28, 1.28 | 0.91, 0.91 |
| the null class (`labels="unconditional"`) | 6.19, 4.61 | 0.52, 0.47 |

Targets (issue 13, at 500 samples): guidance 1 at most 2; `generate(n)` at
most 3 with at least 0.8 of real's confident share; guided samples at least
85% confident, 85% classified as their label, all ten classes. The null
class trains on 10% of the labels and is far from the data (issue 13's
target of 3 and 0.8 is not met); it and the guided distance get regression
guards about 1.5x the measured distance and 0.75x the measured confident
share.

250 samples a kind halve the sampling time. The floor is then 0.1806 (0.1022
at 500), and a distance over the floor scales with it: a target ratio r at
500 is the same excess distance at 1 + (r - 1) * 0.1022 / 0.1806 at 250
(2 -> 1.57, 3 -> 2.13). Measured on the default run (seed 0,
`KERAS_DIFFUSION_DEFAULT_RUN=/work/obj/digits/vp`) at 500 and at 250, FD/floor
and confident share, and what the mapping predicts at 250 from 500:

| kind | 500 | 250 | 250 predicted |
|---|---:|---:|---:|
| labels 0-9, guidance 1 | 1.57, 0.92 | 0.96, 0.94 | 1.32 |
| labels 0-9, guidance 2.0 | 5.10, 1.10 | 3.03, 1.12 | 3.32 |
| `generate(n)` | 1.33, 0.92 | 1.21, 0.93 | 1.19 |
| the null class | 4.34, 0.54 | 2.70, 0.57 | 2.89 |

Guided samples at 250: 0.99 confident, 0.99 classified as their label, ten
classes.

It is the slowest test (minutes on two cores). CI runs the README's main job
in full in a fresh virtualenv anyway, and points this test at that run
folder with `KERAS_DIFFUSION_DEFAULT_RUN=DIR`, so it judges the very run a
new user gets instead of training a second one. Without that folder the test
trains the default run itself (minutes) and is then marked `slow`: the
README's test command leaves it out and `python -m pytest -m slow` runs it.
CI gives it the folder, and runs it in a pytest process of its own once its
stage 1 has trained that run (.ci/run).
"""

import os
import pathlib
import time

import pytest

NUM_SAMPLES = 250  # a kind; the floor is measured at as many
# Issue 13's targets of 2 and 3 at 500 samples, at 250 (see the docstring).
MAX_CONDITIONAL_FD = 1.57
MAX_GENERATE_FD = 2.13
MIN_GENERATE_CONFIDENT = 0.8  # of the real digits' confident fraction
MIN_GUIDED_CONFIDENT = 0.85
MIN_GUIDED_AGREEMENT = 0.85
# Regression guards at 250 samples: 1.5x the measured 3.03 and 2.70, 0.75x
# the measured 0.57 (see the docstring).
MAX_GUIDED_FD = 4.5
MAX_NULL_FD = 4.0
MIN_NULL_CONFIDENT = 0.43  # of the real digits' confident fraction
TIME_LIMIT_S = 300  # the default run's target; the subprocess gets twice this
GIVEN_RUN = os.environ.get("KERAS_DIFFUSION_DEFAULT_RUN")
# Training the default run here takes minutes: that path is the slow tier.
_SLOW_UNLESS_GIVEN = (lambda test: test) if GIVEN_RUN else pytest.mark.slow


# Samples as a user of the saved model does: jit_compile="auto" as the library
# resolves it (XLA sampling), not graph mode (tests/conftest.py).
@_SLOW_UNLESS_GIVEN
@pytest.mark.heavy
@pytest.mark.xla
def test_default_run_samples_match_the_digits(tmp_path, run):
    pytest.importorskip("sklearn")
    import keras

    import keras_diffusion
    from keras_diffusion.evaluation import digits_quality
    from keras_diffusion.utils import files

    given = GIVEN_RUN
    started = time.time()
    if given:
        folder = pathlib.Path(given)
    else:
        result = run("train", [], tmp_path, timeout=2 * TIME_LIMIT_S)
        assert result.returncode == 0, result.stderr[-3000:]
        folder = tmp_path / "runs" / "digits"
    wall = time.time() - started
    source = f"given, {folder}" if given else "trained here"
    assert (folder / "samples.png").exists()
    config = files.run_config(str(folder))
    # The default configuration, unshortened: the run a user gets.
    preset = keras_diffusion.data.get_preset("digits")
    assert config["dataset"] == "digits", config
    assert config["epochs"] == preset.training["epochs"], config

    model = keras.saving.load_model(folder / "model.keras")
    sampler = keras_diffusion.samplers.get(
        config["sampler"], num_steps=config["sampling_steps"]
    )
    quality = digits_quality.DigitsQuality(
        image_size=config["image_size"], num_samples=NUM_SAMPLES
    )
    scores = digits_quality.judge_model(
        model, config["guidance_scale"], sampler, quality=quality
    )
    print(
        f"\nDefault run ({source}): {wall:.0f} s wall. Floor {quality.floor:.3f} "
        f"({quality.num_samples} real vs real), real confident "
        f"{quality.real_confident:.2f}; guided at {config['guidance_scale']}."
    )
    for kind, score in scores.items():
        print(digits_quality.summary(kind, score))

    conditional, guided = scores["conditional"], scores["guided"]
    generate, null = scores["generate"], scores["null_class"]
    assert conditional["fd_ratio"] <= MAX_CONDITIONAL_FD
    assert guided["confident"] >= MIN_GUIDED_CONFIDENT
    assert guided["agreement"] >= MIN_GUIDED_AGREEMENT
    assert guided["classes"] == 10
    assert guided["fd_ratio"] <= MAX_GUIDED_FD
    assert generate["fd_ratio"] <= MAX_GENERATE_FD
    assert generate["confident_ratio"] >= MIN_GENERATE_CONFIDENT
    assert generate["classes"] == 10
    assert null["fd_ratio"] <= MAX_NULL_FD
    assert null["confident_ratio"] >= MIN_NULL_CONFIDENT
    # The wall time is printed, not asserted: timings on shared machines drift.
    _check_edits(model, config, sampler, quality)


# Editing the default run's digits (held-out half B, which the judge's
# classifier never saw; it labels 97% of them right). Measured on the default
# run (seed 0, DDIM-50, 300 digits): bottom halves filled with the true label
# at the run's guidance (2.0) are classified as it 0.99 of the time (0.92 at
# guidance 1; 0.48 from the null class, the top half alone; 0.66 with the
# bottom half grey); 3s edited with label 8 at guidance 2.0 read as 8 at
# strength 0.4 / 0.6 / 0.8 / 1.0: 0.06 / 0.20 / 0.59 / 0.92.
MIN_FILLED_AGREEMENT = 0.9
MIN_EDITED_TO_EIGHT = 0.4  # at strength 0.8


def _check_edits(model, config, sampler, quality):
    import numpy as np

    images, labels = quality.held_out()
    mask = np.zeros(images.shape[1:3], "float32")
    mask[images.shape[1] // 2 :] = 1.0
    kept, wanted = images[:100], labels[:100]
    filled = model.inpaint(
        kept,
        mask,
        labels=wanted.tolist(),
        guidance_scale=config["guidance_scale"],
        sampler=sampler,
        seed=0,
        verbose=0,
    )
    np.testing.assert_array_equal(filled[:, :8], kept[:, :8])
    agreement = float(np.mean(quality.classify(filled)[0] == wanted))
    threes = images[labels == 3][:100]
    edited = model.img2img(
        threes,
        0.8,
        labels=8,
        guidance_scale=config["guidance_scale"],
        sampler=sampler,
        seed=0,
        verbose=0,
    )
    eights = float(np.mean(quality.classify(edited)[0] == 8))
    print(
        f"Inpainted bottom halves classified as their label: {agreement:.2f} "
        f"(real digits {np.mean(quality.classify(images)[0] == labels):.2f}); "
        f"3s edited toward 8 at strength 0.8: {eights:.2f} read as 8"
    )
    assert agreement >= MIN_FILLED_AGREEMENT
    assert eights >= MIN_EDITED_TO_EIGHT
