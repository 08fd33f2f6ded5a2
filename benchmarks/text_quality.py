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

The judges (`benchmarks/text_judges.py`) are fitted on the real training
images and read the real held-out images first (the ceiling). Then, for
each judge seed (`--seeds`, each the folder judge's halves and the sampling
seed) and each guidance scale (`--guidance`; `run` is the run's own):

- quality: FD/floor of the held-out folder (`FolderQuality`: 8x8 block
  means, real images about 1) of the text model's images of the captions
  of half A (the unconditional run's, unprompted, with `--uncond-run`);
- the prompt shows: the category classifier on the text model's images of
  every held-out caption, as a raw rate, a balanced accuracy (each category
  counted alike) and per category; the unconditional model's images
  against the same categories give the chance level;
- colour words carry: 8 images of each held-out colour-object composition
  (`COMPOSITIONS`: "purple heart", which training shows only in other
  colours), each named by its hue; a composition carries when most of its
  images are named its colour;
- attributes bind: for each held-out emoji with one skin tone, the images
  of "NAME: light skin tone" and "NAME: dark skin tone" from the same
  noise; a pair binds when the light image's skin is the brighter.
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
from benchmarks import text_judges  # noqa: E402
from benchmarks.emoji_text import COMPOSITIONS  # noqa: E402
from keras_diffusion.data.directory import load_directory_arrays  # noqa: E402
from keras_diffusion.evaluation import folder_quality  # noqa: E402
from keras_diffusion.utils import files  # noqa: E402
from keras_diffusion.utils import images as images_lib  # noqa: E402

PER_COMPOSITION = 8


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


class Judges:
    """The held-out prompts and the judges fitted on the training split."""

    def __init__(self, train_dir, test_dir, size):
        train_images, train_rows = _read(train_dir, size)
        self.test_images, test_rows = _read(test_dir, size)
        self.categories = [r["category"] for r in test_rows]
        self.captions = [r["text"] for r in test_rows]
        self.tone_names = text_judges.tone_pairs(test_rows)
        self.classifier = text_judges.CategoryClassifier(
            train_images, [r["category"] for r in train_rows]
        )
        self.colours = text_judges.ColourJudge(
            train_images, [r["text"] for r in train_rows]
        )

    def real(self):
        """The judges' figures on the real held-out images."""
        figures = {
            "categories": self.classifier.rates(self.test_images, self.categories)
        }
        by_caption = dict(zip(self.captions, self.test_images, strict=True))
        figures["compositions"] = {
            caption: self.colours.colour(by_caption[caption])
            for caption in COMPOSITIONS
        }
        light, dark = [], []
        for name in self.tone_names:
            if (
                f"{name}: light skin tone" in by_caption
                and f"{name}: dark skin tone" in by_caption
            ):
                light.append(by_caption[f"{name}: light skin tone"])
                dark.append(by_caption[f"{name}: dark skin tone"])
        figures["tone_pairs"], figures["tone_right"] = text_judges.tones_right(
            light, dark
        )
        return figures

    def generated(self, model, guidance, seed):
        """The judges' figures on `model`'s images at `guidance`."""

        def sample(prompts):
            return model.generate(
                len(prompts), prompts=prompts, guidance_scale=guidance,
                seed=seed, verbose=0,
            )  # fmt: skip

        figures = {
            "categories": self.classifier.rates(sample(self.captions), self.categories)
        }
        compositions = {}
        for caption, colour in COMPOSITIONS.items():
            images = sample([caption] * PER_COMPOSITION)
            compositions[caption] = self.colours.share(images, colour)
        figures["compositions"] = compositions
        figures["compositions_carried"] = sum(s > 0.5 for s in compositions.values())
        light = sample([f"{n}: light skin tone" for n in self.tone_names])
        dark = sample([f"{n}: dark skin tone" for n in self.tone_names])
        figures["tone_pairs"], figures["tone_right"] = text_judges.tones_right(
            light, dark
        )
        return figures


def _scales(values, model):
    """`--guidance` as floats, `run` read as the run's guidance (1 if none)."""
    run_scale = float(model.guidance_scale or 1.0)
    scales = [run_scale if v == "run" else float(v) for v in values]
    return list(dict.fromkeys(scales))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--text-run", required=True)
    parser.add_argument("--uncond-run", help="an unconditional run, for chance")
    parser.add_argument("--train-dir", required=True)
    parser.add_argument("--test-dir", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument(
        "--guidance", nargs="+", default=["1", "run", "3", "4"],
        help="guidance scales to judge at; `run` is the run's own",
    )  # fmt: skip
    parser.add_argument("--output", help="the figures as JSON")
    parser.add_argument(
        "--grid",
        help="a PNG of the text model's images for 8 held-out captions and "
        "the compositions, a row each (one image per judge seed), captioned",
    )
    args = parser.parse_args(argv)
    text_model = files.load_model(args.text_run)
    uncond_model = files.load_model(args.uncond_run) if args.uncond_run else None
    scales = _scales(args.guidance, text_model)
    judges = Judges(args.train_dir, args.test_dir, text_model.image_shape[0])
    figures = {"real": judges.real()}
    print(json.dumps({"real": figures["real"]}))
    for seed in args.seeds:
        figures[seed] = _seed_figures(
            seed, args.test_dir, text_model, uncond_model, judges, scales
        )
    if args.output:
        with open(args.output, "w") as f:
            json.dump(figures, f, indent=2)
    if args.grid:
        _write_grid(text_model, judges.captions, args.seeds, args.grid)
    return 0


def _seed_figures(seed, test_dir, text_model, uncond_model, judges, scales):
    quality = folder_quality.FolderQuality(
        test_dir, text_model.image_shape[:2], seed=seed, caption_column="text"
    )
    figures = {}
    if uncond_model is not None:
        score = folder_quality.judge_model(uncond_model, quality=quality, seed=seed)
        unprompted = uncond_model.generate(len(judges.captions), seed=seed, verbose=0)
        figures["uncond"] = {
            "fd_ratio": round(score["fd_ratio"], 3),
            "categories": judges.classifier.rates(unprompted, judges.categories),
        }
        print(json.dumps({seed: {"uncond": figures["uncond"]}}))
    for scale in scales:
        score = folder_quality.judge_model(
            text_model, quality=quality, seed=seed, guidance_scale=scale
        )
        figures[scale] = {
            "fd_ratio": round(score["fd_ratio"], 3),
            **judges.generated(text_model, scale, seed),
        }
        print(json.dumps({seed: {scale: figures[scale]}}))
    return figures


def _write_grid(model, captions, seeds, path):
    """Eight held-out captions spread over the sorted distinct ones and the
    compositions, a row each, an image per seed, at the run's guidance."""
    distinct = sorted(set(captions) - set(COMPOSITIONS))
    chosen = [distinct[i * len(distinct) // 8] for i in range(8)] + list(COMPOSITIONS)
    scale = model.guidance_scale or 1.0
    columns = [
        model.generate(
            len(chosen), prompts=chosen, guidance_scale=scale, seed=s, verbose=0
        )
        for s in seeds
    ]
    images = np.stack(columns, axis=1).reshape(-1, *columns[0].shape[1:])
    labels = [c for c in chosen for _ in seeds]
    images_lib.save_caption_grid(images, labels, path, rows=len(chosen))
    print(f"grid: {path}")


if __name__ == "__main__":
    keras.utils.set_random_seed(0)
    sys.exit(main())
