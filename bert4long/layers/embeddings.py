"""Token and position embeddings, including hierarchical position extension."""
import keras
from keras import ops

from bert4long.layers.range_checks import checked_ids, poison_rows
from bert4long.ops.checks import checked
from bert4long.ops.position_extension import PositionExtension
from bert4long.position_alpha import DEFAULT_ALPHA

MERGE_MODES = ("add", "mul", "zero", "concat")


def merge_positions(inputs, embeddings, merge_mode):
    """Combine ``inputs`` ``[batch, length, dim]`` with position ``embeddings`` by ``merge_mode``."""
    if merge_mode == "zero":
        return embeddings
    if merge_mode == "add":
        return inputs + embeddings
    if merge_mode == "mul":
        return inputs * (embeddings + 1.0)
    embeddings = ops.broadcast_to(embeddings, tuple(ops.shape(inputs)[:2]) + (embeddings.shape[-1],))
    return ops.concatenate([inputs, embeddings], axis=-1)


def merged_output_shape(input_shape, output_dim, merge_mode, custom_position_ids):
    """Output shape of `merge_positions` (``input_shape`` is ``[x, ids]``'s when ``custom_position_ids``)."""
    if custom_position_ids:
        input_shape = input_shape[0]
    if merge_mode == "concat":
        return tuple(input_shape[:-1]) + (input_shape[-1] + output_dim,)
    if merge_mode == "zero":
        return (None if custom_position_ids else 1, input_shape[1], output_dim)
    return tuple(input_shape)


@keras.saving.register_keras_serializable(package="bert4long")
class Embedding(keras.layers.Embedding):
    """Token embedding that can also be applied in reverse (tied output projection).

    Call with ``mode='embedding'`` (ids -> vectors) or ``mode='dense'``
    (vectors -> vocabulary logits with the transposed table), as bert4keras does
    for the masked-LM head. An id outside ``[0, input_dim)`` is an error
    (``InvalidArgumentError``), not a clamped or wrapped row; under XLA, which drops
    assertions, its row is NaN instead (see `bert4long.layers.range_checks`).

    Example:
    >>> import numpy as np
    >>> from bert4long.layers import Embedding
    >>> layer = Embedding(10, 4)
    >>> vectors = layer(np.array([[1, 2]]))
    >>> tuple(layer(vectors, mode="dense").shape)
    (1, 2, 10)
    """

    def call(self, inputs, mode="embedding"):
        if mode == "embedding":
            ids, bad = checked_ids(inputs, self.input_dim, (
                f"Layer {self.name!r} got an id outside [0, {self.input_dim}): its table has {self.input_dim} rows. "
                "Token ids must come from the model's own vocab.txt (vocab_size); segment ids must be below "
                "type_vocab_size."))
            return poison_rows(super().call(ids), bad)
        if mode != "dense":
            raise ValueError(f"Embedding mode must be 'embedding' or 'dense', got {mode!r}.")
        table = ops.cast(self.embeddings, inputs.dtype)
        return ops.matmul(inputs, ops.transpose(table))

    def compute_output_spec(self, inputs, mode="embedding"):
        if mode == "dense":
            return keras.KerasTensor(tuple(inputs.shape[:-1]) + (self.input_dim,), dtype=self.compute_dtype)
        return keras.KerasTensor(tuple(inputs.shape) + (self.output_dim,), dtype=self.compute_dtype)


