"""`benchmarks.emoji_text`: the captioned emoji folders, from a tiny tarball
of the npm package's layout."""

import io
import json
import tarfile

import numpy as np
from PIL import Image

from benchmarks import emoji_text
from keras_diffusion.data import from_directory

_EMOJI = [
    {
        "name": "CAT FACE",
        "image": "1f431.png",
        "category": "Animals & Nature",
        "subcategory": "animal-mammal",
        "has_img_google": True,
    },
    {
        "name": "HANDSHAKE",
        "image": "1f91d.png",
        "category": "People & Body",
        "subcategory": "hands",
        "has_img_google": True,
        "skin_variations": {
            "1F3FF": {"image": "1f91d-1f3ff.png", "has_img_google": True},
            "1F3FB-1F3FF": {"image": "1f91d-1f3fb-1f3ff.png", "has_img_google": True},
            "1F3FB-1F3FB": {"image": "1f91d-1f3fb-1f3fb.png", "has_img_google": True},
            "1F3FC": {"image": "1f91d-1f3fc.png", "has_img_google": False},
        },
    },
]


def _tarball(path):
    with tarfile.open(path, "w:gz") as archive:

        def add(name, data):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))

        add(emoji_text.EMOJI_JSON, json.dumps(_EMOJI).encode())
        for index, entry in enumerate(
            [_EMOJI[0], _EMOJI[1], *_EMOJI[1]["skin_variations"].values()][:5]
        ):
            pixels = np.zeros((64, 64, 4), np.uint8)
            pixels[16:48, 16:48] = (index * 50, 0, 0, 255)  # transparent around
            png = io.BytesIO()
            Image.fromarray(pixels, "RGBA").save(png, format="PNG")
            add(emoji_text.IMAGES + entry["image"], png.getvalue())
    return path


def test_captions_tones_and_split_reach_the_training_pipeline(tmp_path):
    tarball = _tarball(tmp_path / "emoji.tgz")
    out, train, test = tmp_path / "all", tmp_path / "train", tmp_path / "test"
    summary = emoji_text.build(tarball, out, train, test, test_count=2)
    assert (summary["images"], summary["train"], summary["test"]) == (5, 3, 2)
    rows = {
        row["file_name"]: row
        for row in map(json.loads, (out / "metadata.jsonl").read_text().splitlines())
    }
    assert rows["1f431.png"] == {
        "file_name": "1f431.png",
        "text": "cat face",
        "category": "Animals & Nature",
        "subcategory": "animal-mammal",
        "split": rows["1f431.png"]["split"],
    }
    assert rows["1f91d-1f3ff.png"]["text"] == "handshake: dark skin tone"
    assert rows["1f91d-1f3fb-1f3ff.png"]["text"] == (
        "handshake: light skin tone, dark skin tone"
    )
    assert rows["1f91d-1f3fb-1f3fb.png"]["text"] == "handshake: light skin tone"
    assert summary["skin_tone_variants"] == 3
    # The split: a seeded permutation, the same each time, the folders agree.
    assert emoji_text.split_of(rows, test_count=2) == {
        name: row["split"] for name, row in rows.items()
    }
    for folder, split in ((train, "train"), (test, "test")):
        dataset = from_directory(folder, 8, 16, shuffle=False)
        names = [p.rsplit("/", 1)[1] for p in dataset.file_paths]
        assert names == sorted(n for n, row in rows.items() if row["split"] == split)
        ((_, captions),) = list(dataset)
        assert [c.decode() for c in captions.numpy()] == [
            rows[n]["text"] for n in names
        ]


def test_every_emoji_of_a_composition_is_held_out():
    rows = {f"{i:03d}.png": {"text": f"emoji {i}"} for i in range(40)}
    compositions = {"a.png": "large orange diamond", "b.png": "small orange diamond"}
    compositions["c.png"] = "purple heart"
    rows.update({name: {"text": text} for name, text in compositions.items()})
    for test_count in (0, 4):
        splits = emoji_text.split_of(rows, test_count=test_count)
        assert all(splits[name] == "test" for name in compositions)
        others = [n for n in rows if n not in compositions and splits[n] == "test"]
        assert len(others) <= test_count and len(others) >= test_count - 3
    assert "orange" in emoji_text.COMPOSITIONS["large orange diamond"]
