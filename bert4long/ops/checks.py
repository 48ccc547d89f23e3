"""Assertions on tensor values, on every Keras backend.

`checked` returns a tensor after asserting a condition on values it depends on:

* TensorFlow: a graph assertion (``tf.debugging``), an ``InvalidArgumentError`` eagerly, inside
  `tf.function` and in a SavedModel. XLA (``jit_compile=True``) drops it.
* JAX and PyTorch: a concrete value (eager call, ``run_eagerly=True``, PyTorch's default ``fit`` and
  ``predict``) is checked at once and a failure raises ``ValueError``. A traced value (inside ``jax.jit``,
  which Keras's ``fit``/``evaluate``/``predict`` use on JAX, or ``torch.compile``) has no value to check:
  the assertion is skipped, as XLA skips TensorFlow's. `bert4long.models.checked.CheckedModel` checks every
  batch on the host before such a compiled step instead, and the id lookups make a bad id's row NaN
  (`bert4long.layers.range_checks.poison_rows`) rather than a clamped, plausible one.
"""
import keras


def _traced(value):
    """True when ``value`` is a JAX tracer or a PyTorch tensor without data (symbolic or compiled)."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return isinstance(value, jax.core.Tracer)
    if backend == "torch":
        import torch

        return torch.compiler.is_compiling() or (isinstance(value, torch.Tensor) and value.device.type == "meta")
    return False


def checked(value, condition, message):
    """``value``, once the scalar boolean ``condition`` holds (``message``: the error when it does not).

    Example:
    >>> import numpy as np
    >>> from bert4long.ops.checks import checked
    >>> np.asarray(checked(np.array([1, 2]), np.array(True), "never")).tolist()
    [1, 2]
    """
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        with tf.control_dependencies([tf.debugging.assert_equal(condition, True, message=message)]):
            return tf.identity(value)
    if not _traced(condition) and not bool(condition):
        raise ValueError(message)
    return value
