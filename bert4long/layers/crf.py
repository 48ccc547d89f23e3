"""Linear-chain conditional random field as a loss layer (bert4keras's `ConditionalRandomField`)."""
import keras
import numpy as np
from keras import ops

from bert4long.ops.sequences import sequence_masking


@keras.saving.register_keras_serializable(package="bert4long")
class ConditionalRandomField(keras.layers.Layer):
    """CRF over per-token label scores: it holds the transition matrix and computes the loss.

    The layer passes its input scores through (padded positions set to ``-inf``) and
    its `sparse_loss` / `dense_loss` are the negative log-likelihood of the label path,
    ``log Z - score(path)``, where ``score`` sums the emission scores and the
    transitions ``trans[y_t, y_{t+1}]``. Decode with
    ``bert4long.snippets.ViterbiDecoder(K.eval(crf.trans))``.

    Args:
        lr_multiplier: scale of the transition matrix's learning rate: the variable
            holds ``trans / lr_multiplier`` and is multiplied back when used.

    Call arguments:
        inputs: ``[batch, length, num_labels]`` scores. mask: ``[batch, length]``
            Keras mask (right padding), taken from upstream layers.

    Example:
    >>> import keras
    >>> from bert4long.layers.crf import ConditionalRandomField
    >>> x = keras.Input((None, 8))
    >>> crf = ConditionalRandomField(lr_multiplier=100)
    >>> model = keras.Model(x, crf(keras.layers.Dense(5)(x)))
    >>> model.compile(optimizer="adam", loss=crf.sparse_loss, metrics=[crf.sparse_accuracy])

    Reference: Lafferty et al. 2001; https://kexue.fm/archives/5542
    """

    def __init__(self, lr_multiplier: float = 1, **kwargs) -> None:
        super().__init__(**kwargs)
        self.lr_multiplier = lr_multiplier
        self.supports_masking = True

    def build(self, input_shape):
        num_labels = input_shape[-1]
        self._trans = self.add_weight(name="trans", shape=(num_labels, num_labels), initializer="glorot_uniform")
        if self.lr_multiplier != 1:
            self._trans.assign(self._trans / self.lr_multiplier)

    @property
    def trans(self):
        """The ``[num_labels, num_labels]`` transition scores (``trans[i, j]``: label i then j)."""
        return self._trans * self.lr_multiplier if self.lr_multiplier != 1 else self._trans

    def compute_mask(self, inputs, mask=None):
        return None

    def call(self, inputs, mask=None):
        return sequence_masking(inputs, mask, -np.inf, 1)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def target_score(self, y_true, y_pred):
        """Unnormalised log-score of the one-hot path ``y_true`` under scores ``y_pred``."""
        trans = ops.cast(self.trans, y_pred.dtype)
        point_score = ops.einsum("bni,bni->b", y_true, y_pred)
        trans_score = ops.einsum("bni,ij,bnj->b", y_true[:, :-1], trans, y_true[:, 1:])
        return point_score + trans_score

    def dense_loss(self, y_true, y_pred):
        """``-log p(y_true)`` per sequence; ``y_true`` one-hot ``[batch, length, num_labels]``."""
        y_pred = ops.cast(y_pred, "float32")
        y_true = ops.cast(y_true, "float32")
        mask = ops.all(ops.not_equal(y_pred, -np.inf), axis=2, keepdims=True)
        y_true = ops.where(mask, y_true, 0.0)
        y_pred = ops.where(mask, y_pred, 0.0)
        target_score = self.target_score(y_true, y_pred)
        trans = ops.expand_dims(ops.cast(self.trans, "float32"), 0)

        length = ops.shape(y_pred)[1]

        def step(t, states):  # forward algorithm in log space; padded steps keep the states
            outputs = ops.logsumexp(ops.expand_dims(states, 2) + trans, axis=1) + ops.take(y_pred, t, axis=1)
            return t + 1, ops.where(ops.take(mask, t, axis=1), outputs, states)

        # A bounded while loop (not ops.scan): its gradient also compiles under XLA.
        _, log_norm = ops.while_loop(lambda t, _: t < length, step, (1, y_pred[:, 0]), maximum_iterations=length - 1)
        return ops.logsumexp(log_norm, axis=1) - target_score

    def sparse_loss(self, y_true, y_pred):
        """``-log p(y_true)`` per sequence; ``y_true`` label ids ``[batch, length]`` (or ``[..., 1]``)."""
        y_true = ops.cast(ops.reshape(y_true, ops.shape(y_pred)[:-1]), "int32")
        return self.dense_loss(ops.one_hot(y_true, ops.shape(self.trans)[0]), y_pred)

    def dense_accuracy(self, y_true, y_pred):
        """Per-token accuracy of the per-position argmax, padding excluded (one-hot ``y_true``)."""
        return self.sparse_accuracy(ops.argmax(y_true, axis=2), y_pred)

    def sparse_accuracy(self, y_true, y_pred):
        """Per-token accuracy of the per-position argmax, padding excluded (label ids ``y_true``)."""
        mask = ops.cast(ops.all(ops.not_equal(y_pred, -np.inf), axis=2), "float32")
        y_true = ops.cast(ops.reshape(y_true, ops.shape(y_pred)[:-1]), "int32")
        hits = ops.cast(ops.equal(y_true, ops.cast(ops.argmax(y_pred, axis=2), "int32")), "float32")
        return ops.sum(hits * mask) / ops.maximum(ops.sum(mask), 1.0)

    def get_config(self):
        config = super().get_config()
        config.update(lr_multiplier=self.lr_multiplier)
        return config
