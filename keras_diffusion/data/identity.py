"""What identifies a data set from one process to the next.

A run resumed in the middle of an epoch skips the positions already trained
on (`keras_diffusion.data.ordered`); when files were added, removed or
renamed since, those positions name other images, and the epoch's
permutation is another. A backup therefore records `identify(dataset)`, and
a resume compares it with the data it is given
(`keras_diffusion.run.preemption.StepBackup`).

The identity is the number of examples and, for an image folder, each
file's path (relative to the folder) and size. Modification times are left
out, so a folder copied to another host keeps its identity; an edit that
keeps a file's size is not seen.
"""

import hashlib
import os


def identify(dataset):
    """`{"examples": n, "files": digest or None}` of a `keras_diffusion.data`
    dataset (its `num_examples` and `file_paths`), or `None` for data that
    does not say how many examples it has (nothing to compare)."""
    examples = getattr(dataset, "num_examples", None)
    if examples is None:
        return None
    paths = getattr(dataset, "file_paths", None)
    return {"examples": int(examples), "files": _files_digest(paths)}


def _files_digest(paths):
    if not paths:
        return None
    folder = os.path.commonpath([os.path.dirname(os.fspath(p)) for p in paths])
    digest = hashlib.sha256()
    for path in paths:
        size = os.stat(path).st_size
        digest.update(f"{os.path.relpath(path, folder)}\0{size}\n".encode())
    return digest.hexdigest()


def changed(saved, current):
    """Whether two identities name different data (`False` when either is
    unknown)."""
    if not isinstance(saved, dict) or current is None:
        return False
    return (saved.get("examples"), saved.get("files")) != (
        current["examples"],
        current["files"],
    )


def describe_change(saved, current):
    """The change from `saved` to `current`, in a few words."""
    then, now = saved.get("examples"), current["examples"]
    if then != now:
        return f"{then} examples then, {now} now"
    return f"the same {now} examples, but other files or file sizes"
