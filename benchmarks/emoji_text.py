"""The captioned emoji of issue 53's numbers, as imagefolders.

    npm pack emoji-datasource-google@16.0.0      # once: the tarball
    python -m benchmarks.emoji_text --out emoji-text/ \\
        --train-dir emoji-text-train/ --test-dir emoji-text-test/

From the npm tarball of `emoji-datasource-google` 16.0.0 (no network: it is
read where `--tarball` says), every 64x64 RGBA PNG of `img/google/64/` (3,786:
1,911 emoji and 1,875 skin-tone variants) is written, as it is in the
tarball, to `--out`, with a `metadata.jsonl` in Hugging Face's imagefolder
layout (`keras_diffusion.data.from_directory` reads it):

- `file_name`: the tarball's file name (`1f431.png`);
- `text`, the caption: the emoji's Unicode name from `emoji.json`, in lower
  case (`"cat face"`); a skin-tone variant adds its tones after a colon, as
  Unicode's CLDR names them: codes 1F3FB to 1F3FF are light, medium-light,
  medium, medium-dark and dark skin tone (`"waving hand sign: dark skin
  tone"`; two people of two tones: `"handshake: light skin tone, dark skin
  tone"`);
- `category` and `subcategory`, from `emoji.json` (`"Animals & Nature"`,
  `"animal-mammal"`);
- `split`: `"train"` or `"test"`, a fixed permutation (NumPy
  `default_rng(0).permutation` over the files in sorted name order; the
  first 3,408 train, the other 378 test: the 90/10 of docs/quality.md's
  emoji sections), and the emoji of the colour-object `COMPOSITIONS` held
  out besides (3,403 train, 383 test).

`--train-dir` and `--test-dir` get the images of one split each, with their
own `metadata.jsonl` (same columns): train on the first, judge on the second
(`--judge-folder`; its captions are the held-out prompts). The counts, the
most frequent categories and a few skin-tone captions are printed as JSON.
"""

import argparse
import collections
import json
import os
import sys
import tarfile

import numpy as np

TARBALL = "/tmp/emoji/emoji-datasource-google-16.0.0.tgz"
IMAGES = "package/img/google/64/"
EMOJI_JSON = "package/emoji.json"
SKIN_TONES = {
    "1F3FB": "light skin tone",
    "1F3FC": "medium-light skin tone",
    "1F3FD": "medium skin tone",
    "1F3FE": "medium-dark skin tone",
    "1F3FF": "dark skin tone",
}
SEED = 0
TEST_COUNT = 378  # of 3,786: docs/quality.md's 90/10 (3,408 / 378)
# Colour-object compositions the training split never shows: each puts a
# colour word the training captions hold (on other objects) on an object
# they show in other colours. Every emoji of that colour and object is held
# out (both orange diamonds); `benchmarks/text_quality.py` judges its hue.
COMPOSITIONS = {
    "purple heart": "purple",
    "large blue circle": "blue",
    "large yellow square": "yellow",
    "large orange diamond": "orange",
    "small orange diamond": "orange",
    "green book": "green",
}


def tone_caption(name, tones):
    """`"waving hand sign: dark skin tone"` of a name and tone codes
    (`"1F3FF"`, or `"1F3FB-1F3FF"` for two people); a tone given twice is
    named once."""
    names = []
    for code in tones.split("-"):
        if SKIN_TONES[code] not in names:
            names.append(SKIN_TONES[code])
    return f"{name.lower()}: {', '.join(names)}"


def emoji_rows(emoji):
    """`{file name: row}` of every emoji and skin-tone variant with a Google
    image; a row holds `text`, `category` and `subcategory`."""
    rows = {}
    for entry in emoji:
        columns = {"category": entry["category"], "subcategory": entry["subcategory"]}
        if entry.get("has_img_google"):
            rows[entry["image"]] = {"text": entry["name"].lower(), **columns}
        for tones, variant in (entry.get("skin_variations") or {}).items():
            if variant.get("has_img_google"):
                text = tone_caption(entry["name"], tones)
                rows[variant["image"]] = {"text": text, **columns}
    return rows


def split_of(rows, seed=SEED, test_count=TEST_COUNT):
    """`{name: "train" or "test"}`: the sorted names permuted by `seed`, the
    last `test_count` of the permutation held out, and with them every
    emoji captioned as one of the `COMPOSITIONS`."""
    names = sorted(rows)
    order = np.random.default_rng(seed).permutation(len(names))
    held_out = {names[i] for i in order[len(names) - test_count :]}
    held_out |= {name for name in names if rows[name]["text"] in COMPOSITIONS}
    return {name: "test" if name in held_out else "train" for name in names}


def _write_folder(folder, members, rows, names):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "metadata.jsonl"), "w") as metadata:
        for name in names:
            with open(os.path.join(folder, name), "wb") as f:
                f.write(members[name])
            metadata.write(json.dumps({"file_name": name, **rows[name]}) + "\n")


def build(tarball, out, train_dir=None, test_dir=None, test_count=TEST_COUNT):
    """Writes the folders; returns the summary printed by `main`."""
    with tarfile.open(tarball) as archive:
        emoji = json.load(archive.extractfile(EMOJI_JSON))
        members = {
            os.path.basename(m.name): archive.extractfile(m).read()
            for m in archive.getmembers()
            if m.isfile() and m.name.startswith(IMAGES) and m.name.endswith(".png")
        }
    rows = emoji_rows(emoji)
    if set(rows) != set(members):
        raise ValueError(
            f"{tarball!r}: {len(members)} images and {len(rows)} emoji.json "
            f"entries with a Google image do not match "
            f"({sorted(set(rows) ^ set(members))[:5]} ...)"
        )
    splits = split_of(rows, test_count=test_count)
    for name, split in splits.items():
        rows[name]["split"] = split
    names = sorted(rows)
    _write_folder(out, members, rows, names)
    for folder, split in ((train_dir, "train"), (test_dir, "test")):
        if folder is not None:
            _write_folder(
                folder, members, rows, [n for n in names if splits[n] == split]
            )
    return summary(rows)


def summary(rows):
    counts = collections.Counter(row["split"] for row in rows.values())
    toned = [row["text"] for row in rows.values() if row["text"].endswith("skin tone")]
    return {
        "images": len(rows),
        "train": counts["train"],
        "test": counts["test"],
        "skin_tone_variants": len(toned),
        "distinct_captions": len({row["text"] for row in rows.values()}),
        "categories": collections.Counter(
            row["category"] for row in rows.values()
        ).most_common(10),
        "subcategories": collections.Counter(
            row["subcategory"] for row in rows.values()
        ).most_common(10),
        "skin_tone_captions": [
            text for text in toned if text.startswith(("waving hand", "handshake"))
        ][:8],
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tarball", default=TARBALL, help="the npm tarball")
    parser.add_argument("--out", required=True, help="all 3,786, split column")
    parser.add_argument("--train-dir", help="the 3,408 training images")
    parser.add_argument("--test-dir", help="the 378 held-out images, for the judge")
    args = parser.parse_args(argv)
    if not os.path.isfile(args.tarball):
        parser.error(
            f"--tarball {args.tarball!r} is not a file; `npm pack "
            "emoji-datasource-google@16.0.0` downloads it"
        )
    print(
        json.dumps(
            build(args.tarball, args.out, args.train_dir, args.test_dir), indent=1
        )
    )


if __name__ == "__main__":
    sys.exit(main())
