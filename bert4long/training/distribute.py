"""Choosing a `tf.distribute` strategy by name (``--distribute``).

==============  ===============================================================
``none``        the default strategy (one device)
``mirrored``    `tf.distribute.MirroredStrategy`: all GPUs (or the logical CPU
                devices) of this machine, synchronous all-reduce
``multiworker`` `tf.distribute.MultiWorkerMirroredStrategy`: several machines;
                each process reads its role from the ``TF_CONFIG`` environment
                variable (``{"cluster": {"worker": [...]}, "task": {...}}``)
``tpu``         `tf.distribute.TPUStrategy` on the TPU named by ``tpu_address``
                (a Cloud TPU VM: ``"local"``)
==============  ===============================================================

Build and compile the model inside ``strategy.scope()`` and give ``fit`` the
*global* batch: Keras splits it across replicas and all-reduces the gradients. ``tf.distribute`` is TensorFlow's:
on another Keras backend importing this module refuses in one line (`bert4long.tensorflow_only.require_tensorflow`).
"""
import json
import os

from bert4long.tensorflow_only import require_tensorflow

require_tensorflow("bert4long.training.distribute chooses tf.distribute strategies",
                   "spread a model over devices with keras.distribution (DataParallel, ModelParallel: Keras's API on JAX)")

import tensorflow as tf  # noqa: E402 -- below the refusal, which speaks where TensorFlow is not installed

STRATEGIES = ("none", "mirrored", "multiworker", "tpu")
_MULTIWORKER = []   # this process's MultiWorkerMirroredStrategy, once made


def get_strategy(name="none", tpu_address="local"):
    """The `tf.distribute.Strategy` called ``name`` (see module docstring).

    Example:
    >>> from bert4long.training.distribute import get_strategy
    >>> strategy = get_strategy("none")
    >>> strategy.num_replicas_in_sync
    1
    """
    if name in (None, "none"):
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multiworker":
        if _MULTIWORKER:   # one a process: it was made before TensorFlow started, and cannot be made again after
            return _MULTIWORKER[0]
        if "TF_CONFIG" not in os.environ:
            raise ValueError(
                "--distribute multiworker needs the TF_CONFIG environment variable on every worker, e.g. "
                + json.dumps({"cluster": {"worker": ["host1:12345", "host2:12345"]}, "task": {"type": "worker",
                                                                                            "index": 0}})
            )
        _MULTIWORKER.append(tf.distribute.MultiWorkerMirroredStrategy())
        return _MULTIWORKER[0]
    if name == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu_address)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    raise ValueError(f"Unknown --distribute {name!r}: choose one of {STRATEGIES}.")


def is_chief(strategy):
    """True on the process that writes checkpoints and exports (worker 0, or a single process)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.cluster_spec().as_dict():
        return True
    return resolver.task_type in ("chief", None) or (resolver.task_type == "worker" and resolver.task_id == 0)


def is_tpu(strategy):
    """Whether ``strategy`` computes on TPUs (`tf.distribute.TPUStrategy`)."""
    return isinstance(strategy, tf.distribute.TPUStrategy)


def xla_left_out(strategy):
    """Why the training step cannot be compiled with XLA under ``strategy``, or None where it can.

    Replicas on several logical CPU devices (a rehearsal of a multi-GPU run on one machine) are out of XLA's
    reach: a compiled step may not touch another device's copy of a variable (TensorFlow's XLA known issue
    "tf.Variable on a different device"). One device, GPUs and TPUs compile.

    Example:
    >>> from bert4long.training.distribute import get_strategy, xla_left_out
    >>> xla_left_out(get_strategy("none")) is None
    True
    """
    if strategy.num_replicas_in_sync < 2:   # (the default strategy has no worker_devices to ask)
        return None
    if all("CPU" in device.upper().rpartition("/")[2] for device in strategy.extended.worker_devices):
        return (f"XLA left out: {strategy.num_replicas_in_sync} replicas on CPU devices, where a compiled step "
                "cannot reach another device's copy of a variable")
    return None
