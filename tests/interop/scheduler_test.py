"""Scheduler settings survive from_diffusers and to_diffusers, both ways.

Each case is a scheduler config that sets one setting: read as
`from_diffusers` reads it, the sampler (or the schedule, or the prediction
type) must carry it; written back as `to_diffusers` writes it, the config
must hold it again and read back to the same sampler. A few cases go the
whole way through pipeline folders. No torch needed;
`test_diffusers_steps_over_the_same_timesteps` runs diffusers' own
schedulers when it is installed.
"""

import json
import os
import shutil
import warnings

import numpy as np
import pytest

import keras_diffusion
from keras_diffusion import interop
from keras_diffusion.interop import diffusers_scheduler
from keras_diffusion.samplers import (
    DDIMSampler,
    DDPMSampler,
    DPMSolverSampler,
    EulerSampler,
    HeunSampler,
)

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
# Unconditional, so that no export warns of class labels.
PIPELINE = os.path.join(FIXTURES, "pipeline_legacy_names_fp16")
SAMPLERS = {
    "DDPMScheduler": DDPMSampler,
    "DDIMScheduler": DDIMSampler,
    "DPMSolverMultistepScheduler": DPMSolverSampler,
    "EulerDiscreteScheduler": EulerSampler,
    "HeunDiscreteScheduler": HeunSampler,
}
# (scheduler class, one setting): every setting a sampler or the schedule
# holds. The betas and the prediction type are the model's own.
CASES = [
    ("DDPMScheduler", {}),
    ("DDPMScheduler", {"timestep_spacing": "trailing"}),
    ("DDPMScheduler", {"timestep_spacing": "linspace"}),
    ("DDPMScheduler", {"steps_offset": 1}),
    ("DDPMScheduler", {"clip_sample": False}),
    ("DDPMScheduler", {"clip_sample_range": 2.5}),
    ("DDPMScheduler", {"variance_type": "fixed_large"}),
    ("DDPMScheduler", {"variance_type": "fixed_small_log"}),
    ("DDPMScheduler", {"prediction_type": "v_prediction"}),
    ("DDPMScheduler", {"prediction_type": "sample"}),
    ("DDPMScheduler", {"rescale_betas_zero_snr": True}),
    ("DDPMScheduler", {"beta_schedule": "scaled_linear"}),
    ("DDPMScheduler", {"beta_schedule": "squaredcos_cap_v2"}),
    ("DDPMScheduler", {"beta_schedule": "sigmoid"}),
    ("DDPMScheduler", {"beta_start": 0.0002, "beta_end": 0.03}),
    ("DDPMScheduler", {"num_train_timesteps": 500}),
    (
        "DDPMScheduler",
        {"num_train_timesteps": 5, "trained_betas": [0.01, 0.1, 0.2, 0.3, 0.5]},
    ),
    ("DDIMScheduler", {}),
    ("DDIMScheduler", {"timestep_spacing": "trailing", "steps_offset": 1}),
    ("DDIMScheduler", {"timestep_spacing": "linspace"}),
    ("DDIMScheduler", {"steps_offset": 1}),
    ("DDIMScheduler", {"clip_sample": False}),
    ("DDIMScheduler", {"clip_sample_range": 0.5}),
    ("DDIMScheduler", {"set_alpha_to_one": False}),
    ("DDIMScheduler", {"rescale_betas_zero_snr": True}),
    ("DPMSolverMultistepScheduler", {}),
    ("DPMSolverMultistepScheduler", {"timestep_spacing": "trailing"}),
    ("DPMSolverMultistepScheduler", {"timestep_spacing": "leading"}),
    ("DPMSolverMultistepScheduler", {"steps_offset": 1}),
    ("DPMSolverMultistepScheduler", {"use_karras_sigmas": True}),
    ("DPMSolverMultistepScheduler", {"final_sigmas_type": "sigma_min"}),
    ("DPMSolverMultistepScheduler", {"lower_order_final": False}),
    ("DPMSolverMultistepScheduler", {"prediction_type": "v_prediction"}),
    ("EulerDiscreteScheduler", {}),
    ("EulerDiscreteScheduler", {"timestep_spacing": "trailing"}),
    ("EulerDiscreteScheduler", {"steps_offset": 1}),
    ("EulerDiscreteScheduler", {"use_karras_sigmas": True}),
    ("EulerDiscreteScheduler", {"rescale_betas_zero_snr": True}),
    ("HeunDiscreteScheduler", {}),
    ("HeunDiscreteScheduler", {"timestep_spacing": "leading"}),
    ("HeunDiscreteScheduler", {"use_karras_sigmas": True}),
    ("HeunDiscreteScheduler", {"clip_sample": True}),
]
_SCHEDULE_KEYS = {
    "num_train_timesteps": "num_train_timesteps",
    "beta_start": "beta_start",
    "beta_end": "beta_end",
    "beta_schedule": "beta_schedule",
    "rescale_betas_zero_snr": "rescale_zero_terminal_snr",
    "trained_betas": "trained_betas",
}


