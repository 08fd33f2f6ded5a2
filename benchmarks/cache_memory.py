"""Resident memory of the decode cache's pipeline as the folder grows.

    python benchmarks/cache_memory.py --work-dir /tmp/cache_memory \\
        --image-size 256 --base 4000 --scales 1 4 16

Generates `base * max(scales)` JPEGs (smooth random colour fields at the
image size, ~10-20 KB each) once under `--work-dir`, then for each scale a
folder of hard links to the first `base * scale` of them. Each scale's cache
is built in a process of its own, then another fresh process reads one whole
epoch from the cache (batches of `--batch-size`, shuffled) and reports its
memory from `/proc/self/status`: `VmHWM` (peak resident), `RssAnon`
(anonymous memory, the largest seen during the epoch: what must stay flat)
and `RssFile` (pages of the memory map that the kernel keeps resident while
there is room, and the ~400 MB of TensorFlow libraries; reclaimable, not the
process's own memory). For comparison, `--in-memory-scale S` (default 1)
adds a row for the same folder decoded into memory without a cache (what
`from_directory` does without `cache`): there the data set itself is
resident. At
256x256 RGB an image is 196 KB, so `--base 4000` gives 0.79, 3.1 and
12.6 GB of uint8 at 1x, 4x and 16x.

Linux only (`/proc`). Run it on a quiet machine; it prints one table row a
scale.
"""

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _generate(folder, count, size):
    import numpy as np
    from PIL import Image

    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(0)
    have = len(os.listdir(folder))
    for i in range(have, count):
        corners = rng.integers(0, 256, (2, 2, 3)).astype(np.uint8)
        image = Image.fromarray(corners).resize((size, size), Image.BILINEAR)
        image.save(os.path.join(folder, f"{i:07d}.jpg"), quality=90)
        if (i + 1) % 1000 == 0:
            print(f"  generated {i + 1:,}/{count:,}", flush=True)


def _link(source, folder, count):
    os.makedirs(folder, exist_ok=True)
    names = sorted(os.listdir(source))[:count]
    for name in names:
        target = os.path.join(folder, name)
        if not os.path.exists(target):
            os.link(os.path.join(source, name), target)


def _child(mode, folder, cache, image_size, batch_size):
    sys.path.insert(0, ROOT)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from keras_diffusion.data import from_directory

    dataset = from_directory(
        folder,
        batch_size,
        image_size,
        cache=None if mode == "memory" else cache,
        seed=0,
        verbose=mode == "build",
    )
    images, peak_anon = 0, 0
    if mode != "build":
        for i, batch in enumerate(dataset):
            images += int(batch.shape[0])
            if i % 16 == 0:
                peak_anon = max(peak_anon, _status()["RssAnon"])
    status = _status()
    status["RssAnon"] = max(peak_anon, status["RssAnon"])
    print(json.dumps({"images": images, **status}))


def _status():
    """Memory lines of /proc/self/status, in bytes."""
    status = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmHWM", "VmRSS", "RssAnon", "RssFile"):
                status[key] = int(value.split()[0]) * 1024
    return status


def _run(mode, folder, cache, args):
    command = [
        sys.executable, __file__, "--child", mode, "--folder", folder,
        "--cache", cache, "--image-size", str(args.image_size),
        "--batch-size", str(args.batch_size),
    ]  # fmt: skip
    reads = mode != "build"
    out = subprocess.run(command, check=True, capture_output=reads, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1]) if reads else None


def _row(label, count, result, args):
    mb = 1024**2
    data = count * args.image_size**2 * 3 / mb
    print(
        f"| {label} | {result['images']:,} | {data:,.0f} | "
        f"{result['VmHWM'] / mb:,.0f} | {result['RssAnon'] / mb:,.0f} | "
        f"{result['RssFile'] / mb:,.0f} |",
        flush=True,
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-dir")
    parser.add_argument("--image-size", type=int, default=256)
    parser.add_argument("--base", type=int, default=4000)
    parser.add_argument("--scales", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument(
        "--in-memory-scale",
        type=int,
        default=1,
        help="also read this scale decoded into memory, without a cache (0: skip)",
    )
    parser.add_argument(
        "--child", choices=["build", "read", "memory"], help=argparse.SUPPRESS
    )
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(
            args.child, args.folder, args.cache, args.image_size, args.batch_size
        )
    if not args.work_dir:
        parser.error("the following arguments are required: --work-dir")
    source = os.path.join(args.work_dir, "images")
    print(f"Generating {args.base * max(args.scales):,} images in {source}")
    _generate(source, args.base * max(args.scales), args.image_size)
    print(
        "| scale | images | uint8 data (MB) | VmHWM (MB) | peak RssAnon (MB) "
        "| RssFile (MB) |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for scale in args.scales:
        count = args.base * scale
        folder = os.path.join(args.work_dir, f"x{scale}")
        cache = os.path.join(args.work_dir, f"cache_x{scale}")
        _link(source, folder, count)
        _run("build", folder, cache, args)
        _row(f"{scale}x, cache", count, _run("read", folder, cache, args), args)
        if scale == args.in_memory_scale:
            result = _run("memory", folder, cache, args)
            _row(f"{scale}x, in memory", count, result, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
