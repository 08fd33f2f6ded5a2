"""The device a benchmark process runs on: `select_device`, imported by the
main process (`scripts/benchmark.py`) and by each Keras worker of the peer
comparison (`benchmarks.peer_jobs`)."""

import tensorflow as tf


def select_device(device):
    """Hides GPUs for `"cpu"`; returns whether a GPU will be used.

    Call it before TensorFlow runs anything: devices cannot be hidden later.
    """
    if device == "cpu":
        tf.config.set_visible_devices([], "GPU")
    return bool(tf.config.list_physical_devices("GPU")) and device != "cpu"
