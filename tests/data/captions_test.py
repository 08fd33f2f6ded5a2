"""Captions from a folder in Hugging Face's imagefolder layout."""

import json

import numpy as np
import pytest
from PIL import Image

from keras_diffusion.data import from_directory
from keras_diffusion.data.ordered import EpochOrder

# Each image's grey level (after compositing over white), and its caption.
_GREYS = {"a.png": 255, "b.png": 60, "sub/c.png": 120, "sub/d.png": 180}


def _captioned_folder(folder, metadata="jsonl", column="text"):
    """Four small images of real kinds, captioned by their grey level: an
    RGBA PNG, all transparent over a colour (white once composited), a
    palette PNG, an odd size, a subfolder."""
    (folder / "sub").mkdir(parents=True)
    rgba = np.zeros((8, 8, 4), np.uint8)
    rgba[..., :3] = (13, 250, 90)
    Image.fromarray(rgba, "RGBA").save(folder / "a.png")
    palette = Image.fromarray(np.zeros((8, 8), np.uint8), "P")
    palette.putpalette([_GREYS["b.png"]] * 3 + [0] * 765)
    palette.save(folder / "b.png")
    odd = np.full((13, 7, 3), _GREYS["sub/c.png"], np.uint8)
    Image.fromarray(odd).save(folder / "sub" / "c.png")
    Image.fromarray(np.full((8, 8), _GREYS["sub/d.png"], np.uint8)).save(
        folder / "sub" / "d.png"
    )
    rows = [
        {"file_name": name, column: f"grey {grey}"} for name, grey in _GREYS.items()
    ]
    if metadata == "jsonl":
        lines = [json.dumps({**row, "extra": 1}) for row in rows]
        (folder / "metadata.jsonl").write_text("\n".join(lines) + "\n")
    else:
        lines = [f"file_name,{column}"] + [
            f'{row["file_name"]},"{row[column]}"' for row in rows
        ]
        (folder / "metadata.csv").write_text("\n".join(lines) + "\n")
    return folder


def _pairs(batches):
    """`(grey level of each image, its caption)` over batches."""
    pairs = []
    for images, captions in batches:
        assert captions.dtype == "string" and captions.shape == images.shape[:1]
        greys = np.round((images.numpy().mean(axis=(1, 2, 3)) + 1) * 127.5)
        texts = [c.decode() for c in captions.numpy()]
        pairs.extend(zip(greys.tolist(), texts, strict=True))
    return pairs


def _assert_captions_follow_images(pairs):
    assert sorted(caption for _, caption in pairs) == sorted(
        f"grey {g}" for g in _GREYS.values()
    )
    for grey, caption in pairs:
        assert abs(grey - int(caption.split()[1])) <= 1, (grey, caption)


@pytest.mark.parametrize("cache", [None, "cache"])
def test_captions_follow_their_images_shuffled_cached_and_epoch_ordered(
    tmp_path, cache
):
    folder = _captioned_folder(tmp_path / "f")
    cache = None if cache is None else tmp_path / cache
    dataset = from_directory(
        folder, 3, 8, seed=1, flip=True, resize="stretch", cache=cache
    )
    assert dataset.captions == [f"grey {g}" for g in _GREYS.values()]
    epochs = [_pairs(dataset) for _ in range(2)]
    for pairs in epochs:
        _assert_captions_follow_images(pairs)
    assert epochs[0] != epochs[1]  # reshuffled, captions and all
    order = EpochOrder(seed=1)
    whole = _pairs(dataset.epoch_batches(order))
    _assert_captions_follow_images(whole)
    # A resume after the first batch of 3 gets the epoch's last one.
    assert _pairs(dataset.epoch_batches(order, skip=1)) == whole[3:]


def test_csv_metadata_with_another_caption_column(tmp_path):
    folder = _captioned_folder(tmp_path / "f", metadata="csv", column="caption")
    dataset = from_directory(folder, 4, 8, resize="stretch", caption_column="caption")
    _assert_captions_follow_images(_pairs(dataset))


