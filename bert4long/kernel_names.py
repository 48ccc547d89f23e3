"""The names of the built-in attention kernels, readable without starting TensorFlow (for ``--help``).

The kernels themselves, their options and facts are in `bert4long.attention`; a test checks that this
list is the registry's (`bert4long.attention.registered_kernels`).

>>> from bert4long.kernel_names import BUILT_IN_KERNELS, DEFAULT_KERNEL
>>> DEFAULT_KERNEL in BUILT_IN_KERNELS
True
"""
DEFAULT_KERNEL = "full"
BUILT_IN_KERNELS = ("full", "chunked", "sliding_window", "bigbird", "lsh", "performer", "block_sparse", "longformer",
                    "typical_relative")
