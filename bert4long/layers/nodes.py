"""Keras 2's node API (``layer.get_output_at(-1)``) for the layers a bert4keras script reaches by position.

Keras 3 dropped ``get_output_at`` / ``get_input_at`` / ``get_output_shape_at``:
a layer called several times keeps one node per call, and bert4keras scripts
pick a call's output by its index (``task_relation_extraction.py`` takes
``bert.model.layers[-2].get_output_at(-1)``: the last residual sum, before the
final LayerNorm). `NodeAccess` answers them from the layer's inbound nodes on
bert4long's own layers; Keras's classes are left as they are. `Add` is the
residual sum every bert4long encoder block ends with.

>>> import keras
>>> x = keras.Input((3,))
>>> add = Add(name="sum")
>>> y = add([x, x])
>>> add.get_output_at(-1) is y, add.get_input_at(0)[0] is x, add.get_output_shape_at(0)
(True, True, (None, 3))
"""
import keras


class NodeAccess:
    """Mixin: Keras 2's ``get_output_at``, ``get_input_at``, ``get_output_shape_at``, ``get_input_shape_at``.

    ``node_index`` counts the layer's calls on symbolic inputs (negative counts from the last), as in Keras 2.
    """

    def _node_tensors(self, node_index, attribute):
        nodes = self._inbound_nodes
        if not -len(nodes) <= node_index < len(nodes):
            raise ValueError(f"Layer {self.name!r} was called {len(nodes)} time(s) on symbolic inputs: "
                             f"node_index {node_index} is out of range (use 0..{len(nodes) - 1} or -1 for the last)")
        tensors = getattr(nodes[node_index], attribute)
        return tensors[0] if len(tensors) == 1 else list(tensors)

    def get_output_at(self, node_index):
        """The output of the layer's ``node_index``-th call."""
        return self._node_tensors(node_index, "output_tensors")

    def get_input_at(self, node_index):
        """The input(s) of the layer's ``node_index``-th call."""
        return self._node_tensors(node_index, "input_tensors")

    def get_output_shape_at(self, node_index):
        """The shape of `get_output_at` (a list of shapes for several outputs)."""
        tensors = self.get_output_at(node_index)
        return [t.shape for t in tensors] if isinstance(tensors, list) else tensors.shape

    def get_input_shape_at(self, node_index):
        """The shape of `get_input_at` (a list of shapes for several inputs)."""
        tensors = self.get_input_at(node_index)
        return [t.shape for t in tensors] if isinstance(tensors, list) else tensors.shape


@keras.saving.register_keras_serializable(package="bert4long")
class Add(NodeAccess, keras.layers.Add):
    """``keras.layers.Add`` that also answers Keras 2's node API (`NodeAccess`); the encoders' residual sums."""