def test_no_metadata_or_no_caption_column_gives_images_only(tmp_path):
    folder = _captioned_folder(tmp_path / "f")
    unread = from_directory(folder, 4, 8, resize="stretch", caption_column=None)
    (metadata := folder / "metadata.jsonl").unlink()
    plain = from_directory(folder, 4, 8, resize="stretch")
    for dataset in (unread, plain):
        (batch,) = list(dataset)
        assert batch.shape == (4, 8, 8, 3) and dataset.captions is None
    assert not metadata.exists()


def _refused(folder, tmp_path, **kwargs):
    cache = tmp_path / "cache"
    with pytest.raises(ValueError) as info:
        from_directory(folder, 4, 8, cache=cache, **kwargs)
    assert not cache.exists()  # refused before anything is written
    return str(info.value)


def test_every_bad_caption_is_named_with_its_line_in_one_error(tmp_path):
    folder = _captioned_folder(tmp_path / "f")
    Image.fromarray(np.zeros((8, 8), np.uint8)).save(folder / "sub" / "e.png")
    lines = (folder / "metadata.jsonl").read_text().splitlines()
    lines[1] = '{"file_name": "b.png", "text": 3}'
    lines += [
        '{"file_name": "gone.png", "text": "no such image"}',
        "{not json",
        '{"text": "nameless"}',
        '{"file_name": "a.png", "text": "again"}',
    ]
    (folder / "metadata.jsonl").write_text("\n".join(lines))
    message = _refused(folder, tmp_path)
    for fragment in (
        "6 problem(s)",
        "metadata.jsonl line 2: the caption of 'b.png' is not a string: 3",
        "metadata.jsonl line 5: 'gone.png': a caption without an image",
        "metadata.jsonl line 6: not JSON",
        "metadata.jsonl line 7: no file_name",
        "metadata.jsonl line 8: 'a.png' captioned again (first on line 1)",
        "'sub/e.png': an image without a caption in metadata.jsonl",
        f"Received: folder={str(folder)!r}",
    ):
        assert fragment in message, (fragment, message)
    # One line a problem.
    assert len(message.splitlines()) == 6 + 2


def test_a_missing_caption_column_names_the_columns_there(tmp_path):
    folder = _captioned_folder(tmp_path / "f", metadata="csv", column="caption")
    message = _refused(folder, tmp_path)
    assert "metadata.csv: no caption column 'text'" in message
    assert "'file_name', 'caption'" in message


def test_a_long_list_of_problems_is_cut(tmp_path):
    folder = tmp_path / "f"
    folder.mkdir()
    for i in range(30):
        Image.fromarray(np.zeros((4, 4), np.uint8)).save(folder / f"{i:02d}.png")
    (folder / "metadata.jsonl").write_text('{"file_name": "00.png", "text": "x"}\n')
    message = _refused(folder, tmp_path)
    assert "29 problem(s)" in message and "and 17 more" in message
    assert len(message.splitlines()) == 12 + 3


def test_a_metadata_file_in_a_subfolder_names_the_files_under_it(tmp_path):
    folder = _captioned_folder(tmp_path / "f")
    lines = (folder / "metadata.jsonl").read_text().splitlines()
    (folder / "metadata.jsonl").write_text("\n".join(lines[:2]))
    (folder / "sub" / "metadata.csv").write_text(
        'file_name,text\nc.png,"grey 120"\nd.png,"grey 180"\n'
    )
    dataset = from_directory(folder, 4, 8, resize="stretch")
    _assert_captions_follow_images(_pairs(dataset))
    # The same image captioned by both files is named once, with both places.
    (folder / "metadata.jsonl").write_text(
        "\n".join(lines[:2] + ['{"file_name": "sub/d.png", "text": "twice"}'])
    )
    message = _refused(folder, tmp_path)
    assert "1 problem(s)" in message
    assert "sub/metadata.csv line 3: 'sub/d.png' captioned again" in message
    assert "(first in metadata.jsonl)" in message
