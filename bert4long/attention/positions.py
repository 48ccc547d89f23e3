"""Position objects: how `MultiHeadAttention` places positions inside attention (its second plug point).

An object of this module is passed as ``MultiHeadAttention(positions=...)`` (a layer config saved with the former
strings ``position_bias='rotary'`` / ``'typical_relative'`` loads as the object they name: `positions_from`). Each
object

* `rotate` s the projected queries and keys ``[batch, length, heads, dim]`` before the kernel (identity
  where the positions enter elsewhere);
* names, in `kernel_for`, the kernel that computes its positions (NEZHA's relative table needs
  ``'typical_relative'``) after checking the head sizes;
* is serializable (``get_config``), so a ``.keras`` file records it.

* `RotaryPositions`: RoFormer's rotary positions, interleaved pairs, base 10000 (any kernel).
* `RotateHalfPositions`: the rotate-half layout with its base ``theta`` (GPT-NeoX, ModernBERT, whose
  local and global layers use different bases; any kernel) and an optional RoPE ``scaling``.
* `RelativePositions`: NEZHA's clipped sinusoidal relative table added to keys and values
  (``attention='full'`` only).

>>> from bert4long.attention.positions import RotateHalfPositions, positions_from
>>> RotateHalfPositions(theta=160000.0).get_config()
{'theta': 160000.0, 'scaling': None}
>>> positions_from("rotary", None).name
'rotary'
"""
import keras
from keras import ops

from bert4long.ops.positions import (
    apply_rotary,
    apply_rotary_half,
    check_even_dim,
    check_max_relative_position,
    sinusoidal_embeddings,
)
from bert4long.rope_scaling import check_rope_number, resolve_rope_scaling


class _Positions:
    """What every position object does by default: no rotation, the kernel asked for, a config of its fields."""

    name = None

    def rotate(self, q, k):
        return q, k

    def kernel_for(self, attention, key_size, head_size):
        """``(kernel name, extra kernel options)`` that compute these positions; raises where they cannot apply."""
        if key_size is not None:
            check_even_dim(key_size, f"position_bias={self.name!r}")
        return attention, {}

    def get_config(self):
        return {}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __repr__(self):
        fields = ", ".join(f"{key}={value!r}" for key, value in self.get_config().items())
        return f"{type(self).__name__}({fields})"


@keras.saving.register_keras_serializable(package="bert4long")
class RotaryPositions(_Positions):
    """RoFormer's rotary positions: each pair ``(x_2i, x_2i+1)`` of queries and keys rotated by ``p * w_i``.

    Applied before the kernel, so it works with every kernel (`bert4long.ops.positions.apply_rotary`).

    Example:
    >>> import numpy as np
    >>> from bert4long.attention.positions import RotaryPositions
    >>> q = np.ones((1, 3, 2, 4), "float32")
    >>> tuple(RotaryPositions().rotate(q, q)[0].shape)
    (1, 3, 2, 4)

    Reference: Su et al., RoFormer (2021), https://arxiv.org/abs/2104.09864.
    """

    name = "rotary"

    def rotate(self, q, k):
        sinusoids = sinusoidal_embeddings(ops.arange(ops.shape(q)[1])[None], q.shape[-1])
        return apply_rotary(q, sinusoids), apply_rotary(k, sinusoids)


@keras.saving.register_keras_serializable(package="bert4long")
class RotateHalfPositions(_Positions):
    """Rotary positions in the rotate-half layout with base ``theta`` (`bert4long.ops.positions.apply_rotary_half`).

    Args:
        theta: base of the rotary frequencies (ModernBERT: 160,000 on global layers, 10,000 on local ones).
        scaling: None, or a RoPE scaling that stretches the positions beyond the trained length, as
            transformers' ``rope_parameters`` write it: ``{'rope_type': 'linear' | 'dynamic' | 'yarn',
            'factor': F, ...}`` (`bert4long.rope_scaling.resolve_rope_scaling`; ``dynamic`` and ``yarn``
            need ``original_max_position_embeddings``). Kept complete in ``get_config``.

    Example:
    >>> import numpy as np
    >>> from bert4long.attention.positions import RotateHalfPositions
    >>> q = np.ones((1, 3, 2, 4), "float32")
    >>> tuple(RotateHalfPositions(theta=10000.0).rotate(q, q)[1].shape)
    (1, 3, 2, 4)
    >>> RotateHalfPositions(10000.0, {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 512}
    ...                     ).get_config()["scaling"]["beta_fast"]
    32.0

    Reference: Peng et al., YaRN (2023), https://arxiv.org/abs/2309.00071 (``yarn``).
    """

    name = "rotate_half"

    def __init__(self, theta=10000.0, scaling=None):
        self.theta = check_rope_number("rope_theta", theta, "RotateHalfPositions(theta=...)")
        self.scaling = resolve_rope_scaling(scaling, what="RotateHalfPositions(scaling=...)")

    def rotate(self, q, k):
        return apply_rotary_half(q, self.theta, self.scaling), apply_rotary_half(k, self.theta, self.scaling)

    def get_config(self):
        return {"theta": self.theta, "scaling": self.scaling}


@keras.saving.register_keras_serializable(package="bert4long")
class RelativePositions(_Positions):
    """NEZHA's relative positions: sinusoidal embeddings of ``clip(j - i, -m, m)`` added to keys and values.

    The ``'typical_relative'`` kernel (`TypicalRelativeAttention`) adds them, so only ``attention='full'``
    takes them, with equal key and value sizes.

    Args:
        max_relative_position: the clipping distance ``m`` (64 in NEZHA's configs).

    Example:
    >>> from bert4long.attention.positions import RelativePositions
    >>> RelativePositions(64).kernel_for("full", 8, 8)
    ('typical_relative', {'max_relative_position': 64})
    """

    name = "typical_relative"

    def __init__(self, max_relative_position=64):
        self.max_relative_position = max_relative_position

    def kernel_for(self, attention, key_size, head_size):
        super().kernel_for(attention, key_size, head_size)
        check_max_relative_position(self.max_relative_position)
        if attention != "full":
            raise ValueError(
                f"position_bias='typical_relative' (NEZHA) adds relative embeddings to the scores and to "
                f"the weighted values, which only attention='full' computes; got attention={attention!r}. "
                "Use attention='full', or a rotary model (model='roformer') for long-text kernels."
            )
        if key_size != head_size:
            raise ValueError(
                f"position_bias='typical_relative' adds the same relative embeddings to keys and values, so "
                f"key_size ({key_size}) must equal head_size ({head_size})."
            )
        return "typical_relative", {"max_relative_position": self.max_relative_position}

    def get_config(self):
        return {"max_relative_position": self.max_relative_position}


def positions_from(position_bias, max_relative_position):
    """The position object a layer config saved with the former strings names (bert4keras's names: ``'rotary'``,
    ``'typical_relative'``)."""
    if position_bias == "rotary":
        return RotaryPositions()
    if position_bias == "typical_relative":
        return RelativePositions(max_relative_position)
    raise ValueError(f"position_bias={position_bias!r} names no positions: a saved layer config holds 'rotary' or "
                     "'typical_relative'; pass a position object of bert4long.attention.positions as positions=")
