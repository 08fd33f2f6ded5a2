"""diffusers' own `UNet2DModel` test-suite configs, live (torch and diffusers).

`make_fixtures.SUITE_CONFIGS` are the configs of diffusers'
tests/models/unets/test_models_unet_2d.py (and its `UNetTesterMixin`); each
is built with random weights, saved by diffusers, loaded with
`from_diffusers` and compared with diffusers' forward pass, live and EMA
weights; its export loads back in diffusers with the same outputs and the
same config. NCSN++ stays refused, naming its options. Skipped without
torch or diffusers.
"""

import importlib.util
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

import keras_diffusion  # noqa: E402


def _load_make_fixtures():
    path = os.path.join(os.path.dirname(__file__), "make_fixtures.py")
    spec = importlib.util.spec_from_file_location("_make_fixtures", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MAKE_FIXTURES = _load_make_fixtures()
SUITE = MAKE_FIXTURES.SUITE_CONFIGS
# Keys that may differ in an export without changing the network.
_UNUSED = {
    "add_attention": lambda config: config["mid_block_type"] is None,
}


def _inputs(config, seed=0):
    # The suite's batch of 4 at timestep 10, here with three more timesteps.
    rng = np.random.default_rng(seed)
    size = config["sample_size"]
    x = rng.normal(size=(4, size, size, config["in_channels"])).astype(np.float32)
    return x, np.array([10.0, 10.0, 400.5, 999.0], np.float32)


def _torch_output(unet, x, t):
    with torch.no_grad():
        out = unet(
            torch.from_numpy(x.transpose(0, 3, 1, 2).copy()), torch.from_numpy(t)
        )
    return out.sample.numpy().transpose(0, 2, 3, 1)


def _relative_error(out, ref):
    return float(np.max(np.abs(np.asarray(out) - ref)) / np.max(np.abs(ref)))


@pytest.fixture(scope="module", params=sorted(SUITE))
def pair(request, tmp_path_factory):
    name = request.param
    folder = str(tmp_path_factory.mktemp(name))
    unet = MAKE_FIXTURES.random_unet(
        SUITE[name], sorted(SUITE).index(name), std=0.3, base={}
    )
    scheduler = diffusers.DDPMScheduler(num_train_timesteps=1000)
    diffusers.DDPMPipeline(unet=unet, scheduler=scheduler).save_pretrained(folder)
    return name, unet, keras_diffusion.from_diffusers(folder)


def test_live_and_ema_outputs_equal_diffusers(pair):
    name, unet, model = pair
    assert model.denoiser.count_params() == sum(p.numel() for p in unet.parameters())
    x, t = _inputs(unet.config)
    ref = _torch_output(unet, x, t)
    live = model.denoiser([x, t], training=False)
    ema, _ = model.denoiser.stateless_call(
        model.ema.values(),
        [v.value for v in model.denoiser.non_trainable_variables],
        [x, t],
        training=False,
    )
    errors = (_relative_error(live, ref), _relative_error(ema, ref))
    print(f"\n{name}: max relative error live {errors[0]:.2e}, ema {errors[1]:.2e}")
    assert max(errors) < 1e-4


def test_the_export_is_the_same_network_and_config(pair, tmp_path):
    name, unet, model = pair
    folder = keras_diffusion.to_diffusers(model, str(tmp_path / "export"))
    exported = diffusers.UNet2DModel.from_pretrained(folder, subfolder="unet").eval()
    x, t = _inputs(unet.config, seed=1)
    ours = np.asarray(model.denoiser([x, t], training=False))
    error = _relative_error(_torch_output(exported, x, t), ours)
    original = _relative_error(_torch_output(exported, x, t), _torch_output(unet, x, t))
    print(
        f"\n{name}: exported max relative error {error:.2e} (to diffusers' own "
        f"{original:.2e})"
    )
    assert error < 1e-4 and original < 1e-4
    differ = {}
    for key, value in unet.config.items():
        if key.startswith("_") or _UNUSED.get(key, lambda c: False)(unet.config):
            continue
        theirs = exported.config[key]
        if isinstance(value, (list, tuple)):
            value, theirs = list(value), list(theirs)
        if theirs != value:
            differ[key] = (value, theirs)
    assert not differ


def test_ncsnpp_is_refused_naming_its_options(tmp_path):
    for name, config in MAKE_FIXTURES.SUITE_REFUSED.items():
        diffusers.UNet2DModel(**config, sample_size=32).save_pretrained(tmp_path / name)
        with pytest.raises(ValueError) as info:
            keras_diffusion.from_diffusers(str(tmp_path / name))
        message = str(info.value)
        print(f"\n{name}: {message}")
        assert "\n" not in message
        for option in (
            "time_embedding_type='fourier'",
            "mid_block_scale_factor",
            "SkipDownBlock2D",
            "AttnSkipUpBlock2D",
        ):
            assert option in message
