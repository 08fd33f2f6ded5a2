"""Scale-out through tf.distribute: strategies by name and `TF_CONFIG` checks.

See `keras_diffusion.distribute.strategy` for how `DiffusionModel` trains
under a strategy.
"""

from keras_diffusion.distribute.strategy import (
    STRATEGY_NAMES,
    check_built_in_scope,
    is_multi_worker,
    make_strategy,
    parse_tf_config,
)

__all__ = [
    "STRATEGY_NAMES",
    "check_built_in_scope",
    "is_multi_worker",
    "make_strategy",
    "parse_tf_config",
]
