"""The figures of a text-to-image run on the captioned emoji (docs/quality.md,
"Text"), beside an unconditional run on the same split and budget.

    python benchmarks/emoji_text.py --out /tmp/emoji_text/all \\
        --train-dir /tmp/emoji_text/train --test-dir /tmp/emoji_text/test
    python scripts/train.py --dataset folder --data-dir /tmp/emoji_text/train \\
        --image-size 32 --output-dir runs/emoji_text
    python scripts/train.py --dataset folder --data-dir /tmp/emoji_text/train \\
        --image-size 32 --caption-column none --output-dir runs/emoji_uncond
    python benchmarks/text_quality.py --text-run runs/emoji_text \\
        --uncond-run runs/emoji_uncond --train-dir /tmp/emoji_text/train \\
        --test-dir /tmp/emoji_text/test

For each judge seed (`--seeds`, each the folder judge's halves and the
sampling seed) it prints:

- quality: FD/floor of the held-out folder (`FolderQuality`: 8x8 block
  means, real images about 1): the text model sampled for the captions of
  half A, the unconditional one unprompted;
- the prompt shows: a classifier of the emoji categories (ridge regression
  on a 64-component PCA of 8x8 block means, fitted on the real training
  images) applied to the held-out real images (their own categories) and to
  the text model's images of the same held-out captions (the caption's
  category); the unconditional model's images against the same categories
  give the chance level;
- attributes bind: for each held-out emoji with one skin tone, the text
  model's images of "NAME: light skin tone" and "NAME: dark skin tone" from
  the same noise; a pair binds when the light image's skin is brighter (the
  mean luminance of its pixels in the emoji skin palette's hue and
  saturation range, white background and outlines left out).
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402

import keras_diffusion  # noqa: E402, F401
from keras_diffusion.data.directory import load_directory_arrays  # noqa: E402
from keras_diffusion.evaluation import folder_quality  # noqa: E402
from keras_diffusion.metrics.native import area_downsample  # noqa: E402
from keras_diffusion.utils import files  # noqa: E402
from keras_diffusion.utils import images as images_lib  # noqa: E402

TONES = ("light", "medium-light", "medium", "medium-dark", "dark")


def _metadata(folder):
    with open(os.path.join(folder, "metadata.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    return {row["file_name"]: row for row in rows}


def _read(folder, size):
    """`(images in [-1, 1], rows of metadata)` in the listing's order."""
    images, _, _, paths = load_directory_arrays(folder, size)
    rows = _metadata(folder)
    listed = [rows[os.path.relpath(p, folder)] for p in paths]
    return folder_quality.to_unit_range(images), listed


class CategoryClassifier:
    """Ridge regression onto one-hot categories over a PCA of 8x8 block means."""

    def __init__(self, images, categories, components=64, ridge=1.0):
        self.names = sorted(set(categories))
        x = self._blocks(images)
        self.mean = x.mean(0)
        _, _, vt = np.linalg.svd(x - self.mean, full_matrices=False)
        self.basis = vt[:components].T
        z = self._project(images)
        y = np.eye(len(self.names))[[self.names.index(c) for c in categories]]
        gram = z.T @ z + ridge * np.eye(z.shape[1])
        self.weights = np.linalg.solve(gram, z.T @ y)

    @staticmethod
    def _blocks(images):
        return area_downsample(images, 8).reshape(len(images), -1).astype(np.float64)

    def _project(self, images):
        z = (self._blocks(images) - self.mean) @ self.basis
        return np.concatenate([z, np.ones((len(z), 1))], 1)

    def rate(self, images, categories):
        """The share of `images` classified as their `categories`."""
        scores = self._project(images) @ self.weights
        predicted = [self.names[i] for i in scores.argmax(1)]
        return float(
            np.mean([p == c for p, c in zip(predicted, categories, strict=True)])
        )


def skin_luminance(image):
    """Mean luminance of an image's skin pixels (the emoji skin palette's
    warm hues: red >= green >= blue, saturation 0.15-0.75), `nan` if none."""
    rgb = (np.asarray(image, np.float64) + 1.0) / 2.0
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    high, low = rgb.max(-1), rgb.min(-1)
    saturation = (high - low) / np.maximum(high, 1e-6)
    skin = (r >= g) & (g >= b) & (saturation > 0.15) & (saturation < 0.75)
    skin &= high > 0.15  # outlines
    if not skin.any():
        return float("nan")
    return float(np.mean(0.299 * r[skin] + 0.587 * g[skin] + 0.114 * b[skin]))