def write_pipeline(folder, scheduler):
    """A copy of PIPELINE with `scheduler` as its scheduler config."""
    shutil.copytree(PIPELINE, folder)
    with open(os.path.join(folder, "scheduler", "scheduler_config.json"), "w") as f:
        json.dump(scheduler, f)
    with open(os.path.join(folder, "model_index.json")) as f:
        index = json.load(f)
    index["scheduler"] = ["diffusers", scheduler["_class_name"]]
    with open(os.path.join(folder, "model_index.json"), "w") as f:
        json.dump(index, f)
    return str(folder)


def _quietly(function, *args):
    """`function(*args)`, which must warn of no scheduler setting."""
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        result = function(*args)
    named = [str(w.message) for w in record if "do not implement" in str(w.message)]
    assert not named, named
    return result


def _load_quietly(folder):
    return _quietly(keras_diffusion.from_diffusers, folder)


def _exported_scheduler(model, folder):
    _quietly(keras_diffusion.to_diffusers, model, folder)
    with open(os.path.join(folder, "scheduler", "scheduler_config.json")) as f:
        return json.load(f)


class _Read:
    """What `from_diffusers` makes of a scheduler config, without a U-Net."""

    def __init__(self, config):
        settings = _quietly(diffusers_scheduler.read_scheduler, config, "'x'")
        self.schedule = keras_diffusion.NoiseSchedule(**settings["schedule_kwargs"])
        self.prediction_type = self.schedule.prediction_type
        self.sampler = settings["sampler_class"](**settings["sampler_kwargs"])

    def written(self):
        """(class name, config) as `to_diffusers` writes them."""
        return diffusers_scheduler.scheduler_config(self.schedule, self.sampler)


def _held(model, key):
    """The loaded model's value of a scheduler config key."""
    if key == "prediction_type":
        return model.prediction_type
    if key in _SCHEDULE_KEYS:
        value = getattr(model.schedule, _SCHEDULE_KEYS[key])
        return "squaredcos_cap_v2" if value == "cosine" else value
    return model.sampler.get_config()[key]


def _assert_holds(config, setting):
    for key, value in setting.items():
        if key == "trained_betas":
            np.testing.assert_allclose(config[key], value)
        else:
            assert config[key] == value, key


@pytest.mark.parametrize(
    "class_name, setting", CASES, ids=[f"{c}-{s}" for c, s in CASES]
)
def test_a_setting_survives_the_round_trip(class_name, setting):
    read = _Read({"_class_name": class_name, **setting})
    assert type(read.sampler) is SAMPLERS[class_name]
    _assert_holds({key: _held(read, key) for key in setting}, setting)
    written_class, written = read.written()
    assert written_class == written["_class_name"] == class_name
    _assert_holds(written, setting)
    again = _Read(json.loads(json.dumps(written)))
    assert again.sampler.get_config() == read.sampler.get_config()
    assert again.schedule.get_config() == read.schedule.get_config()
    assert again.prediction_type == read.prediction_type
    print(f"\n{class_name} {setting}: round trip equal")


@pytest.mark.parametrize(
    "class_name, setting",
    [
        ("DDIMScheduler", {"timestep_spacing": "trailing", "steps_offset": 1}),
        (
            "DDPMScheduler",
            {"timestep_spacing": "linspace", "variance_type": "fixed_large"},
        ),
        (
            "DPMSolverMultistepScheduler",
            {"use_karras_sigmas": True, "prediction_type": "sample"},
        ),
    ],
)
def test_a_setting_survives_the_folders(class_name, setting, tmp_path):
    folder = write_pipeline(tmp_path / "in", {"_class_name": class_name, **setting})
    model = _load_quietly(folder)
    assert type(model.sampler) is SAMPLERS[class_name]
    _assert_holds({key: _held(model, key) for key in setting}, setting)
    written = _exported_scheduler(model, str(tmp_path / "out"))
    assert written["_class_name"] == class_name
    _assert_holds(written, setting)
    with open(tmp_path / "out" / "model_index.json") as f:
        assert json.load(f)["scheduler"] == ["diffusers", class_name]
    reloaded = _load_quietly(str(tmp_path / "out"))
    assert reloaded.sampler.get_config() == model.sampler.get_config()
    assert reloaded.prediction_type == model.prediction_type


