"""Which precision and compile path run fastest here, from what the machine has.

`auto` (``--precision auto``) is decided by the hardware, by the rule the benchmarks measured
(benchmarks/results/train.json and serving.json; `tests/training/test_precision.py` holds the rule to them):

========================================  ===============  ====================================
where                                     precision        training step
========================================  ===============  ====================================
a GPU                                     mixed_float16    XLA
a CPU with bfloat16 units (AVX512-BF16,   mixed_bfloat16   without XLA: TensorFlow's oneDNN
AMX, Arm's BF16)                                           matmuls use the bfloat16 units and
                                                           XLA's CPU code does not
any other CPU                             float32          XLA
========================================  ===============  ====================================

Serving (`bert4long export --precision auto`) computes in bfloat16 on a CPU with bfloat16 units
(`serving_precision`). `path_line` says in one line what was chosen and why (`auto_reason`), for a user to read
before a run starts.
"""
import functools

import keras

# /proc/cpuinfo flags of CPUs whose bfloat16 matmuls run faster than float32 (x86: "flags", Arm: "Features").
BFLOAT16_FLAGS = ("amx_bf16", "avx512_bf16", "bf16")


def has_gpu() -> bool:
    """Whether the Keras backend computes on a GPU, asked of the backend itself."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return jax.default_backend() == "gpu"
    if backend == "torch":
        import torch

        return torch.cuda.is_available()
    if backend == "tensorflow":
        import tensorflow as tf

        return bool(tf.config.list_physical_devices("GPU"))
    return False


@functools.cache   # (read once per process: auto asks several times)
def bfloat16_units(cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """The flag naming this CPU's bfloat16 matmul units (``'avx512_bf16'``, ``'amx_bf16'``, ``'bf16'``), or None.

    >>> bfloat16_units("/no/such/file") is None
    True
    """
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            flags = {flag for line in f if line.lower().startswith(("flags", "features"))
                     for flag in line.partition(":")[2].split()}
    except OSError:
        return None
    return next((flag for flag in BFLOAT16_FLAGS if flag in flags), None)


def default_precision() -> str:
    """``'mixed_float16'`` on a GPU, ``'mixed_bfloat16'`` on a CPU with bfloat16 units, else ``'float32'``.

    >>> default_precision() in ("mixed_float16", "mixed_bfloat16", "float32")
    True
    """
    if has_gpu():
        return "mixed_float16"
    return "mixed_bfloat16" if bfloat16_units() else "float32"


def serving_precision() -> str:
    """What ``export --precision auto`` serves in: ``'bfloat16'`` on a CPU with bfloat16 units, else ``'float32'``.

    >>> serving_precision() in ("bfloat16", "float32")
    True
    """
    return "bfloat16" if bfloat16_units() else "float32"


def auto_reason() -> str:
    """What auto's choice rests on: ``'a GPU'``, ``'this CPU has avx512_bf16'`` (its bfloat16 units), or ``'this CPU
    has no bfloat16 units'``."""
    if has_gpu():
        return "a GPU"
    units = bfloat16_units()
    return f"this CPU has {units}" if units else "this CPU has no bfloat16 units"


# The longest float32 training sequence that XLA speeds up on a CPU: benchmarks/results/train.json (MiniLM size,
# idle machine) timed XLA 0.40 / 0.94 / 2.55 s a step at 512 / 1,024 / 2,048 tokens, without it 0.46 / 1.06 / 2.20.
XLA_FLOAT32_MAX_LENGTH = 1024


def default_jit_compile(precision: str, seq_len: int | None = None) -> bool:
    """Whether the training step is compiled with XLA under ``precision`` for ``seq_len`` tokens: always on a GPU;
    on a CPU not for bfloat16 (XLA's CPU code does not use oneDNN's bfloat16 matmuls), and for float32 up to
    `XLA_FLOAT32_MAX_LENGTH` tokens (unknown length: yes).

    >>> default_jit_compile("float32", 512), default_jit_compile("float32", 4096) == has_gpu()
    (True, True)
    """
    if has_gpu():
        return True
    if precision == "mixed_bfloat16":
        return False
    return seq_len is None or seq_len <= XLA_FLOAT32_MAX_LENGTH


def path_line(precision: str, jit_compile: bool, chosen: bool, seq_len: int | None = None) -> str:
    """One line saying what runs: ``precision``, XLA or not, and (``chosen`` by auto) why, ``seq_len`` tokens naming
    the length rule where it left XLA out.

    >>> path_line("float32", True, chosen=False)
    'precision: float32, with XLA'
    """
    line = f"precision: {precision}, {'with' if jit_compile else 'without'} XLA"
    if not chosen:
        return line
    why = {"mixed_bfloat16": "; TensorFlow's oneDNN matmuls use it, XLA's CPU code does not; --precision float32 for "
                             "exact float32 numbers", "float32": ", so float32"}.get(precision, "")
    if precision == "float32" and not default_jit_compile(precision, seq_len):
        why += f"; XLA only up to {XLA_FLOAT32_MAX_LENGTH:,} tokens, slower past them in benchmarks.train"
    return f"{line} (auto: {auto_reason()}{why})"