def tone_pairs(rows):
    """The names of held-out emoji with one skin tone, each once."""
    names = []
    for row in rows:
        name, _, tone = row["text"].partition(": ")
        if tone.endswith(" skin tone") and tone[: -len(" skin tone")] in TONES:
            if name not in names:
                names.append(name)
    return names


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--text-run", required=True)
    parser.add_argument("--uncond-run", required=True)
    parser.add_argument("--train-dir", required=True)
    parser.add_argument("--test-dir", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--output", help="the figures as JSON")
    parser.add_argument(
        "--grid",
        help="a PNG of the text model's images for 8 held-out captions, "
        "a row each (one image per judge seed), captioned",
    )
    args = parser.parse_args(argv)
    text_model = files.load_model(args.text_run)
    uncond_model = files.load_model(args.uncond_run)
    size = text_model.image_shape[0]
    train_images, train_rows = _read(args.train_dir, size)
    test_images, test_rows = _read(args.test_dir, size)
    classifier = CategoryClassifier(train_images, [r["category"] for r in train_rows])
    test_categories = [r["category"] for r in test_rows]
    test_captions = [r["text"] for r in test_rows]
    names = tone_pairs(test_rows)
    figures = {"real_rate": classifier.rate(test_images, test_categories)}
    rate = figures["real_rate"]
    print(f"real held-out images classified as their category: {rate:.3f}")
    print(f"{len(names)} held-out emoji with one skin tone")
    for seed in args.seeds:
        figures[seed] = _seed_figures(
            seed, args.test_dir, (text_model, uncond_model), classifier,
            (test_captions, test_categories, names),
        )  # fmt: skip
        print(json.dumps({seed: figures[seed]}))
    if args.output:
        with open(args.output, "w") as f:
            json.dump(figures, f, indent=2)
    if args.grid:
        _write_grid(text_model, test_captions, args.seeds, args.grid)
    return 0


def _write_grid(model, captions, seeds, path):
    """Eight held-out captions spread over the sorted distinct ones, a row
    each, an image per seed (as `samples.png` spreads the run's prompts)."""
    distinct = sorted(set(captions))
    chosen = [distinct[i * len(distinct) // 8] for i in range(8)]
    scale = model.guidance_scale or 1.0
    columns = [
        model.generate(8, prompts=chosen, guidance_scale=scale, seed=s, verbose=0)
        for s in seeds
    ]
    images = np.stack(columns, axis=1).reshape(-1, *columns[0].shape[1:])
    labels = [c for c in chosen for _ in seeds]
    images_lib.save_caption_grid(images, labels, path, rows=8)
    print(f"grid: {path}")


def _seed_figures(seed, test_dir, models, classifier, held_out):
    text_model, uncond_model = models
    captions, categories, names = held_out
    size = text_model.image_shape[:2]
    quality = folder_quality.FolderQuality(
        test_dir, size, seed=seed, caption_column="text"
    )
    figures = {}
    for kind, model in (("text", text_model), ("uncond", uncond_model)):
        score = folder_quality.judge_model(model, quality=quality, seed=seed)
        figures[f"{kind}_fd_ratio"] = round(score["fd_ratio"], 3)
    scale = text_model.guidance_scale or 1.0
    prompted = text_model.generate(
        len(captions), prompts=captions, guidance_scale=scale, seed=seed, verbose=0
    )
    unprompted = uncond_model.generate(len(captions), seed=seed, verbose=0)
    figures["text_rate"] = round(classifier.rate(prompted, categories), 3)
    figures["uncond_rate"] = round(classifier.rate(unprompted, categories), 3)
    light = text_model.generate(
        len(names), prompts=[f"{n}: light skin tone" for n in names],
        guidance_scale=scale, seed=seed, verbose=0,
    )  # fmt: skip
    dark = text_model.generate(
        len(names), prompts=[f"{n}: dark skin tone" for n in names],
        guidance_scale=scale, seed=seed, verbose=0,
    )  # fmt: skip
    pairs = [
        (skin_luminance(a), skin_luminance(b)) for a, b in zip(light, dark, strict=True)
    ]
    judged = [(a, b) for a, b in pairs if np.isfinite(a) and np.isfinite(b)]
    figures["tone_pairs"] = len(judged)
    figures["tone_right"] = round(float(np.mean([a > b for a, b in judged])), 3)
    return figures


if __name__ == "__main__":
    keras.utils.set_random_seed(0)
    sys.exit(main())
