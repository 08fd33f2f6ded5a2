"""The averages a `DiffusionModel` keeps of its trainable weights."""

from keras_diffusion.averages.ema import ExponentialMovingAverage
from keras_diffusion.averages.power_ema import PowerFunctionEMA


def build(variables, ema_decay, ema_warmup, sigma_rels):
    """`(ema, power_ema)` of `variables`: an `ExponentialMovingAverage` of
    `ema_decay` (`None`: no EMA, `None`) and a `PowerFunctionEMA` of the
    widths `sigma_rels` (`None`: none, `None`)."""
    ema = None
    if ema_decay is not None:
        ema = ExponentialMovingAverage(
            variables, decay=ema_decay, warmup=ema_warmup, name="ema"
        )
    power_ema = None
    if sigma_rels is not None:
        power_ema = PowerFunctionEMA(variables, sigma_rels, name="power_ema")
    return ema, power_ema
