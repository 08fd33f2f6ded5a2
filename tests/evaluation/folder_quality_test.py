import numpy as np
import pytest

from keras_diffusion import DiffusionModel, NoiseSchedule
from keras_diffusion.data import from_directory
from keras_diffusion.data.directory import load_directory_arrays
from keras_diffusion.evaluation import folder_quality
from keras_diffusion.samplers import DDIMSampler
from tests import shape_folders
from tests.denoisers import tiny_unet


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("shapes")
    heldout = shape_folders.write_shapes(root / "heldout", 300, seed=0)
    fresh = [shape_folders.write_shapes(root / f"fresh{s}", 150, s) for s in (1, 2)]
    return heldout, fresh


@pytest.fixture(scope="module")
def quality(folders):
    return folder_quality.FolderQuality(folders[0], 16)


def fresh_images(folder):
    """Real images the quality has not seen, decoded as it decodes its own."""
    images = load_directory_arrays(folder, 16)[0]
    return folder_quality.to_unit_range(images)


def test_real_images_score_about_one(quality, folders):
    assert quality.num_images == 300 and quality.num_samples == 150
    assert quality.num_components == 20
    assert quality.floor > 0
    for folder in folders[1]:
        score = quality.score(fresh_images(folder))
        assert 0.5 < score["fd_ratio"] < 2.0, score
        assert score["floor"] == quality.floor
        np.testing.assert_allclose(score["fd"] / quality.floor, score["fd_ratio"])
        assert 0.8 < score["mean_std"] / score["real_mean_std"] < 1.25
        assert 0.8 < score["roughness"] / score["real_roughness"] < 1.25


def test_noise_and_the_blurred_mean_score_far_off(quality, folders):
    real = fresh_images(folders[1][0])
    noise = np.random.default_rng(0).uniform(-1, 1, real.shape)
    mean = np.broadcast_to(real.mean(0), real.shape)
    noise_score = quality.score(noise)
    mean_score = quality.score(mean)
    assert noise_score["fd_ratio"] > 20, noise_score
    assert noise_score["roughness"] > 5 * noise_score["real_roughness"]
    assert mean_score["fd_ratio"] > 5, mean_score
    assert mean_score["mean_std"] == pytest.approx(0.0, abs=1e-6)


def test_the_folder_is_read_as_the_training_pipeline_reads_it(quality, folders):
    # The same decode, compositing (RGBA over white) and scaling to [-1, 1].
    dataset = from_directory(folders[0], 64, 16, shuffle=False)
    pipeline = np.concatenate([np.asarray(batch) for batch in dataset])
    ours = fresh_images(folders[0])
    np.testing.assert_array_equal(ours, pipeline)
    # Every fourth image has a transparent canvas over a random colour: it
    # shows as much white as the others.
    white = np.all(ours == 1.0, axis=-1).mean(axis=(1, 2))
    assert white[::4].mean() > 0.3
    assert abs(white[::4].mean() - white.mean()) < 0.1


def test_deterministic_for_a_seed(folders, quality):
    again = folder_quality.FolderQuality(folders[0], 16)
    other = folder_quality.FolderQuality(folders[0], 16, seed=1)
    images = fresh_images(folders[1][0])
    assert again.floor == quality.floor
    assert again.score(images) == quality.score(images)
    assert other.floor != quality.floor


def test_score_refuses_the_wrong_count_shape_or_range(quality, folders):
    real = fresh_images(folders[1][0])
    with pytest.raises(ValueError, match="num_samples=150.*Received: 10 images"):
        quality.score(real[:10])
    with pytest.raises(ValueError, match=r"images.shape=\(150, 8, 8, 3\)"):
        quality.score(real[:, :8, :8])
    with pytest.raises(ValueError, match=r"\[0, 255\]"):
        quality.score(np.round((real + 1) * 127.5))


def test_bad_arguments_name_the_value(folders, tmp_path):
    with pytest.raises(ValueError, match="image_size=12"):
        folder_quality.FolderQuality(folders[0], 12)
    with pytest.raises(ValueError, match="num_samples=151"):
        folder_quality.FolderQuality(folders[0], 16, num_samples=151)
    with pytest.raises(ValueError, match="no_such"):
        folder_quality.FolderQuality(tmp_path / "no_such", 16)
    shape_folders.write_shapes(tmp_path / "three", 3, seed=0)
    with pytest.raises(ValueError, match="at least 4 images"):
        folder_quality.FolderQuality(tmp_path / "three", 16)


def test_judge_model_scores_an_untrained_model_as_far_off(quality, folders):
    model = DiffusionModel(tiny_unet((16, 16, 3)), NoiseSchedule(50, "cosine"), seed=0)
    sampler = DDIMSampler(num_steps=2)
    score = folder_quality.judge_model(model, quality=quality, sampler=sampler)
    assert score["num_samples"] == 150 and score["floor"] == quality.floor
    assert score["fd_ratio"] > 3, score
    again = folder_quality.judge_model(model, folders[0], sampler=sampler)
    assert again == score  # the same seed, the same split
    small = DiffusionModel(tiny_unet((8, 8, 3)))
    with pytest.raises(ValueError, match=r"\(8, 8, 3\)"):
        folder_quality.judge_model(small, quality=quality)
    with pytest.raises(ValueError, match="exactly one of"):
        folder_quality.judge_model(model)
    # A folder's options with a judge made already: not silently dropped.
    with pytest.raises(ValueError, match="num_components"):
        folder_quality.judge_model(model, quality=quality, num_components=3)
