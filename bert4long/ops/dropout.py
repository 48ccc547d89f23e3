"""Seeded (stateless) dropout and the `Recompute` wrapper for gradient checkpointing.

The two belong together: a recomputed layer must draw the same dropout mask in the
backward pass as in the forward pass, which Keras's `Dropout` (a random state
advanced on every call) does not do.
"""
import contextlib
import zlib

import keras
from keras import ops


class _GivenSeed(keras.random.SeedGenerator):
    """A seed given as a tensor of two integers: `keras.random` draws from it, statelessly, on every backend."""

    def __init__(self, seed):  # no state variable: nothing advances
        self.seed = seed

    def next(self, ordered=True):
        return self.seed


def stateless_uniform(shape, seed):
    """Uniform floats in ``[0, 1)`` that are a pure function of ``seed`` (two integers, a tensor).

    The same seed draws the same numbers again (a recomputation regenerates its dropout masks); each
    backend draws its own numbers (TensorFlow's are those of ``tf.random.stateless_uniform``).

    Example:
    >>> import numpy as np
    >>> from bert4long.ops.dropout import stateless_uniform
    >>> a, b = (np.asarray(stateless_uniform((3,), np.array([1, 2]))) for _ in range(2))
    >>> bool((a == b).all() and (a >= 0).all() and (a < 1).all())
    True
    """
    seed = ops.convert_to_tensor(seed)
    if keras.backend.backend() == "jax":  # a JAX key is two uint32
        seed = ops.cast(seed, "uint32")
    return keras.random.uniform(shape, seed=_GivenSeed(seed))


def _replica_id():
    """The `tf.distribute` replica this call runs on (0 outside a TensorFlow strategy and on other backends)."""
    if keras.backend.backend() != "tensorflow":
        return 0
    import tensorflow as tf

    replica = tf.distribute.get_replica_context()
    return replica.replica_id_in_sync_group if replica is not None else 0


def name_seed(name):
    """A stable 31-bit seed derived from a layer name (the same in every process)."""
    return zlib.crc32(name.encode("utf-8")) & 0x7FFFFFFF


@keras.saving.register_keras_serializable(package="bert4long")
class SeededDropout(keras.layers.Layer):
    """Inverted dropout whose mask is a pure function of ``(seed, replica, step)``.

    ``step`` is a non-trainable int64 weight advanced by one on every training call,
    so successive steps draw fresh masks; because it is a weight, it is saved with
    the model and a resumed run draws the masks the uninterrupted run would have
    drawn. Inside `Recompute` the wrapper pins ``step`` for the forward pass and its
    recomputation, so both see the same masks, and advances it afterwards by the
    number of calls in the pass (a kernel may drop twice per layer call).

    Args:
        rate: fraction of units to drop, in [0, 1).
        seed: integer seed (models use a hash of the layer name).

    Example:
    >>> import numpy as np
    >>> from bert4long.ops.dropout import SeededDropout
    >>> layer = SeededDropout(0.5, seed=7)
    >>> y = layer(np.ones((2, 8), "float32"), training=True)
    >>> sorted(set(y.numpy().ravel().tolist())) in ([0.0, 2.0], [2.0], [0.0])
    True
    """

    def __init__(self, rate: float, seed: int = 0, **kwargs) -> None:
        kwargs.setdefault("autocast", False)   # drops in its input's dtype: no cast of bfloat16 probabilities
        super().__init__(**kwargs)
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"Dropout rate must be in [0, 1), got {rate!r}.")
        self.rate = rate
        self.seed = int(seed)
        self.supports_masking = True
        self._pinned_step = None
        self._pinned_calls = 0
        self._enclosing_pins = []  # (step, calls) of the pinned passes this one is nested in
        self._last_pass_calls = 0

    def build(self, input_shape):
        self.step = self.add_weight(
            name="step", shape=(), dtype="int64", initializer="zeros", trainable=False,
            aggregation="only_first_replica",
        )

    def call(self, inputs, training=False):
        if not training or self.rate == 0:
            return inputs
        pinned = self._pinned_step is not None
        if pinned:  # the k-th call of a pinned pass draws from step + k, as k unpinned calls would
            step = self._pinned_step + self._pinned_calls
            self._pinned_calls += 1
        else:
            step = ops.convert_to_tensor(self.step.value)
        replica = ops.cast(self.seed, "int64") + 7919 * ops.cast(_replica_id(), "int64")
        keep = stateless_uniform(ops.shape(inputs), ops.stack([replica, ops.cast(step, "int64")])) >= self.rate
        if not pinned:
            self.step.assign_add(1)
        return ops.where(keep, inputs / ops.cast(1.0 - self.rate, inputs.dtype), ops.zeros_like(inputs))

    # The pinning protocol of `Recompute` (also implemented by the `chunked` attention kernel). Pinned
    # passes nest (a kernel recomputed in eager mode inside a `Recompute`d layer): an inner pass draws
    # where the enclosing one stands and advances it, as unpinned calls would have.
    def random_state(self):
        """A snapshot of the state the next training call draws from (None before `build`)."""
        if not self.built:
            return None
        if self._pinned_step is not None:
            return self._pinned_step + self._pinned_calls
        return ops.copy(self.step.value)

    def pin_random_state(self, state):
        """Draw from ``state`` without advancing the weight (None: end the pass, back to the enclosing state)."""
        if state is not None:
            self._enclosing_pins.append((self._pinned_step, self._pinned_calls))
            self._pinned_step, self._pinned_calls = state, 0
        else:
            self._last_pass_calls = self._pinned_calls
            self._pinned_step, self._pinned_calls = self._enclosing_pins.pop()

    def advance_random_state(self):
        """Advance as the calls of the last pinned pass would have, unpinned."""
        if not self._last_pass_calls:
            return
        if self._pinned_step is not None:
            self._pinned_calls += self._last_pass_calls
        else:
            self.step.assign_add(self._last_pass_calls)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(rate=self.rate, seed=self.seed)
        return config


