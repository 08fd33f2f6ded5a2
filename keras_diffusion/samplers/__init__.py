"""Samplers: reverse processes from noise to images, each one compiled loop.

`get(name, **kwargs)` builds one by its short name, like
`keras.optimizers.get`.
"""

import keras

from keras_diffusion.samplers.base import PREDICTION_TYPES, TIMESTEP_SPACINGS, Sampler
from keras_diffusion.samplers.consistency import ConsistencySampler
from keras_diffusion.samplers.ddim import DDIMSampler
from keras_diffusion.samplers.ddpm import DDPMSampler
from keras_diffusion.samplers.dpm_solver import DPMSolverSampler
from keras_diffusion.samplers.euler import EulerSampler
from keras_diffusion.samplers.heun import HeunSampler
from keras_diffusion.samplers.meanflow import MeanFlowSampler
from keras_diffusion.samplers.repaint import RePaintSampler
from keras_diffusion.utils.checks import check_choice

# The short names of `get`, the `--sampler` flags and `TrainConfig.sampler`.
SAMPLERS = {
    "ddim": DDIMSampler,
    "ddpm": DDPMSampler,
    "dpm": DPMSolverSampler,
    "euler": EulerSampler,
    "heun": HeunSampler,
    "repaint": RePaintSampler,
    "consistency": ConsistencySampler,
    "meanflow": MeanFlowSampler,
}


def get(name, **kwargs):
    """Returns a sampler from its short name, its config or itself.

    Args:
        name: str, `"ddim"`, `"ddpm"`, `"dpm"` (DPM-Solver++ 2M),
            `"euler"`, `"heun"`, `"repaint"`, `"consistency"` or
            `"meanflow"`; or a dict from
            `keras.saving.serialize_keras_object`; or a `Sampler`, returned
            as it is.
        **kwargs: the sampler's constructor arguments, with a name only.

    Returns:
        A `Sampler`.

    Example:

    ```python
    sampler = keras_diffusion.samplers.get("ddim", num_steps=20)
    images = model.generate(16, sampler=sampler, seed=0)
    ```
    """
    if isinstance(name, str):
        check_choice("name", name, SAMPLERS)
        return SAMPLERS[name](**kwargs)
    if kwargs:
        raise ValueError(
            "Keyword arguments go with a sampler name only. "
            f"Received: name={name!r}, kwargs={kwargs!r}"
        )
    sampler = name
    if isinstance(name, dict):
        sampler = keras.saving.deserialize_keras_object(name)
    if not isinstance(sampler, Sampler):
        raise TypeError(
            "Argument `name` must be a sampler name, a serialized sampler or a "
            f"Sampler. Received: name={name!r}"
        )
    return sampler


__all__ = [
    "ConsistencySampler",
    "DDIMSampler",
    "DDPMSampler",
    "DPMSolverSampler",
    "EulerSampler",
    "HeunSampler",
    "MeanFlowSampler",
    "PREDICTION_TYPES",
    "RePaintSampler",
    "SAMPLERS",
    "Sampler",
    "TIMESTEP_SPACINGS",
    "get",
]
