"""Mean-flow sampling: one call from noise to data, or a few exact jumps."""

import keras

from keras_diffusion.samplers.consistency import ConsistencySampler


@keras.saving.register_keras_serializable(package="keras_diffusion")
class MeanFlowSampler(ConsistencySampler):
    """The sampler of a `MeanFlowSchedule`: each call a jump down an interval.

    Each step evaluates the network once at level s with the interval down
    to the next level s_next and jumps there, z_next = z - (s - s_next) u:
    the mean velocity over the interval makes the jump exact where the
    network is (Geng et al., 2025). One step goes from the noise (s = 1) to
    the data in one call; more steps split the path. No fresh noise is
    drawn. Classifier-free guidance, when a caller asks for it, takes two
    calls a step.

    Args:
        num_steps: int >= 1, the model calls (and jumps). Defaults to `1`.
        levels: where each jump starts, as `ConsistencySampler`'s: `None`
            (`1, 1 - 1/n, ..., 1/n`) or `num_steps` decreasing levels in
            (0, 1]; each jump ends where the next starts, the last at the
            data. Defaults to `None`.

    Example:

    ```python
    two_jumps = keras_diffusion.MeanFlowSampler(2, levels=(1.0, 0.6))
    images = model.generate(16, sampler=two_jumps, seed=0)
    ```

    Reference:
        - [Geng et al., 2025](https://arxiv.org/abs/2505.13447) (MeanFlow)
    """

    name = "meanflow"
    # It steps on the meanflow family alone.
    steps_on = {"meanflow": ()}

    def __init__(self, num_steps=1, levels=None):
        super().__init__(num_steps, levels)

    def _plan(self, schedule):
        # With x0 = z - s u and eps = z + (1 - s) u (the velocity's reading),
        # z - (s - s_next) u = (1 - s_next) x0 + s_next eps.
        return self._level_steps(schedule, fresh_noise=False)
