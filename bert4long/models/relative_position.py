"""BERT variants whose positions enter inside attention: NEZHA (clipped relative) and RoFormer (rotary).

>>> from bert4long.models import build_transformer_model
>>> model = build_transformer_model(vocab_size=30, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
...                                 intermediate_size=16, model="roformer")
>>> "Embedding-Position" in [layer.name for layer in model.layers]  # no position table
False
"""
from bert4long.attention.positions import RelativePositions, RotaryPositions
from bert4long.models import BERT
from bert4long.ops.positions import check_max_relative_position


class RelativePositionBERT(BERT):
    """Base of BERT variants whose positions enter inside attention (`Transformer.attention_positions`).

    They have no position table, so no length limit (``max_position`` is unused),
    and their checkpoints are the Google BERT layout without
    ``bert/embeddings/position_embeddings``.
    """

    def __init__(self, **kwargs):
        for option in ("hierarchical_position", "custom_position_ids"):
            if kwargs.get(option):
                raise ValueError(
                    f"model={self.family.name!r} has no position table, so {option} does not apply: "
                    f"its positions inside attention already place any length. Drop {option}."
                )
        sequence_length = kwargs.pop("sequence_length", None)  # any length: skip the position-table check
        super().__init__(**kwargs)
        self.sequence_length = sequence_length

    def apply_position_embeddings(self, x):
        return x

    def embedding_mapping(self):
        mapping = super().embedding_mapping()
        del mapping["Embedding-Position"]
        return mapping


class NEZHA(RelativePositionBERT):
    """NEZHA (Huawei): functional relative positions, clipped at ``max_relative_position``.

    Each attention layer adds sinusoidal embeddings of the clipped distance
    ``clip(j - i, -m, m)`` to the keys and to the values
    (`RelativePositions`, the ``'typical_relative'`` kernel), which only ``attention='full'``
    computes. Checkpoint layout: huawei-noah NEZHA-TensorFlow, i.e. Google BERT
    names without position embeddings.

    Args:
        max_relative_position: ``m``, read from the config JSON's
            ``max_relative_position``; 64 when absent (every released NEZHA
            config and bert4keras's default).
        **kwargs: `Transformer` arguments.

    Example:
    >>> from bert4long.models import build_transformer_model
    >>> model = build_transformer_model("nezha/bert_config.json", "nezha/model.ckpt",
    ...                                 model="nezha")  # doctest: +SKIP

    Reference: Wei et al., NEZHA (2019), https://arxiv.org/abs/1909.00204.
    """

    def __init__(self, max_relative_position=64, **kwargs):
        super().__init__(**kwargs)
        self.max_relative_position = check_max_relative_position(max_relative_position)

    def attention_positions(self):
        return RelativePositions(self.max_relative_position)


class RoFormer(RelativePositionBERT):
    """RoFormer (ZhuiyiTechnology): rotary position embedding on queries and keys.

    Queries and keys are rotated by their position before the attention kernel
    (`RotaryPositions`), so every ``attention=`` kernel works with it.
    Checkpoint layout: Google BERT names (``bert/...``, pooler and ``cls/`` heads)
    without position embeddings.

    Example:
    >>> from bert4long.models import build_transformer_model
    >>> model = build_transformer_model("roformer/bert_config.json", "roformer/bert_model.ckpt",
    ...                                 model="roformer", attention="chunked")  # doctest: +SKIP

    Reference: Su et al., RoFormer (2021), https://arxiv.org/abs/2104.09864.
    """

    def attention_positions(self):
        return RotaryPositions()
