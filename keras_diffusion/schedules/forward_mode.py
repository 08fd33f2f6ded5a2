"""The derivative of the network along the flow path, by one forward-mode pass.

The few-step process's continuous form and the mean-flow process regress
onto a target that holds the network's total derivative along the path of
an example, d/ds F(x_s, time(s)) = J_x F v + J_time F time'(s): one
Jacobian-vector product, which `tf.autodiff.ForwardAccumulator` computes in
the same pass as the output, inside the compiled step (graph mode and XLA).
"""

import tensorflow as tf
from keras import ops


def along_path(step, x, time, velocity, rate):
    """`(output, derivative)`: `step.network(x, time)` and its derivative
    along the path, the image moving at `velocity` (dx/ds) and every entry
    of `time` at `rate` (a float: d time / ds, the time scale T; or one
    float a column of a `(batch, k)` time input, 0 for a column that stays,
    as a guidance scale). The derivative is a stop-gradient: a target's
    part."""
    tangent = ops.ones_like(time) * ops.convert_to_tensor(rate, time.dtype)
    with tf.autodiff.ForwardAccumulator((x, time), (velocity, tangent)) as acc:
        output = step.network(x, time)
    return output, ops.stop_gradient(acc.jvp(output))
