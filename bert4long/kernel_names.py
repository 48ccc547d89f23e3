"""The built-in attention kernels: each name and the class that computes it, readable without starting TensorFlow.

This table is the one list of built-in kernels: ``--help`` reads the names from it, and the registry
(`bert4long.attention.registered_kernels`, `get_attention_kernel`) imports each class from its
``"module:Class"`` location. A new built-in kernel is one line here, and its class registers itself with
``@register_attention_kernel()`` (no name: the name is the one given here). Kernels of your own are registered
with a name, ``@register_attention_kernel("mine")``, and need no line here.

>>> from bert4long.kernel_names import BUILT_IN_KERNELS, DEFAULT_KERNEL, KERNEL_CLASSES
>>> DEFAULT_KERNEL in BUILT_IN_KERNELS, KERNEL_CLASSES["chunked"]
(True, 'bert4long.attention.chunked:ChunkedAttention')
"""
KERNEL_CLASSES = {
    "full": "bert4long.attention.base:FullAttention",
    "chunked": "bert4long.attention.chunked:ChunkedAttention",
    "sliding_window": "bert4long.attention.sliding_window:SlidingWindowAttention",
    "bigbird": "bert4long.attention.bigbird:BigBirdAttention",
    "lsh": "bert4long.attention.lsh:LSHAttention",
    "performer": "bert4long.attention.performer:PerformerAttention",
    "block_sparse": "bert4long.attention.block_sparse:BlockSparseAttention",
    "longformer": "bert4long.attention.longformer:LongformerAttention",
    "typical_relative": "bert4long.attention.relative:TypicalRelativeAttention",
}
DEFAULT_KERNEL = "full"
BUILT_IN_KERNELS = tuple(KERNEL_CLASSES)


def built_in_name(location):
    """The built-in name of the kernel class at ``location`` (``"module:Class"``), None when it is not one.

    >>> built_in_name("bert4long.attention.lsh:LSHAttention"), built_in_name("mine:Kernel")
    ('lsh', None)
    """
    return next((name for name, where in KERNEL_CLASSES.items() if where == location), None)