def test_the_figures_of_diffusers_set_timesteps():
    # diffusers' timesteps for 20 steps (DDIMScheduler trailing with
    # steps_offset=1; DDPMScheduler linspace); the old import stepped over
    # 950, 900, 850, ... for both.
    ddim = _Read(
        {
            "_class_name": "DDIMScheduler",
            "timestep_spacing": "trailing",
            "steps_offset": 1,
        }
    )
    config = {**ddim.sampler.get_config(), "num_steps": 20}
    np.testing.assert_array_equal(
        DDIMSampler(**config).timesteps(ddim.schedule)[:3], [999, 949, 899]
    )
    ddpm = _Read(
        {
            "_class_name": "DDPMScheduler",
            "timestep_spacing": "linspace",
            "variance_type": "fixed_large",
        }
    )
    config = {**ddpm.sampler.get_config(), "num_steps": 20}
    np.testing.assert_array_equal(
        DDPMSampler(**config).timesteps(ddpm.schedule)[:3], [999, 946, 894]
    )
    assert ddpm.sampler.variance_type == "fixed_large"


@pytest.mark.parametrize(
    "class_name", ["EulerDiscreteScheduler", "HeunDiscreteScheduler"]
)
def test_a_scheduler_no_pipeline_runs_loads_and_is_refused_at_export(
    class_name, tmp_path
):
    # No unconditional diffusers pipeline runs Euler or Heun on a VP schedule
    # (docs/interop.md): the model loads with its sampler; the export names
    # `sampler` and the samplers that export, in one line, and writes nothing.
    folder = write_pipeline(tmp_path / "in", {"_class_name": class_name})
    model = _load_quietly(folder)
    assert type(model.sampler) is SAMPLERS[class_name]
    with pytest.raises(ValueError, match="Argument `sampler`") as error:
        keras_diffusion.to_diffusers(model, str(tmp_path / "out"))
    message = str(error.value)
    assert class_name in message and "sampler='ddim', 'dpm' or 'ddpm'" in message
    assert "\n" not in message and not (tmp_path / "out").exists()
    keras_diffusion.to_diffusers(model, str(tmp_path / "out"), sampler="dpm")


def test_a_scheduler_config_without_a_class_takes_the_pipelines(tmp_path):
    folder = write_pipeline(tmp_path / "in", {"_class_name": "EulerDiscreteScheduler"})
    path = os.path.join(folder, "scheduler", "scheduler_config.json")
    with open(path, "w") as f:
        json.dump({"timestep_spacing": "trailing"}, f)
    model = _load_quietly(folder)
    assert type(model.sampler) is EulerSampler
    assert model.sampler.timestep_spacing == "trailing"


def test_the_heun_schedulers_own_betas_fill_its_gaps():
    model = _Read({"_class_name": "HeunDiscreteScheduler"})
    assert (model.schedule.beta_start, model.schedule.beta_end) == (0.00085, 0.012)


def test_steps_and_eta_travel_under_the_private_key():
    read = _Read({"_class_name": "DDIMScheduler"})
    read.sampler = DDIMSampler(num_steps=20, eta=0.5, timestep_spacing="trailing")
    _, written = read.written()
    assert written["_keras_diffusion"] == {"num_steps": 20, "eta": 0.5}
    assert _Read(written).sampler.get_config() == read.sampler.get_config()


def test_ddims_rule_travels_only_where_it_is_not_diffusers():
    # A DDIMScheduler config means diffusers' t - T // n; the next-listed rule
    # of a saved DDIMSampler has no config key and travels privately.
    read = _Read({"_class_name": "DDIMScheduler", "timestep_spacing": "linspace"})
    assert read.sampler.previous_timestep == "diffusers"
    assert "previous_timestep" not in read.written()[1]["_keras_diffusion"]
    read.sampler = DDIMSampler(
        10, timestep_spacing="linspace", previous_timestep="next_listed"
    )
    _, written = read.written()
    assert written["_keras_diffusion"]["previous_timestep"] == "next_listed"
    assert _Read(written).sampler.get_config() == read.sampler.get_config()


@pytest.mark.parametrize(
    "class_name, setting, named",
    [
        ("DDPMScheduler", {"thresholding": True}, "thresholding=True"),
        (
            "DDPMScheduler",
            {"variance_type": "learned_range"},
            "variance_type='learned_range'",
        ),
        ("DDIMScheduler", {"thresholding": True}, "thresholding=True"),
        ("DPMSolverMultistepScheduler", {"solver_order": 3}, "solver_order=3"),
        (
            "DPMSolverMultistepScheduler",
            {"algorithm_type": "sde-dpmsolver++"},
            "algorithm_type='sde-dpmsolver++'",
        ),
        ("DPMSolverMultistepScheduler", {"euler_at_final": True}, "euler_at_final"),
        (
            "EulerDiscreteScheduler",
            {"interpolation_type": "log_linear"},
            "interpolation_type='log_linear'",
        ),
        ("HeunDiscreteScheduler", {"use_beta_sigmas": True}, "use_beta_sigmas=True"),
        ("PNDMScheduler", {"skip_prk_steps": True}, "PNDMScheduler"),
    ],
)
def test_a_setting_no_sampler_implements_is_named(class_name, setting, named):
    config = {"_class_name": class_name, **setting}
    with pytest.warns(UserWarning, match="do not implement") as record:
        settings = diffusers_scheduler.read_scheduler(config, "'x'")
    message = str(record[0].message)
    assert named in message and "\n" not in message
    expected = SAMPLERS.get(class_name, DDIMSampler)
    assert settings["sampler_class"] is expected
    assert expected.__name__ in message


