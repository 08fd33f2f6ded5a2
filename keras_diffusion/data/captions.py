"""Captions of an image folder in Hugging Face's imagefolder layout.

A `metadata.jsonl` (one JSON object a line) or `metadata.csv` (a header
row) beside the images gives each image's caption: its `file_name` (the path
relative to the metadata file's folder, subfolders included:
`"cats/1.png"`) and a caption column (`text` by default, as diffusers'
`train_text_to_image.py` reads it; `caption_column` chooses another). Any
other column is ignored. A metadata file may sit in a subfolder too, naming
the files under it.

Every image needs exactly one caption and every caption an image. What does
not fit (an image without a caption, a caption without an image, a caption
given twice, a line that is not JSON, has no `file_name` or no caption
column, a caption that is not a string, a caption column the file lacks) is
named in one line each, file and line number, and all of them are raised
together as one `ValueError` before anything is decoded or written.
"""

import csv
import json
import os

METADATA_FILES = ("metadata.jsonl", "metadata.csv")
# Problems listed in the error before "and N more".
_SHOWN = 12


def metadata_files(paths):
    """The metadata files among `paths` (a folder's listing)."""
    return [p for p in paths if os.path.basename(p) in METADATA_FILES]


def check_caption_column(caption_column):
    """`caption_column` checked: a non-empty str, or `None` (no captions)."""
    if caption_column is None:
        return None
    if not isinstance(caption_column, str) or not caption_column:
        raise TypeError(
            "Argument `caption_column` must be a column name (a non-empty str) "
            f"or None. Received: caption_column={caption_column!r}"
        )
    return caption_column


def _jsonl_rows(path, problems):
    """`(line number, row)` of a metadata.jsonl; bad lines go to `problems`."""
    rows = []
    with open(path, encoding="utf-8-sig") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                problems.append((path, number, f"not JSON ({error.msg})"))
                continue
            if not isinstance(row, dict):
                problems.append(
                    (path, number, f"not a JSON object ({type(row).__name__})")
                )
                continue
            rows.append((number, row))
    return rows


def _csv_rows(path, problems):
    """`(line number, row)` of a metadata.csv; bad lines go to `problems`."""
    rows = []
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.DictReader(f)
        for row in reader:
            if None in row or None in row.values():
                problems.append(
                    (path, reader.line_num, "not as many values as header columns")
                )
                continue
            rows.append((reader.line_num, row))
    return rows


def _read_rows(path, problems):
    reader = _jsonl_rows if path.endswith(".jsonl") else _csv_rows
    try:
        return reader(path, problems)
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        problems.append((path, None, f"cannot be read ({error})"))
        return []


def _columns_of(rows):
    names = []
    for _, row in rows:
        names.extend(k for k in row if k not in names)
    return ", ".join(map(repr, names)) or "none"


def _row_caption(row, caption_column):
    """`(file_name or None, caption or None, what is wrong or None)` of a row."""
    name, caption = row.get("file_name"), row.get(caption_column)
    if not isinstance(name, str) or not name:
        return None, None, f"no file_name (columns: {_columns_of([(0, row)])})"
    if caption_column not in row:
        return name, None, f"no {caption_column!r} for {name!r}"
    if not isinstance(caption, str):
        return name, None, f"the caption of {name!r} is not a string: {caption!r}"
    return name, caption, None


def _file_captions(path, caption_column, problems):
    """`{image path: (caption, line)}` of one metadata file (the caption
    `None` on a bad line naming the image), or `None` when the whole file is
    unusable."""
    rows = _read_rows(path, problems)
    if rows and not any(caption_column in row for _, row in rows):
        problems.append(
            (
                path,
                None,
                f"no caption column {caption_column!r} (its columns: "
                f"{_columns_of(rows)}; `caption_column` chooses one)",
            )
        )
        return None
    folder, found = os.path.dirname(path), {}
    for number, row in rows:
        name, caption, wrong = _row_caption(row, caption_column)
        if wrong is not None:
            problems.append((path, number, wrong))
        if name is None:
            continue
        image = os.path.normpath(os.path.join(folder, name))
        if image in found:
            first = found[image][1]
            problems.append(
                (path, number, f"{name!r} captioned again (first on line {first})")
            )
        else:
            found[image] = (caption, number)
    return found


def _matched(folder, files, metadata, captions, problems, whole):
    """The caption of each of `files`; what does not match goes to `problems`."""
    images = {os.path.normpath(p) for p in files}
    for image, (_, number, source) in sorted(captions.items()):
        if image not in images:
            name = os.path.relpath(image, os.path.dirname(source))
            problems.append((source, number, f"{name!r}: a caption without an image"))
    where = " or ".join(os.path.relpath(p, folder) for p in metadata)
    result = []
    for path in files:
        entry = captions.get(os.path.normpath(path))
        if entry is None and whole:
            name = os.path.relpath(path, folder)
            problems.append(
                (None, None, f"{name!r}: an image without a caption in {where}")
            )
        result.append(None if entry is None else entry[0])
    return result


def _message(folder, caption_column, problems):
    lines = []
    for path, number, what in problems[:_SHOWN]:
        place = "" if path is None else os.path.relpath(path, folder)
        if number is not None:
            place += f" line {number}"
        lines.append(f"  {place}: {what}" if place else f"  {what}")
    if len(problems) > _SHOWN:
        lines.append(f"  and {len(problems) - _SHOWN} more")
    return (
        f"Found {len(problems)} problem(s) with the captions of the images in "
        f"`folder` (caption_column={caption_column!r}):\n"
        + "\n".join(lines)
        + f"\nReceived: folder={folder!r}"
    )


def read_captions(folder, files, metadata, caption_column):
    """The caption of each image file, from the folder's metadata files.

    Args:
        folder: str, the image folder (paths in messages are relative to it).
        files: the image files, in order.
        metadata: the metadata files (`metadata_files` of the listing).
        caption_column: str, the caption column.

    Returns:
        A list of str, one caption per file of `files`.

    Raises:
        ValueError: every problem, one line each (see the module docstring).
    """
    problems, captions, whole = [], {}, True
    for path in metadata:
        found = _file_captions(path, caption_column, problems)
        whole = whole and found is not None
        for image, (caption, number) in (found or {}).items():
            if image in captions:
                name = os.path.relpath(image, folder)
                first = os.path.relpath(captions[image][2], folder)
                problems.append(
                    (path, number, f"{name!r} captioned again (first in {first})")
                )
            else:
                captions[image] = (caption, number, path)
    # A file without the caption column would leave every image uncaptioned.
    result = _matched(folder, files, metadata, captions, problems, whole)
    if problems:
        raise ValueError(_message(folder, caption_column, problems))
    return result
