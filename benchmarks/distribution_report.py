"""The table, text histograms and plot of `benchmarks.distribution`'s results.

A result is bimodal when its sorted epoch times have a gap wider than
`GAP_RATIO` with at least `MIN_SLOW_SHARE` of the epochs above it: the
epochs below are the fast mode, those above the slow ones.
"""

import statistics

import numpy as np

CASES = (
    "bare",
    "bare-no-autotune",
    "keras",
    "keras-no-autotune",
    "fit",
    "fit-autotune",
    "torch",
)
DISTRIBUTION_CASES = CASES
UNET_CASES = ("fit", "fit-autotune", "torch")
GAP_RATIO = 1.25
MIN_SLOW_SHARE = 0.05


def split_modes(values):
    """`(fast, slow)` lists of `values`; `slow` is empty unless bimodal."""
    ordered = sorted(values)
    if len(ordered) < 2:
        return ordered, []
    gaps = [b / a for a, b in zip(ordered[:-1], ordered[1:], strict=True)]
    cut = int(np.argmax(gaps))
    slow = ordered[cut + 1 :]
    if gaps[cut] < GAP_RATIO or len(slow) < MIN_SLOW_SHARE * len(ordered):
        return ordered, []
    return ordered[: cut + 1], slow


def summarize(values):
    """Counts and medians (seconds a step) of one case's epochs."""
    fast, slow = split_modes(values)
    return {
        "epochs": len(values),
        "slow_epochs": len(slow),
        "bimodal": bool(slow),
        "fast_median": statistics.median(fast),
        "slow_median": statistics.median(slow) if slow else None,
        "all_median": statistics.median(values),
        "min": min(values),
        "max": max(values),
    }


def text_histogram(values, low, high, bins=10, width=40):
    """Lines `'  39.5 ms | #####  5'`, one a bin of `[low, high]`."""
    edges = np.linspace(low, high * 1.0001, bins + 1)
    counts, _ = np.histogram(values, edges)
    top = max(counts.max(), 1)
    return [
        f"  {1000 * (a + b) / 2:7.1f} ms | {'#' * round(width * c / top):{width}s} {c}"
        for a, b, c in zip(edges[:-1], edges[1:], counts, strict=True)
    ]


def format_distribution(results):
    """The summary table and each case's histogram, as text."""
    lines = [
        f"\n{'case':18s} {'epochs':>6s} {'slow':>5s} {'fast mode':>10s} "
        f"{'slow mode':>10s} {'all':>8s}   (ms a step, medians)"
    ]
    for case, result in results.items():
        s = result["summary"]
        slow = f"{1000 * s['slow_median']:8.1f}" if s["slow_median"] else "       -"
        lines.append(
            f"{case:18s} {s['epochs']:6d} {s['slow_epochs']:5d} "
            f"{1000 * s['fast_median']:10.1f} {slow:>10s} "
            f"{1000 * s['all_median']:8.1f}" + ("   BIMODAL" if s["bimodal"] else "")
        )
    for case, result in results.items():
        lines.append(f"\n{case}: {CASE_TEXT[case]}")
        values = result["epoch_seconds"]
        lines += text_histogram(values, min(values), max(values))
    flagged = [c for c, r in results.items() if r["summary"]["bimodal"]]
    lines.append(
        "\nBimodal: " + ", ".join(flagged) + " (see docs/why-slow.md, "
        "'Half-speed epochs')"
        if flagged
        else "\nNo case is bimodal."
    )
    return "\n".join(lines)


CASE_TEXT = {
    "bare": "a @tf.function step over tf.data, TensorFlow's defaults",
    "bare-no-autotune": "the same, tf.data autotuning off",
    "keras": "keras.Model.fit, TensorFlow's defaults",
    "keras-no-autotune": "keras.Model.fit, tf.data autotuning off",
    "fit": "DiffusionModel.fit on a plain tf.data pipeline (the library's defaults)",
    "fit-autotune": "DiffusionModel.fit, options.autotune.enabled=True kept",
    "torch": "PyTorch: a DataLoader loop (conv), the diffusers peer (a U-Net)",
}


def plot_distribution(results, path, width=720, row_height=110):
    """A PNG of each case's histogram, one row a case, on one time axis."""
    from PIL import Image, ImageDraw

    everything = [v for r in results.values() for v in r["epoch_seconds"]]
    low, high = min(everything) * 0.95, max(everything) * 1.05
    bins, left, right = 40, 210, 20
    image = Image.new("RGB", (width, row_height * len(results) + 40), "white")
    draw = ImageDraw.Draw(image)
    span = width - left - right
    edges = np.linspace(low, high, bins + 1)
    for row, (case, result) in enumerate(results.items()):
        top = 10 + row * row_height
        counts, _ = np.histogram(result["epoch_seconds"], edges)
        peak = max(counts.max(), 1)
        s = result["summary"]
        draw.text((8, top + 20), case, fill="black")
        draw.text(
            (8, top + 40),
            f"{s['slow_epochs']} of {s['epochs']} slow",
            fill="firebrick" if s["bimodal"] else "darkgreen",
        )
        base = top + row_height - 25
        draw.line((left, base, width - right, base), fill="gray")
        for i, count in enumerate(counts):
            if count:
                x0 = left + span * i / bins
                height = (row_height - 40) * count / peak
                colour = (
                    "firebrick"
                    if edges[i] >= (s["slow_median"] or 1e9) * 0.9
                    else "steelblue"
                )
                draw.rectangle(
                    (x0 + 1, base - height, x0 + span / bins - 1, base), fill=colour
                )
    axis = row_height * len(results) + 15
    for value in np.linspace(low, high, 7):
        x = left + span * (value - low) / (high - low)
        draw.text((x - 15, axis), f"{1000 * value:.0f} ms", fill="black")
    image.save(path)
