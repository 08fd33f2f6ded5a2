"""The data functions refuse bad input with a clear error (tests/refusal.py)."""

import numpy as np
import pytest

from keras_diffusion import data as kd_data
from tests import refusal
from tests.refusal import zeros


class Context:
    """The folders the cases of one test read."""

    def __init__(self, tmp_path):
        self.tmp_path = tmp_path

    def empty_folder(self):
        folder = self.tmp_path / "empty"
        folder.mkdir(exist_ok=True)
        (folder / "notes.txt").write_text("no images here")
        return str(folder)


DATA_CASES = [
    (
        "boolean images",
        lambda c: kd_data.from_arrays(np.zeros((4, 8, 8), bool)),
        TypeError,
        ["images", "dtype=bool"],
    ),
    (
        "empty images",
        lambda c: kd_data.from_arrays(np.zeros((0, 8, 8), "uint8")),
        ValueError,
        ["images", "shape=(0, 8, 8)"],
    ),
    (
        "images of rank 2",
        lambda c: kd_data.from_arrays(np.zeros((8, 8), "uint8")),
        ValueError,
        ["images", "shape=(8, 8)"],
    ),
    (
        "channels first",
        lambda c: kd_data.from_arrays(np.zeros((4, 3, 8, 8), "uint8")),
        ValueError,
        ["images", "shape=(4, 3, 8, 8)"],
    ),
    (
        "ragged images",
        lambda c: kd_data.from_arrays([[1, 2], [3]]),
        ValueError,
        ["images", "list"],
    ),
    (
        "float images out of range",
        lambda c: kd_data.from_arrays(np.full((4, 8, 8), 7.0)),
        ValueError,
        ["value_range=None", "max=7"],
    ),
    (
        "value_range too narrow",
        lambda c: kd_data.from_arrays(np.full((4, 8, 8), 7.0), value_range=(0, 1)),
        ValueError,
        ["value_range=(0.0, 1.0)"],
    ),
    (
        "batch_size 0",
        lambda c: kd_data.from_arrays(zeros((4, 8, 8)), batch_size=0),
        ValueError,
        ["batch_size=0"],
    ),
    (
        "batch_size float",
        lambda c: kd_data.from_arrays(zeros((4, 8, 8)), batch_size=2.0),
        TypeError,
        ["batch_size=2.0"],
    ),
    (
        "negative labels",
        lambda c: kd_data.from_arrays(zeros((4, 8, 8)), labels=[-1, 0, 0, 0]),
        ValueError,
        ["labels", "min=-1"],
    ),
    (
        "labels count",
        lambda c: kd_data.from_arrays(zeros((4, 8, 8)), labels=[0, 1]),
        ValueError,
        ["labels", "shape=(2,)"],
    ),
    (
        "shuffle str",
        lambda c: kd_data.from_arrays(zeros((4, 8, 8)), shuffle="yes"),
        TypeError,
        ["shuffle='yes'"],
    ),
    (
        "shuffle_buffer_size 0",
        lambda c: kd_data.from_arrays(zeros((4, 8, 8)), shuffle_buffer_size=0),
        ValueError,
        ["shuffle_buffer_size=0"],
    ),
    (
        "image_size 0",
        lambda c: kd_data.from_arrays(zeros((4, 8, 8)), image_size=0),
        ValueError,
        ["image_size=0"],
    ),
    (
        "seed str",
        lambda c: kd_data.from_arrays(zeros((4, 8, 8)), seed="1"),
        TypeError,
        ["seed='1'"],
    ),
    (
        "missing folder",
        lambda c: kd_data.from_directory(str(c.tmp_path / "nope"), 4, 8),
        ValueError,
        ["folder=", "nope"],
    ),
    (
        "folder without images",
        lambda c: kd_data.from_directory(c.empty_folder(), 4, 8),
        ValueError,
        ["folder=", "empty"],
    ),
    (
        "folder path int",
        lambda c: kd_data.from_directory(3, 4, 8),
        TypeError,
        ["folder=3"],
    ),
    (
        "folder channels",
        lambda c: kd_data.from_directory(c.empty_folder(), 4, 8, channels=2),
        ValueError,
        ["channels=2"],
    ),
    (
        "folder background",
        lambda c: kd_data.from_directory(c.empty_folder(), 4, 8, background="0,0"),
        ValueError,
        ["background='0,0'"],
    ),
    (
        "folder resize",
        lambda c: kd_data.from_directory(c.empty_folder(), 4, 8, resize="fill"),
        ValueError,
        ["resize='fill'"],
    ),
    (
        "unknown preset",
        lambda c: kd_data.get_preset("imagenet"),
        ValueError,
        ["name='imagenet'"],
    ),
    (
        "preset name list",
        lambda c: kd_data.get_preset(["digits"]),
        ValueError,
        ["name=['digits']"],
    ),
    (
        "caption column not a name",
        lambda c: kd_data.from_directory(c.empty_folder(), 4, 8, caption_column=3),
        TypeError,
        ["caption_column", "caption_column=3"],
    ),
    (
        "unknown dataset",
        lambda c: kd_data.make_dataset("imagenet"),
        ValueError,
        ["name='imagenet'"],
    ),
    (
        "folder without data_dir",
        lambda c: kd_data.make_dataset("folder"),
        ValueError,
        ["data_dir=None"],
    ),
    (
        "preset channels",
        lambda c: kd_data.make_dataset("digits", channels=3),
        ValueError,
        ["channels=3"],
    ),
    (
        "unknown keras dataset",
        lambda c: kd_data.from_keras_dataset("svhn"),
        ValueError,
        ["name='svhn'"],
    ),
    (
        "PyDataset empty",
        lambda c: kd_data.ArrayPyDataset(np.zeros((0, 8, 8), "uint8")),
        ValueError,
        ["images", "shape=(0, 8, 8)"],
    ),
    (
        "PyDataset flip str",
        lambda c: kd_data.ArrayPyDataset(zeros((4, 8, 8)), flip="no"),
        TypeError,
        ["flip='no'"],
    ),
]


@pytest.mark.parametrize("call, error, fragments", refusal.params(DATA_CASES))
def test_bad_input_is_refused_with_a_clear_message(tmp_path, call, error, fragments):
    refusal.assert_refused_twice(lambda: call(Context(tmp_path)), error, fragments)
