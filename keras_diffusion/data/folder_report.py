"""What an image folder held, in words: the files seen per type, the files
that could not be decoded, and images all smaller than the training size.

Shared by decoding into memory and the decode cache, which report alike.
"""

import collections
import os
import warnings

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".gif", ".bmp", ".webp")


def extension(path):
    """A file's extension in lower case, or `"(no extension)"`."""
    return os.path.splitext(path)[1].lower() or "(no extension)"


def _seen_summary(all_files, failed):
    """`"3 .png (2 unreadable), 1 .txt (not an image type)"`."""
    counts = collections.Counter(extension(p) for p in all_files)
    failed_counts = collections.Counter(extension(p) for p in failed)
    parts = []
    for ext, count in counts.most_common():
        if ext not in IMAGE_EXTENSIONS:
            parts.append(f"{count} {ext} (not an image type)")
        elif failed_counts[ext]:
            parts.append(f"{count} {ext} ({failed_counts[ext]} unreadable)")
        else:
            parts.append(f"{count} {ext}")
    return ", ".join(parts) or "no files"


def _warn_skipped(folder, failed, total):
    shown = "; ".join(f"{path!r} ({reason})" for path, reason in failed[:3])
    more = f"; and {len(failed) - 3} more" if len(failed) > 3 else ""
    warnings.warn(
        f"Skipped {len(failed)} of {total} image files under {folder!r} that "
        f"could not be decoded: {shown}{more}",
        stacklevel=3,
    )


def _is_upscaled(size, image_size, resize):
    """Whether fitting an image of `size` (w, h) to `image_size` enlarges it."""
    (w, h), (height, width) = size, image_size
    scales = (width / w, height / h)
    # "pad" fits the whole image in (the smaller scale); "crop" fills the
    # frame and "stretch" scales each axis, so either enlarges on any axis.
    return (min(scales) if resize == "pad" else max(scales)) > 1


def _warn_if_all_small(folder, sizes, image_size, resize):
    if not sizes or not all(_is_upscaled(s, image_size, resize) for s in sizes):
        return
    counts = collections.Counter(sizes).most_common()
    shown = ", ".join(f"{w}x{h} ({n})" for (w, h), n in counts[:5])
    more = f", and {len(counts) - 5} other sizes" if len(counts) > 5 else ""
    warnings.warn(
        f"Every one of the {len(sizes)} images under {folder!r} is smaller than "
        f"image_size={image_size} (width x height: {shown}{more}), so all are "
        f"upscaled (resize={resize!r}) and blurred; a smaller image_size trains "
        "faster on the same detail.",
        stacklevel=3,
    )


def report(folder, all_files, files, failed, sizes, decode_kwargs, class_subfolders):
    """Raises when nothing decoded; warns about skipped files and small images."""
    if len(failed) == len(files):
        where = "class subfolders of the folder" if class_subfolders else "folder"
        summary = _seen_summary(all_files, [p for p, _ in failed])
        raise ValueError(
            f"Found no decodable image in the {where} `folder` (files seen: "
            f"{summary}; image types read: {' '.join(IMAGE_EXTENSIONS)}). "
            f"Received: folder={folder!r}"
        )
    if failed:
        _warn_skipped(folder, failed, len(files))
    _warn_if_all_small(
        folder, sizes, decode_kwargs["image_size"], decode_kwargs["resize"]
    )
