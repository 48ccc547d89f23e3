"""Low-level tensor operations shared by attention kernels and layers.

The lowest level of the package: modules here import only Keras, TensorFlow and
NumPy (and the package's other foundations), never `bert4long.attention`, `bert4long.layers` or `bert4long.backend`
(tests/house/test_import_graph.py holds the rule).

* `bert4long.ops.dropout`: seeded dropout and the `Recompute` wrapper.
* `bert4long.ops.positions`: sinusoids, rotary and relative position encodings.
* `bert4long.ops.position_extension`: a trained position table stretched beyond its length (`PositionExtension`:
  hierarchical, copy, interpolate), for the position layer, ``bert4long extend`` and segment recurrence.
* `bert4long.ops.sequences`: padding masks applied to sequences, axis alignment.
* `bert4long.ops.schedules`: step schedules (piecewise-linear learning-rate multipliers).
"""
