"""The model file a run leaves for use: its weights in a ``.keras`` file, written atomically (read back, range-checked,
by `bert4long.cli.run_folder.load_final_model`)."""
from bert4long.output_folders import atomic_write


def weights_only(model):
    """A plain Keras functional model over ``model``'s layers (nothing copied): saving it writes the weights alone,
    not the optimizer's state (AdamW's two slots: about 3x the size) or the compile settings."""
    import keras

    return keras.Model(model.inputs, model.outputs, name=model.name)


def save_final_model(model, path):
    """Write ``model`` to ``path`` (``.keras``) for use: `weights_only`, the weights' size, not about 3x it; the
    run's resumable state stays in checkpoints/.

    Keras 3 loads a custom class only once its module ran (it imports keras modules alone), so
    ``keras.models.load_model(path)`` needs ``bert4long.register_keras_classes()`` first. Without it Keras stops at
    the first class it does not know and prints that object's config: here one of bert4long's layers (module
    ``bert4long.layers...``, about 1 kB), where a bert4long model class at the top would print the whole
    graph (tens of kB). The loaded model is a ``keras.Model``: `bert4long.cli.run_folder.load_final_model` range-checks it again.
    """
    atomic_write(path, weights_only(model).save, suffix=".keras")