def backend_is_float(x):
    return "float" in str(keras.backend.standardize_dtype(x.dtype))


@contextlib.contextmanager
def _pinned(layers, states):
    for layer, state in zip(layers, states):
        layer.pin_random_state(state)
    try:
        yield
    finally:
        for layer in layers:
            layer.pin_random_state(None)


def recording_eagerly():
    """True where gradients are recorded as the operations run (TensorFlow eagerly, PyTorch with grad enabled):
    the recorded operations keep their inputs alive until the backward pass, unless recomputed. (A traced
    function, `tf.function` or JAX's, frees what its backward pass does not need.)"""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.executing_eagerly()
    if backend == "torch":
        import torch

        return torch.is_grad_enabled()
    return False


def recompute(layer, fn, tensors):
    """``fn(*tensors)`` keeping only ``tensors`` for the backward pass, which runs ``fn`` again.

    `keras.remat` with every random sublayer of ``layer`` (`SeededDropout`, the
    ``chunked`` kernel: whatever has ``pin_random_state``) pinned to a snapshot of its
    state (a tensor, not the variable) in both passes, then advanced once, so the
    recomputation draws the forward pass's dropout masks. ``tensors`` are the floating
    tensors to differentiate; ``fn`` closes over anything else.
    """
    randoms = [sublayer for sublayer in layer._flatten_layers() if hasattr(sublayer, "pin_random_state")]
    states = [sublayer.random_state() for sublayer in randoms]
    randoms = [sublayer for sublayer, state in zip(randoms, states) if state is not None]
    states = [state for state in states if state is not None]

    def pinned_fn(*args):
        with _pinned(randoms, states):
            return fn(*args)

    outputs = keras.remat(pinned_fn)(*tensors)
    for sublayer in randoms:
        sublayer.advance_random_state()
    return outputs


@keras.saving.register_keras_serializable(package="bert4long")
class Recompute(keras.layers.Wrapper):
    """Run ``layer`` keeping only its inputs; recompute it in the backward pass.

    Gradient checkpointing for one layer (`keras.remat`): the activations
    inside ``layer`` (attention scores and probabilities, the feed-forward
    intermediate) are not stored for the backward pass but computed again, so
    memory per layer falls from ``O(heads * L^2 + L * intermediate)`` to the
    ``O(L * hidden)`` input. Gradients are the same as without it: every
    `SeededDropout` inside is pinned to the same step for both passes. (Keras's
    `RematScope` does the same wrapping but cannot pass the ``training`` keyword
    through TensorFlow's recomputation inside a `tf.function`.) Any sublayer with the
    methods ``random_state`` / ``pin_random_state`` / ``advance_random_state``
    (`SeededDropout`, the ``chunked`` attention kernel) is pinned the same way.

    The wrapper takes the wrapped layer's name, and attribute access falls through
    to it (``model.get_layer('Transformer-0-FeedForward').intermediate_dense``).

    Args:
        layer: the Keras layer to recompute.

    Example:
    >>> import numpy as np
    >>> from bert4long.ops.dropout import Recompute
    >>> from bert4long.layers import FeedForward
    >>> layer = Recompute(FeedForward(16, name="ffn"))
    >>> tuple(layer(np.zeros((2, 5, 8), "float32")).shape), layer.name
    ((2, 5, 8), 'ffn')
    """

    def __init__(self, layer: keras.layers.Layer, **kwargs) -> None:
        kwargs.setdefault("name", layer.name)
        super().__init__(layer, **kwargs)

    def __getattr__(self, name):
        try:  # PyTorch's Module keeps the wrapped layer outside __dict__ and finds it here
            return super().__getattr__(name)
        except AttributeError:
            if name.startswith("_") or name == "layer":
                raise
        return getattr(self.layer, name)

    def build(self, input_shape=None):
        if not self.layer.built:
            self.layer.build(input_shape)
        self.built = True

    def call(self, inputs, training=None):
        flat = list(keras.tree.flatten(inputs))
        # Only floating inputs are differentiated; masks and ids are closed over.
        floating = [i for i, x in enumerate(flat) if backend_is_float(x)]

        def forward(*float_args):
            values = list(flat)
            for i, x in zip(floating, float_args):
                values[i] = x
            return self.layer(keras.tree.pack_sequence_as(inputs, values), training=training)

        if not training:
            return forward(*[flat[i] for i in floating])
        return recompute(self.layer, forward, [flat[i] for i in floating])

    def compute_output_shape(self, input_shape):
        return self.layer.compute_output_shape(input_shape)

    def compute_output_spec(self, *args, **kwargs):
        return self.layer.compute_output_spec(*args, **kwargs)
