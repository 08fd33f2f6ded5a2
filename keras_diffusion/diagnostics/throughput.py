"""`ThroughputLogger`: images/s of each epoch of `fit`, with no device sync."""

import time

import keras

from keras_diffusion.utils.checks import check_int


class ThroughputLogger(keras.callbacks.Callback):
    """Logs images/s of each epoch of `fit`, adding no device sync.

    It reads the clock at the start and end of each epoch and counts the step
    indices `fit` reports; it never reads a tensor, so Keras can keep
    dispatching steps asynchronously. The rate is added to the epoch's logs as
    `images_per_sec` (so it lands in `History`) and printed.

    Args:
        batch_size: int, images per step (the global batch under a
            distribution strategy).
        print_fn: callable taking a str, or `None` to only log. Defaults to
            `print`.

    Example:

    ```python
    model.fit(dataset, epochs=5, callbacks=[ThroughputLogger(batch_size=64)])
    ```
    """

    # Only counts integers in on_train_batch_end: safe off the main thread,
    # and right once a compiled call (the index is the call's last step).
    async_safe = True
    per_call_batch_hooks = True

    def __init__(self, batch_size, print_fn=print):
        super().__init__()
        self.batch_size = check_int("batch_size", batch_size, 1)
        self.print_fn = print_fn
        self._start = None
        self._steps = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._steps = 0
        self._start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        # `batch` is the index of the last step run; logs are left untouched.
        self._steps = batch + 1

    def on_epoch_end(self, epoch, logs=None):
        # Keras has already fetched the epoch's logs, so the device is done.
        elapsed = time.perf_counter() - self._start
        rate = self._steps * self.batch_size / max(elapsed, 1e-9)
        if logs is not None:
            logs["images_per_sec"] = rate
        if self.print_fn is not None:
            self.print_fn(
                f"epoch {epoch + 1}: {rate:.1f} images/s "
                f"({self._steps} steps in {elapsed:.2f} s)"
            )