def test_the_warning_comes_with_the_loaded_model(tmp_path):
    folder = write_pipeline(
        tmp_path / "in", {"_class_name": "DDPMScheduler", "thresholding": True}
    )
    with pytest.warns(UserWarning, match="thresholding=True"):
        model = keras_diffusion.from_diffusers(folder)
    written = _exported_scheduler(model, str(tmp_path / "out"))
    assert written["thresholding"] is False  # what the sampler runs


def test_a_setting_of_the_wrong_kind_is_refused(tmp_path):
    folder = write_pipeline(
        tmp_path / "in", {"_class_name": "DDIMScheduler", "steps_offset": -1}
    )
    with pytest.raises(ValueError, match="Cannot build the model.*steps_offset=-1"):
        keras_diffusion.from_diffusers(folder)


def test_a_model_without_a_sampler_exports_generates_default(tmp_path, make_unet):
    model = keras_diffusion.DiffusionModel(make_unet(), keras_diffusion.NoiseSchedule())
    written = _exported_scheduler(model, str(tmp_path / "out"))
    assert written["_class_name"] == "DDIMScheduler"
    assert written["clip_sample"] is False and written["timestep_spacing"] == "leading"
    reloaded = _load_quietly(str(tmp_path / "out"))
    assert reloaded.sampler.get_config() == DDIMSampler().get_config()


def test_export_with_another_sampler_and_clip(tmp_path, make_unet):
    model = keras_diffusion.DiffusionModel(make_unet(), keras_diffusion.NoiseSchedule())
    keras_diffusion.to_diffusers(
        model, str(tmp_path / "out"), sampler="ddpm", clip_sample=True
    )
    reloaded = _load_quietly(str(tmp_path / "out"))
    assert reloaded.sampler.get_config() == (DDPMSampler(clip_sample=True).get_config())


def test_export_refuses_what_the_scheduler_cannot_hold(tmp_path, make_unet):
    model = keras_diffusion.DiffusionModel(
        make_unet(), keras_diffusion.NoiseSchedule(), sampler=DPMSolverSampler()
    )
    with pytest.raises(ValueError, match="`clip_sample`.*DPMSolverMultistep"):
        keras_diffusion.to_diffusers(model, str(tmp_path / "a"), clip_sample=True)
    zero_snr = keras_diffusion.NoiseSchedule(rescale_zero_terminal_snr=True)
    model = keras_diffusion.DiffusionModel(
        make_unet(), zero_snr, prediction_type="v_prediction", sampler=HeunSampler()
    )
    with pytest.raises(ValueError, match="HeunDiscreteScheduler has no rescale"):
        keras_diffusion.to_diffusers(model, str(tmp_path / "b"))
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_ddim_takes_over_the_settings_it_shares():
    model = _Read(
        {
            "_class_name": "DDPMScheduler",
            "timestep_spacing": "trailing",
            "steps_offset": 1,
            "clip_sample_range": 2.0,
        }
    )
    sampler = interop.default_sampler(model, num_steps=20)
    assert (sampler.timestep_spacing, sampler.steps_offset) == ("trailing", 1)
    assert (sampler.clip_sample, sampler.clip_sample_range) == (True, 2.0)


def test_diffusers_steps_over_the_same_timesteps():
    diffusers = pytest.importorskip("diffusers")
    pytest.importorskip("torch")
    for class_name, setting in CASES:
        if "trained_betas" in setting or "num_train_timesteps" in setting:
            continue
        # diffusers' full config, defaults included, as it saves it.
        scheduler_class = getattr(diffusers, class_name)
        full = json.loads(scheduler_class(**setting).to_json_string())
        model = _Read(full)
        _, written = model.written()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = scheduler_class.from_config(json.loads(json.dumps(written)))
        assert theirs.config.prediction_type == model.prediction_type
        for num_steps in (20, 7):
            config = {**model.sampler.get_config(), "num_steps": num_steps}
            ours = type(model.sampler)(**config)
            theirs.set_timesteps(num_steps)
            np.testing.assert_allclose(
                ours.timesteps(model.schedule),
                theirs.timesteps.numpy(),
                # diffusers' Karras timesteps come from float32 sigmas.
                rtol=1e-4,
                atol=1e-4,
                err_msg=f"{class_name} {setting} {num_steps}",
            )