@keras.saving.register_keras_serializable(package="bert4long")
class PositionEmbedding(keras.layers.Layer):
    """Trainable absolute position embedding with bert4keras's options.

    Args:
        input_dim: number of trained positions ``n`` (``max_position_embeddings``).
        output_dim: embedding size.
        merge_mode: how to combine with the input: ``'add'``, ``'mul'``,
            ``'zero'`` (return only the position embeddings) or ``'concat'``.
        hierarchical: ``None``/``False`` for plain positions (at most ``n``),
            ``True`` (alpha 0.4) or a float alpha in (0, 1), alpha != 0.5, to place up
            to ``n*n`` positions by hierarchical decomposition
            (Su, "Hierarchical decomposition position encoding", 2020).
        extension: ``None``, ``'hierarchical'``, ``'copy'`` or ``'interpolate'``
            (see `bert4long.ops.position_extension`); ``hierarchical=alpha``
            implies ``'hierarchical'``.
        extension_length: target length for ``'interpolate'`` (required) and an
            optional cap for the other methods.
        custom_position_ids: if True the layer is called on ``[x, position_ids]``.
        embeddings_initializer: initializer of the ``[n, output_dim]`` table.

    Call arguments:
        inputs: ``[batch, length, dim]`` (or ``[x, position_ids]``).

    Example:
    >>> import numpy as np
    >>> from bert4long.layers import PositionEmbedding
    >>> layer = PositionEmbedding(8, 4, hierarchical=True)
    >>> tuple(layer(np.zeros((1, 40, 4), "float32")).shape)   # 40 > 8 trained positions
    (1, 40, 4)
    """

    def __init__(
        self,
        input_dim,
        output_dim,
        merge_mode="add",
        hierarchical=None,
        custom_position_ids=False,
        embeddings_initializer="zeros",
        extension=None,
        extension_length=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if merge_mode not in MERGE_MODES:
            raise ValueError(f"merge_mode must be one of {MERGE_MODES}, got {merge_mode!r}.")
        if isinstance(extension, PositionExtension):  # made and validated by the builder
            self.position_extension = extension
            hierarchical, extension, extension_length = extension.alpha, extension.method, extension.length
        else:
            self.position_extension = PositionExtension.from_options(hierarchical, extension, extension_length)
        self.extension = extension
        self.extension_length = extension_length
        self.input_dim = input_dim
        self.output_dim = output_dim
        self.merge_mode = merge_mode
        self.hierarchical = hierarchical
        self.custom_position_ids = custom_position_ids
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)

    @property
    def max_length(self):
        """How many positions this layer can place (None: no limit)."""
        return self.position_extension.capacity(self.input_dim)

    @property
    def method(self):
        """The extension method (None: the trained positions only)."""
        return self.position_extension.method

    @property
    def alpha(self):
        """The hierarchical alpha (None for the other methods)."""
        return self.position_extension.alpha

    def rows(self, position_ids, dtype=None):
        """The position vectors of ``position_ids`` (any positions within `max_length`), in ``dtype``."""
        return self.position_extension.rows(ops.cast(self.embeddings, dtype or self.compute_dtype), position_ids)

    def build(self, input_shape):
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.input_dim, self.output_dim),
            initializer=self.embeddings_initializer,
        )

    def _checked_length(self, position_ids, length):
        """``position_ids``, once ``length`` (an int or a tensor) is asserted to be at most `max_length`."""
        fix = (
            "pass hierarchical_position=True to build_transformer_model to place up to "
            f"{self.input_dim * self.input_dim} tokens"
            if self.method is None
            else "split the document into chunks or use segment recurrence"
        )
        message = (
            f"Sequence of {{}} tokens is longer than the {self.max_length} positions layer "
            f"{self.name!r} can place: {fix}, or truncate the input."
        )
        if self.max_length is None:
            return position_ids
        if isinstance(length, int):
            if length > self.max_length:
                raise ValueError(message.format(length))
            return position_ids
        return checked(position_ids, ops.less_equal(length, self.max_length), message.format("this"))

    def call(self, inputs):
        bad = None  # positions this layer cannot place, for poison_rows (XLA drops the assertions)
        if self.custom_position_ids:
            inputs, position_ids = inputs
            position_ids = ops.cast(position_ids, "int32")
            position_ids = self._checked_length(position_ids, ops.max(position_ids) + 1)
            bad = position_ids < 0
            position_ids = checked(position_ids, ops.logical_not(ops.any(bad)), (
                f"Layer {self.name!r} got a negative position id: position ids count from 0."))
        else:
            length = inputs.shape[1] if inputs.shape[1] is not None else ops.shape(inputs)[1]
            position_ids = self._checked_length(ops.arange(ops.shape(inputs)[1], dtype="int32")[None], length)
        fits = isinstance(inputs.shape[1], int) and inputs.shape[1] <= (self.max_length or 0)
        if self.max_length is not None and (self.custom_position_ids or not fits):
            too_far = position_ids >= self.max_length
            bad = too_far if bad is None else ops.logical_or(bad, too_far)
        embeddings = self.rows(position_ids)
        if bad is not None:
            embeddings = poison_rows(embeddings, bad)
        return merge_positions(inputs, embeddings, self.merge_mode)

    def compute_output_shape(self, input_shape):
        return merged_output_shape(input_shape, self.output_dim, self.merge_mode, self.custom_position_ids)

    def get_config(self):
        config = super().get_config()
        config.update(
            input_dim=self.input_dim,
            output_dim=self.output_dim,
            merge_mode=self.merge_mode,
            hierarchical=self.hierarchical,
            custom_position_ids=self.custom_position_ids,
            embeddings_initializer=keras.initializers.serialize(self.embeddings_initializer),
            extension=self.extension,
            extension_length=self.extension_length,
        )
        return config


@keras.saving.register_keras_serializable(package="bert4long")
class HierarchicalPositionEmbedding(PositionEmbedding):
    """Position embedding extended from ``n`` trained positions to ``n*n``.

    ``q[i*n + j] = alpha*u[i] + (1-alpha)*u[j]`` with
    ``u[k] = (p[k] - alpha*p[0]) / (1-alpha)``; the first ``n`` rows are exactly the
    trained ones, so a pretrained model behaves unchanged on short inputs.
    Numbers match bert4keras's ``PositionEmbedding(hierarchical=alpha)``.

    Args:
        input_dim: trained positions ``n``.
        output_dim: embedding size.
        alpha: float in (0, 1), not 0.5 (default 0.4).
        merge_mode: ``'add'`` (default), ``'mul'``, ``'zero'`` or ``'concat'``.

    Example:
    >>> import numpy as np
    >>> from bert4long.layers import HierarchicalPositionEmbedding
    >>> layer = HierarchicalPositionEmbedding(512, 8, alpha=0.4)
    >>> tuple(layer(np.zeros((1, 2048, 8), "float32")).shape)
    (1, 2048, 8)

    Reference: Su Jianlin, "层次分解位置编码，让BERT可以处理超长文本" (2020).
    """

    def __init__(self, input_dim, output_dim, alpha=DEFAULT_ALPHA, merge_mode="add", **kwargs):
        kwargs.pop("hierarchical", None)
        kwargs.pop("extension", None)
        super().__init__(input_dim, output_dim, merge_mode=merge_mode, hierarchical=alpha, **kwargs)

    def get_config(self):
        config = super().get_config()
        config["alpha"] = config.pop("hierarchical")
        config.pop("extension")
        return config
