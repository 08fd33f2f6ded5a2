"""Averages of a model's weights, updated in its train step: the EMA, EDM2's
power-function EMA profiles, and post-hoc reconstruction from their
snapshots. Both averages move by one update (`ema.step_toward`)."""

from keras_diffusion.averages.ema import ExponentialMovingAverage
from keras_diffusion.averages.power_ema import PowerFunctionEMA

__all__ = ["ExponentialMovingAverage", "PowerFunctionEMA"]
