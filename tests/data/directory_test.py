import warnings

import numpy as np
import pytest
from PIL import Image

from keras_diffusion.data import from_directory


def _save(path, size, value, fmt=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    array = np.full((size[1], size[0], 3), value, np.uint8)
    Image.fromarray(array).save(path, format=fmt)


def _all_images(dataset):
    return np.concatenate([batch.numpy() for batch in dataset])


def test_nested_folders_mixed_sizes_and_formats(tmp_path):
    _save(tmp_path / "a.png", (10, 12), 255)
    _save(tmp_path / "sub" / "b.JPG", (31, 7), 255)
    _save(tmp_path / "sub" / "deeper" / "c.bmp", (5, 5), 255)
    _save(tmp_path / "sub" / "deeper" / "d.gif", (40, 40), 255)
    _save(tmp_path / "sub" / "e.jpeg", (16, 16), 255)
    (tmp_path / "notes.txt").write_text("not an image")
    dataset = from_directory(
        tmp_path, image_size=16, batch_size=4, seed=0, resize="stretch"
    )
    assert dataset.class_names is None
    assert len(dataset.file_paths) == 5
    batches = list(dataset)
    assert [b.shape for b in batches] == [(4, 16, 16, 3), (1, 16, 16, 3)]
    images = _all_images(batches)
    assert images.dtype == np.float32
    # White everywhere; JPEG may round 255 down a little.
    assert images.max() <= 1.0 and images.min() > 0.95


def test_class_subfolders_give_sorted_labels(tmp_path):
    for i in range(3):
        _save(tmp_path / "dog" / "nested" / f"{i}.jpg", (20, 9), 0)
        _save(tmp_path / "cat" / f"{i}.png", (8, 8), 255)
    _save(tmp_path / "cat" / "extra.png", (8, 8), 255)
    _save(tmp_path / "loose.png", (8, 8), 128)  # ignored: not in a class folder
    dataset = from_directory(
        tmp_path, 32, image_size=(8, 6), channels=1, class_subfolders=True, seed=0
    )
    assert dataset.class_names == ["cat", "dog"]
    ((images, labels),) = list(dataset)
    assert images.shape == (7, 8, 6, 1)
    assert sorted(labels.numpy().tolist()) == [0, 0, 0, 0, 1, 1, 1]
    means = images.numpy().mean(axis=(1, 2, 3))
    np.testing.assert_allclose(means[labels.numpy() == 0], 1.0, atol=1e-5)
    np.testing.assert_allclose(means[labels.numpy() == 1], -1.0, atol=0.05)


def test_resize_modes_reach_the_pipeline(tmp_path):
    array = np.zeros((8, 24, 3), np.uint8)
    array[:, :8] = array[:, 16:] = 255
    Image.fromarray(array).save(tmp_path / "wide.png")
    cropped = _all_images(from_directory(tmp_path, 4, 8, resize="crop"))
    np.testing.assert_allclose(cropped, -1.0, atol=1e-5)
    stretched = _all_images(from_directory(tmp_path, 4, 8, resize="stretch"))
    assert stretched.max() > 0.9
    padded = _all_images(
        from_directory(tmp_path, 4, 24, resize="pad", background="0,0,0")
    )
    np.testing.assert_array_equal(padded[0, :8], -1.0)
    np.testing.assert_array_equal(padded[0, 8:16, :4], 1.0)


def test_transparency_becomes_the_background_in_the_batches(tmp_path):
    sprite = np.zeros((16, 16, 4), np.uint8)
    sprite[..., :3] = (13, 250, 90)  # stored under alpha 0
    sprite[4:12, 4:12] = (0, 0, 0, 255)
    Image.fromarray(sprite, "RGBA").save(tmp_path / "rgba.png")
    palette = Image.fromarray(sprite[..., 3] // 255, "P")
    palette.putpalette([13, 250, 90, 0, 0, 0] + [0] * 762)
    palette.save(tmp_path / "palette.png", transparency=0)
    images = _all_images(from_directory(tmp_path, 4, 16, shuffle=False))
    assert images.shape == (2, 16, 16, 3)
    for image in images:
        np.testing.assert_array_equal(image[:2], 1.0)  # white, exactly
        np.testing.assert_array_equal(image[6:10, 6:10], -1.0)


def test_unreadable_files_are_skipped_with_a_count(tmp_path):
    for i in range(3):
        _save(tmp_path / f"ok{i}.png", (6, 6), 255)
    (tmp_path / "garbage.png").write_bytes(b"this is not a png at all")
    (tmp_path / "empty.jpg").write_bytes(b"")
    png = (tmp_path / "ok0.png").read_bytes()
    (tmp_path / "truncated.png").write_bytes(png[: len(png) // 2])  # header intact
    (tmp_path / "notes.txt").write_text("ignored, not counted")
    (tmp_path / ".hidden.png").write_bytes(b"skipped silently")
    with pytest.warns(
        UserWarning, match=r"Skipped 3 of 6 image files.*empty\.jpg.*garbage.*truncated"
    ):
        dataset = from_directory(tmp_path, 4, image_size=6)
    assert len(_all_images(dataset)) == 3
    assert dataset.num_examples == 3
    assert [p.rsplit("/", 1)[-1] for p in dataset.file_paths] == [
        "ok0.png",
        "ok1.png",
        "ok2.png",
    ]


def test_upper_case_extensions_and_webp(tmp_path):
    # A grey of its own in each file: the batch shows that each one was decoded.
    greys = {"A.PNG": 0, "B.JPEG": 64, "C.WebP": 160, "D.Gif": 255}
    for name, grey in greys.items():
        fmt = {"JPEG": "JPEG", "WebP": "WEBP", "Gif": "GIF"}.get(name[2:])
        _save(tmp_path / name, (8, 8), grey, fmt=fmt)
    dataset = from_directory(tmp_path, 4, image_size=8, shuffle=False)
    assert [p.rsplit("/", 1)[-1] for p in dataset.file_paths] == list(greys)
    images = _all_images(dataset)
    assert images.shape == (4, 8, 8, 3)
    expected = np.array(list(greys.values()), np.float32) / 127.5 - 1.0
    # JPEG and WebP are lossy: a grey may move by a few levels of 255.
    np.testing.assert_allclose(images.mean(axis=(1, 2, 3)), expected, atol=0.05)
    np.testing.assert_allclose(images.std(axis=(1, 2, 3)), 0.0, atol=0.05)


def test_no_decodable_image_names_the_folder_and_counts(tmp_path):
    (tmp_path / "a.txt").write_text("x")
    (tmp_path / "b.txt").write_text("x")
    (tmp_path / "c.png").write_bytes(b"not a png")
    (tmp_path / "d.svg").write_text("<svg/>")
    with pytest.raises(ValueError) as info:
        from_directory(tmp_path, 4, image_size=8)
    message = str(info.value)
    assert "\n" not in message and repr(str(tmp_path)) in message
    assert "2 .txt (not an image type)" in message
    assert "1 .png (1 unreadable)" in message
    assert "1 .svg (not an image type)" in message


def test_a_folder_of_small_images_warns_with_the_sizes(tmp_path):
    _save(tmp_path / "a.png", (16, 16), 0)
    _save(tmp_path / "b.png", (16, 16), 0)
    _save(tmp_path / "c.png", (20, 12), 0)
    with pytest.warns(UserWarning, match=r"smaller than.*16x16 \(2\), 20x12 \(1\)"):
        from_directory(tmp_path, 4, image_size=32)
    _save(tmp_path / "big.png", (40, 40), 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from_directory(tmp_path, 4, image_size=32)


def test_bad_folders_name_the_folder(tmp_path):
    for case in ("missing", "empty", "no_images", "all_bad"):
        folder = tmp_path / case
        if case != "missing":
            folder.mkdir()
        if case == "no_images":
            (folder / "readme.txt").write_text("hello")
        if case == "all_bad":
            (folder / "x.png").write_bytes(b"nope")
        with pytest.raises(ValueError, match="`folder`") as info:
            from_directory(folder, 4, image_size=8)
        assert repr(str(folder)) in str(info.value)


def test_bad_arguments(tmp_path):
    _save(tmp_path / "a.png", (4, 4), 0)
    for kwargs, message in [
        ({"image_size": None}, "`image_size`.*image_size=None"),
        ({"image_size": (4, 0)}, "`image_size`.*image_size=.4, 0."),
        ({"channels": 4}, "`channels`.*channels=4"),
        ({"background": "pink"}, "`background`.*background='pink'"),
        ({"resize": "fit"}, "`resize`.*resize='fit'"),
        ({"batch_size": 0}, "`batch_size`.*batch_size=0"),
    ]:
        with pytest.raises(ValueError, match=message):
            from_directory(tmp_path, **{"batch_size": 4, "image_size": 8, **kwargs})
