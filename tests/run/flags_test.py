"""keras_diffusion.run.flags: docs/flags.md is the table the declarations
make, and every setting is a flag in the group of its section or process."""

import os

from keras_diffusion.run import flags
from keras_diffusion.run.build import build_model
from keras_diffusion.run.config import TrainConfig
from keras_diffusion.run.run_settings import RUN_SETTINGS
from keras_diffusion.schedules.registry import PROCESSES

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_docs_flag_table_is_current():
    with open(os.path.join(ROOT, "docs", "flags.md")) as f:
        written = f.read()
    assert written == flags.flag_table(), f"stale: run `{flags.WRITE_TABLE}`"


def test_each_setting_is_one_flag_in_its_group():
    groups = dict(flags.groups())
    titles = [title for title in groups if not title.startswith("process: ")]
    assert titles == ["data", "network", "process", "training", "run"]
    shown = [setting.name for flags_ in groups.values() for setting, _ in flags_]
    assert len(shown) == len(set(shown))
    assert {s.name for s in RUN_SETTINGS} <= set(shown)
    for name, process in PROCESSES.items():
        assert {s.name for s in process.settings} <= set(shown), name
    edm = {setting.name for setting, _ in groups["process: edm"]}
    assert edm == {"sigma_data", "sigma_min", "sigma_max", "rho", "p_mean", "p_std"}


def test_min_snr_gamma_is_a_flag_the_run_records_and_trains_with(train_script):
    _, args = train_script._parse(
        ["--loss-weighting", "min_snr", "--min-snr-gamma", "3"]
    )
    assert args.min_snr_gamma == 3.0
    tiny = {"widths": [8], "num_res_blocks": 1, "attention_levels": [False]}
    config = TrainConfig(
        loss_weighting="min_snr", min_snr_gamma=args.min_snr_gamma, **tiny
    ).resolve()
    assert config.sections()["process"]["min_snr_gamma"] == 3.0
    model = build_model(config, 10, steps_per_epoch=1)
    assert model.schedule.min_snr_gamma == 3.0
    # Without the flag: the schedule's gamma, recorded.
    assert TrainConfig(loss_weighting="min_snr").resolve().min_snr_gamma == 5.0
    assert TrainConfig(process="edm").resolve().min_snr_gamma is None
