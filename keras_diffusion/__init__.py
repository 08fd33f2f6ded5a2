"""keras_diffusion: train image diffusion models with Keras `fit`, fast.

It runs on Keras' TensorFlow backend only, and says so at import otherwise.
The layers and what may import what: docs/architecture.md.
"""

from keras_diffusion.utils.checks import check_keras_backend

check_keras_backend()

from keras_diffusion import (  # noqa: E402
    callbacks,
    conditioning,
    data,
    diagnostics,
    distribute,
    interop,
    latent,
    metrics,
    samplers,
)
from keras_diffusion.conditioning import (  # noqa: E402
    FrozenTextConditioning,
    TextConditioning,
)
from keras_diffusion.interop import (  # noqa: E402
    from_diffusers,
    from_keras_hub,
    to_diffusers,
    to_keras_hub,
)
from keras_diffusion.models import (  # noqa: E402
    ControlNet,
    DiffusionModel,
    UNet,
    enable_controlnet,
    enable_lora,
    merge_lora,
)
from keras_diffusion.run import TrainConfig, train  # noqa: E402
from keras_diffusion.run.posthoc import posthoc_ema  # noqa: E402
from keras_diffusion.samplers import (  # noqa: E402
    ConsistencySampler,
    DDIMSampler,
    DDPMSampler,
    DPMSolverSampler,
    EulerSampler,
    HeunSampler,
    MeanFlowSampler,
)
from keras_diffusion.schedules import (  # noqa: E402
    ConsistencySchedule,
    EDMSchedule,
    FlowMatchSchedule,
    MeanFlowSchedule,
    NoiseSchedule,
)

__version__ = "0.1.0"

__all__ = [
    "ConsistencySampler",
    "ControlNet",
    "ConsistencySchedule",
    "DDIMSampler",
    "DDPMSampler",
    "DPMSolverSampler",
    "DiffusionModel",
    "EDMSchedule",
    "FlowMatchSchedule",
    "FrozenTextConditioning",
    "EulerSampler",
    "HeunSampler",
    "MeanFlowSampler",
    "MeanFlowSchedule",
    "NoiseSchedule",
    "TextConditioning",
    "TrainConfig",
    "UNet",
    "__version__",
    "callbacks",
    "conditioning",
    "data",
    "diagnostics",
    "distribute",
    "enable_controlnet",
    "enable_lora",
    "from_diffusers",
    "from_keras_hub",
    "interop",
    "latent",
    "merge_lora",
    "metrics",
    "posthoc_ema",
    "samplers",
    "to_diffusers",
    "to_keras_hub",
    "train",
]
