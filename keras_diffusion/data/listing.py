"""Listing an image folder: its files, its class subfolders, its captions.

The listing is sorted and skips hidden files and folders; the captions come
from the folder's imagefolder metadata (`keras_diffusion.data.captions`).
"""

import os

from keras_diffusion.data import captions as captions_lib


def list_files(folder, follow_links):
    """All files under `folder`, sorted, skipping hidden files and folders
    (names starting with "."; macOS's `._name.png` copies among them)."""
    found = []
    for root, dirs, files in os.walk(folder, followlinks=follow_links):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found.extend(
            os.path.join(root, name)
            for name in sorted(files)
            if not name.startswith(".")
        )
    return found


def class_files(folder, follow_links):
    """`(class_names, files, labels)` of a folder of class subfolders."""
    class_names = sorted(
        entry.name
        for entry in os.scandir(folder)
        if entry.is_dir(follow_symlinks=follow_links) and not entry.name.startswith(".")
    )
    files, labels = [], []
    for class_id, class_name in enumerate(class_names):
        found = list_files(os.path.join(folder, class_name), follow_links)
        files.extend(found)
        labels.extend([class_id] * len(found))
    return class_names, files, labels


def captions(folder, all_files, files, caption_column):
    """The captions of `files` from the folder's metadata, or `None`."""
    metadata = captions_lib.metadata_files(all_files)
    if not metadata:
        return None
    return captions_lib.read_captions(folder, files, metadata, caption_column)
