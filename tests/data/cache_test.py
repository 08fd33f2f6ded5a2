import errno
import json
import os
import warnings

import numpy as np
import pytest
from PIL import Image

from keras_diffusion.data import cache_build, decode, from_directory


def _folder(root, count=11, size=12, classes=False):
    rng = np.random.default_rng(0)
    for i in range(count):
        sub = root / (f"c{i % 2}" if classes else "")
        sub.mkdir(parents=True, exist_ok=True)
        shape = (size, size + i % 3, 4)  # RGBA, some not square
        Image.fromarray(rng.integers(0, 256, shape, np.uint8)).save(sub / f"{i}.png")
    return root


def _batches(dataset):
    out = []
    for batch in dataset:
        if isinstance(batch, tuple):
            out.append(tuple(b.numpy() for b in batch))
        else:
            out.append(batch.numpy())
    return out


def _equal(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        if isinstance(x, tuple):
            for u, v in zip(x, y, strict=True):
                np.testing.assert_array_equal(u, v)
        else:
            np.testing.assert_array_equal(x, y)


KW = {"batch_size": 4, "image_size": 8, "seed": 3, "flip": True}


@pytest.mark.parametrize("classes", [False, True])
def test_cache_gives_the_same_batches_as_decoding(tmp_path, classes):
    folder = _folder(tmp_path / "images", classes=classes)
    plain = from_directory(folder, class_subfolders=classes, **KW)
    built = from_directory(folder, class_subfolders=classes, cache=tmp_path / "c", **KW)
    hit = from_directory(folder, class_subfolders=classes, cache=tmp_path / "c", **KW)
    for dataset in (plain, built, hit):  # two epochs: the reshuffle matches too
        dataset.epochs = _batches(dataset) + _batches(dataset)
    _equal(plain.epochs, built.epochs)
    _equal(plain.epochs, hit.epochs)
    assert hit.file_paths == plain.file_paths and hit.num_examples == 11
    assert hit.class_names == plain.class_names
    assert isinstance(hit.decode_cache.images, np.memmap)


def test_cache_reads_no_file_on_a_hit(tmp_path, monkeypatch):
    folder = _folder(tmp_path / "images")
    from_directory(folder, cache=tmp_path / "c", **KW)
    monkeypatch.setattr(
        "keras_diffusion.data.decode.load_image",
        lambda *a, **k: pytest.fail("decoded on a cache hit"),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from_directory(folder, cache=tmp_path / "c", **KW)


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"image_size": 6}, "image_size [8, 8] -> [6, 6]"),
        ({"channels": 1}, "channels 3 -> 1"),
        ({"background": "black"}, "background"),
        ({"resize": "pad"}, "resize 'crop' -> 'pad'"),
        ("touch", "the files changed"),
        ("add", "the files changed (11 -> 12"),
        ("remove", "the files changed (11 -> 10"),
        ("version", "format version 0 -> 1"),
    ],
)
def test_any_dependency_change_rebuilds_and_says_so(tmp_path, change, expected):
    folder = _folder(tmp_path / "images")
    kwargs = dict(KW, cache=tmp_path / "c")
    from_directory(folder, **kwargs)
    if change == "touch":
        os.utime(folder / "3.png", ns=(1, 1))
    elif change == "add":
        Image.new("RGB", (9, 9)).save(folder / "new.png")
    elif change == "remove":
        os.remove(folder / "3.png")
    elif change == "version":
        path = tmp_path / "c" / cache_build.MANIFEST
        manifest = json.loads(path.read_text())
        manifest["format_version"] = 0
        path.write_text(json.dumps(manifest))
    else:
        kwargs.update(change)
    with pytest.warns(UserWarning, match="Rebuilding the decode cache") as record:
        rebuilt = from_directory(folder, **kwargs)
    assert expected in str(record[0].message)
    kwargs.pop("cache")
    _equal(_batches(from_directory(folder, **kwargs)), _batches(rebuilt))


@pytest.mark.parametrize("damage", ["truncate", "manifest", "no_manifest"])
def test_a_damaged_cache_is_rebuilt_not_read(tmp_path, damage):
    folder = _folder(tmp_path / "images")
    plain = _batches(from_directory(folder, **KW))
    from_directory(folder, cache=tmp_path / "c", **KW)
    if damage == "truncate":
        with open(tmp_path / "c" / cache_build.IMAGES, "r+b") as f:
            f.truncate(200)
    elif damage == "manifest":
        (tmp_path / "c" / cache_build.MANIFEST).write_text("{not json")
    else:
        os.remove(tmp_path / "c" / cache_build.MANIFEST)
    with pytest.warns(UserWarning, match="Rebuilding the decode cache"):
        rebuilt = from_directory(folder, cache=tmp_path / "c", **KW)
    _equal(plain, _batches(rebuilt))


