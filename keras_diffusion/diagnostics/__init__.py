"""Why is training slow? Input-bound, compute-bound or retracing, measured.

`diagnose(model, dataset)` times three things on the user's own model and data:

1. the input pipeline alone (images/s, no model),
2. the compiled training step alone on one batch already on the device,
3. `model.fit` end to end,

counts the traces of the training step after warm-up (and names the argument
whose shape, dtype or Python value changed), and returns a `Diagnosis` whose
verdict is `"input-bound"`, `"compute-bound"` or `"retracing"`, with fixes.
`diagnose_step` does the same for a hand-written `@tf.function` step, and
`ThroughputLogger` logs images/s per epoch during `fit` without reading any
tensor mid-epoch (so it adds no device sync).

- `diagnose.py`: `diagnose` and `diagnose_step`, the two entry points;
- `measure.py`: the timings and the naming of retrace causes;
- `report.py`: `Diagnosis`, the verdict and the fixes;
- `throughput.py`: `ThroughputLogger`;
- `terminal_error.py`: will sampling work? `measure_terminal_error`, the
  denoiser's error at the highest timesteps, and the `SamplingCheck`
  callback that warns when the samples will likely be noise.
"""

from keras_diffusion.diagnostics.diagnose import diagnose, diagnose_step
from keras_diffusion.diagnostics.measure import describe_change, measure_input
from keras_diffusion.diagnostics.report import (
    INPUT_HEADROOM,
    OVERHEAD_FRACTION,
    VERDICTS,
    Diagnosis,
    environment_report,
    input_fixes,
    pipeline_ops,
)
from keras_diffusion.diagnostics.terminal_error import (
    SamplingCheck,
    TerminalError,
    measure_terminal_error,
)
from keras_diffusion.diagnostics.throughput import ThroughputLogger

__all__ = [
    "INPUT_HEADROOM",
    "OVERHEAD_FRACTION",
    "VERDICTS",
    "Diagnosis",
    "SamplingCheck",
    "TerminalError",
    "ThroughputLogger",
    "describe_change",
    "diagnose",
    "diagnose_step",
    "environment_report",
    "input_fixes",
    "measure_input",
    "measure_terminal_error",
    "pipeline_ops",
]
