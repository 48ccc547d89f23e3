"""What runs on TensorFlow alone, and the one-line refusal everywhere else.

The model, its layers and attention kernels, Hugging Face folders, ``predict`` and ``fit`` run on every Keras 3
backend (``KERAS_BACKEND`` tensorflow, jax or torch). TensorFlow is the point of a few features: SavedModel
export (`bert4long.export`), raw-text serving (`bert4long.text_serving`), the ``tf.data`` pipelines
(`bert4long.data.pipeline`), ``tf.distribute`` (`bert4long.training.distribute`) and the command's training and export
commands. Each refuses through `require_tensorflow` before it starts TensorFlow, so a machine without TensorFlow
hears what to do in one line rather than a traceback from ``import tensorflow``; a Google TF checkpoint says so
when it is read or written (`bert4long.checkpoints.tf_format`).
"""


class TensorFlowRequired(RuntimeError):
    """A feature that runs on TensorFlow alone was asked for where Keras runs another backend, or where TensorFlow
    does not import; the message names the feature, what it needs and what to use instead."""


def require_tensorflow(feature, instead):
    """Raise `TensorFlowRequired` unless Keras runs on TensorFlow. ``feature`` says what needs it and why,
    ``instead`` what to use on the backend this process runs (the message reads "on jax, {instead}").

    Example:
    >>> from bert4long.tensorflow_only import require_tensorflow
    >>> require_tensorflow("SavedModel export writes TensorFlow graphs", "save a .keras file")  # on TensorFlow: nothing
    """
    import keras  # here, not above: the command line imports this module before TensorFlow starts

    backend = keras.backend.backend()
    if backend != "tensorflow":
        raise TensorFlowRequired(f"{feature}: it needs KERAS_BACKEND=tensorflow (this process runs {backend}); "
                                 f"on {backend}, {instead}.")