def test_an_interrupted_build_resumes(tmp_path, monkeypatch, capsys):
    folder = _folder(tmp_path / "images", count=7)
    monkeypatch.setattr(cache_build, "_CHUNK", 3)
    real = cache_build.write_json

    def dies_after_first_chunk(path, value):
        real(path, value)
        if path.endswith(cache_build.PROGRESS) and value["done"] == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(cache_build, "write_json", dies_after_first_chunk)
    with pytest.raises(KeyboardInterrupt):
        from_directory(folder, cache=tmp_path / "c", **KW)
    monkeypatch.setattr(cache_build, "write_json", real)
    assert not (tmp_path / "c" / cache_build.MANIFEST).exists()
    decoded = []
    original = decode.load_image

    def counting(path, **kwargs):
        decoded.append(os.path.basename(path))
        return original(path, **kwargs)

    monkeypatch.setattr("keras_diffusion.data.decode.load_image", counting)
    resumed = _batches(from_directory(folder, cache=tmp_path / "c", **KW))
    assert "Resuming the decode cache build" in capsys.readouterr().out
    assert len(decoded) == 4  # the 3 done before the interruption are kept
    _equal(_batches(from_directory(folder, **KW)), resumed)


def test_an_unwritable_cache_folder_is_a_value_error(tmp_path):
    folder = _folder(tmp_path / "images", count=2)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ValueError, match=r"Argument `cache` must be a folder.*cache="):
        from_directory(folder, cache=blocker / "c", **KW)
    with pytest.raises(TypeError, match="cache=3"):
        from_directory(folder, cache=3, **KW)


def test_a_full_disk_removes_the_partial_cache(tmp_path, monkeypatch):
    folder = _folder(tmp_path / "images", count=3)

    def full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cache_build.os, "pwrite", full)
    with pytest.raises(OSError, match="The disk filled .* partial cache was removed"):
        from_directory(folder, cache=tmp_path / "c", **KW)
    assert sorted(os.listdir(tmp_path / "c")) == []


def test_unreadable_files_are_skipped_and_reported_from_the_cache(tmp_path):
    folder = _folder(tmp_path / "images", count=3)
    (folder / "bad.png").write_bytes(b"not a png")
    with pytest.warns(UserWarning, match="Skipped 1 of 4"):
        plain = _batches(from_directory(folder, **KW))
    for _ in range(2):  # the build and the hit both report it
        with pytest.warns(UserWarning, match="Skipped 1 of 4"):
            cached = from_directory(folder, cache=tmp_path / "c", **KW)
    _equal(plain, _batches(cached))
    assert len(cached.file_paths) == 3


def test_a_folder_with_nothing_decodable_leaves_no_cache_folder(tmp_path):
    folder = tmp_path / "images"
    folder.mkdir()
    (folder / "bad.png").write_bytes(b"not a png")
    with pytest.raises(ValueError, match="no decodable image"):
        from_directory(folder, cache=tmp_path / "run" / "cache", **KW)
    assert not (tmp_path / "run").exists()


def test_a_build_killed_before_its_manifest_finishes_without_decoding(
    tmp_path, monkeypatch
):
    # Killed after the images were moved into place, before the manifest:
    # the resumed build writes the manifest; nothing is decoded or rebuilt.
    folder = _folder(tmp_path / "images", count=5)
    real = cache_build.write_json

    def dies_at_the_manifest(path, value):
        if path.endswith(cache_build.MANIFEST):
            raise KeyboardInterrupt
        real(path, value)

    monkeypatch.setattr(cache_build, "write_json", dies_at_the_manifest)
    with pytest.raises(KeyboardInterrupt):
        from_directory(folder, cache=tmp_path / "c", **KW)
    monkeypatch.setattr(cache_build, "write_json", real)
    assert (tmp_path / "c" / cache_build.IMAGES).exists()
    monkeypatch.setattr(
        "keras_diffusion.data.decode.load_image",
        lambda *a, **k: pytest.fail("decoded again"),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "Rebuilding" warning
        resumed = _batches(from_directory(folder, cache=tmp_path / "c", **KW))
    monkeypatch.undo()
    _equal(_batches(from_directory(folder, **KW)), resumed)
    assert sorted(os.listdir(tmp_path / "c")) == sorted(
        [
            cache_build.MANIFEST,
            cache_build.IMAGES,
            cache_build.INDEX,
            cache_build.LABELS,
        ]
    )


def test_opening_a_cache_removes_what_killed_writers_left(tmp_path):
    folder = _folder(tmp_path / "images", count=3)
    from_directory(folder, cache=tmp_path / "c", **KW)
    names = sorted(os.listdir(tmp_path / "c"))
    leftovers = [
        ".progress.json.a1b2c3d4.tmp.json",  # an atomic write killed midway
        ".write-test.zz99yy88.tmp",  # killed between the probe's two steps
        cache_build.PROGRESS,  # killed after the manifest, before its removal
    ]
    for name in leftovers:
        (tmp_path / "c" / name).write_text("{}")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from_directory(folder, cache=tmp_path / "c", **KW)
    assert sorted(os.listdir(tmp_path / "c")) == names
