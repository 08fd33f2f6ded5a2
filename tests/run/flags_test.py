"""keras_diffusion.run.flags: docs/flags.md is the table the declarations
make, and every setting is a flag in the group of its section or process."""

import os

from keras_diffusion.run import flags
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
