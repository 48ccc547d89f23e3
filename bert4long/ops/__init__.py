"""Low-level tensor operations shared by attention kernels and layers.

The lowest level of the package: modules here import only Keras, TensorFlow and
NumPy, never `bert4long.attention`, `bert4long.layers` or `bert4long.backend`
(tests/test_import_graph.py holds the rule).

* `bert4long.ops.dropout`: seeded dropout and the `Recompute` wrapper.
* `bert4long.ops.positions`: sinusoids, rotary and relative position encodings.
* `bert4long.ops.sequences`: padding masks applied to sequences, axis alignment.
* `bert4long.ops.schedules`: step schedules (piecewise-linear learning-rate multipliers).
"""
