"""Configurable: an object's config is its constructor's arguments."""

import pytest

import keras_diffusion as kd
from keras_diffusion.utils.configurable import Configurable, constructor_arguments


class _Base(Configurable):
    def __init__(self, width=2, depth=3):
        self.width, self.depth = width, depth


class _Passing(_Base):
    def __init__(self, *, gain=1.0, **base_options):
        super().__init__(**base_options)
        self.gain = gain


class _Forgetful(_Base):
    def __init__(self, scale=1.0, **base_options):
        super().__init__(**base_options)


def test_the_config_reaches_through_kwargs_to_the_base():
    assert constructor_arguments(_Passing) == ["width", "depth", "gain"]
    made = _Passing(gain=0.5, depth=4)
    assert made.get_config() == {"width": 2, "depth": 4, "gain": 0.5}
    again = _Passing.from_config(made.get_config())
    assert repr(again) == "_Passing(width=2, depth=4, gain=0.5)"


def test_an_argument_not_kept_is_named():
    with pytest.raises(NotImplementedError, match=r"_Forgetful .*\['scale'\]"):
        _Forgetful().get_config()


@pytest.mark.parametrize(
    "process",
    [
        kd.NoiseSchedule(500, "cosine", prediction_type="v_prediction"),
        kd.EDMSchedule(sigma_data=0.7, p_mean=-0.6),
        kd.FlowMatchSchedule(shift=3.0),
        kd.ConsistencySchedule(curriculum_steps=8, shift=2.0),
    ],
    ids=lambda process: type(process).__name__,
)
def test_each_process_is_built_again_from_its_config(process):
    again = type(process).from_config(process.get_config())
    assert again.get_config() == process.get_config()
    assert repr(again) == repr(process)


class _Extended(kd.EDMSchedule):
    """The Keras pattern: its own argument, kept privately, added to its
    base's config."""

    def __init__(self, extra, **edm_options):
        super().__init__(**edm_options)
        self._extra = extra

    def get_config(self):
        return {**super().get_config(), "extra": self._extra}


def test_a_subclass_adds_its_own_arguments_to_its_bases_config():
    made = _Extended(3, rho=5.0)
    assert made.get_config() == {**kd.EDMSchedule(rho=5.0).get_config(), "extra": 3}
    assert _Extended.from_config(made.get_config())._extra == 3


def test_a_long_list_is_shown_by_its_length():
    betas = [0.01] * 20
    shown = repr(kd.NoiseSchedule(20, trained_betas=betas))
    assert "trained_betas=<20 values>" in shown and "0.01" not in shown
    assert (
        len(kd.NoiseSchedule(20, trained_betas=betas).get_config()["trained_betas"])
        == 20
    )
