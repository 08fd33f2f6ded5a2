"""The trainer's policy, kept apart from the model as Keras keeps
`trainers/`: `DiffusionModel`'s `compile`, `fit` and train functions
(`trainer`), XLA or graph mode chosen by timing both (`jit_choice`), XLA's
fallback (`xla`), the steps a compiled call runs (`execution`) and what
`fit` feeds Keras (`fit_input`)."""

from keras_diffusion.trainers.trainer import Trainer

__all__ = ["Trainer"]
