"""Longformer (allenai) from a Hugging Face folder, equal to transformers' PyTorch implementation.

A RoBERTa encoder whose attention is a per-layer sliding window (``attention_window``
tokens, half on each side) plus global tokens with their own projections; see
`bert4long.attention.longformer.LongformerAttention` and docs/long_encoders.md.
"""
import keras
from keras import ops

from bert4long.checkpoints.hf_folder import (
    HuggingFaceFamily,
    dense_weights,
    norm_weights,
)
from bert4long.layers import Add, MultiHeadAttention
from bert4long.models import BERT
from bert4long.ops.checks import checked


@keras.saving.register_keras_serializable(package="bert4long")
class RobertaPositionIds(keras.layers.Layer):
    """RoBERTa's position ids from token ids: real tokens count from ``pad_token_id + 1``, padding gets ``pad_token_id``.

    Args:
        pad_token_id: the padding id (1 in RoBERTa vocabularies).
        max_length: longest input the position table places (None: no check);
            longer inputs raise an error naming the options.

    Example:
    >>> import numpy as np
    >>> from bert4long.models.longformer import RobertaPositionIds
    >>> RobertaPositionIds(pad_token_id=1)(np.array([[0, 5, 7, 1, 1]])).numpy().tolist()
    [[2, 3, 4, 1, 1]]
    """

    def __init__(self, pad_token_id=1, max_length=None, **kwargs):
        super().__init__(**kwargs)
        self.pad_token_id = pad_token_id
        self.max_length = max_length

    def call(self, token_ids):
        length = token_ids.shape[1] if token_ids.shape[1] is not None else ops.shape(token_ids)[1]
        message = (f"Sequence of {{}} tokens is longer than the {self.max_length} positions this model was trained "
                   "with: split the document into chunks (or read it with bert4long.models.recurrence), or truncate it.")
        if self.max_length is not None and isinstance(length, int) and length > self.max_length:
            raise ValueError(message.format(length))
        if self.max_length is not None and not isinstance(length, int):
            token_ids = checked(token_ids, ops.less_equal(length, self.max_length), message.format("this"))
        real = ops.cast(ops.not_equal(token_ids, self.pad_token_id), "int32")
        return ops.cumsum(real, axis=1) * real + self.pad_token_id

    def compute_output_spec(self, token_ids):
        return keras.KerasTensor(token_ids.shape, dtype="int32")

    def get_config(self):
        config = super().get_config()
        config.update(pad_token_id=self.pad_token_id, max_length=self.max_length)
        return config


class Longformer(HuggingFaceFamily, BERT):
    """Longformer built from ``config.json`` + ``model.safetensors`` (``model_type: longformer``).

    Inputs are ``[token_ids, segment_ids]`` and, with ``attention_mask_input=True``,
    the int32 mask ``Input-Attention-Mask`` (0 padding / 1 local / 2 global:
    Hugging Face's ``attention_mask * (global_attention_mask + 1)``). Without it
    padding comes from ``pad_token_id`` and no token is global. Outputs as
    `bert4long.models.build_transformer_model` (``with_pool``: the pooler of
    ``LongformerModel``; ``with_mlm``: ``lm_head``, tied to the word embeddings).

    Args:
        attention_window: even window per layer (an int for all), both sides.
        max_global_tokens: global tokens per example the attention has slots for
            (tokens marked 2 beyond that many, in position order, attend locally;
            the reference has no limit).
        **kwargs: `bert4long.models.Transformer` arguments.

    Example:
    >>> from bert4long.models import build_transformer_model
    >>> model = build_transformer_model(checkpoint_path="longformer-base-4096/", with_mlm="linear",
    ...                                 attention_mask_input=True)  # doctest: +SKIP
    >>> logits = model.predict([token_ids, segment_ids, mask])  # mask: 1 local, 2 global, 0 padding  # doctest: +SKIP

    Reference: Beltagy et al., Longformer: The Long-Document Transformer (2020), https://arxiv.org/abs/2004.05150.
    """


    def __init__(self, attention_window=512, max_global_tokens=32, **kwargs):
        layers = kwargs.get("num_hidden_layers")
        windows = [attention_window] * layers if isinstance(attention_window, int) else list(attention_window)
        if len(windows) != layers:
            raise ValueError(f"attention_window has {len(windows)} values for {layers} layers: give one per layer "
                             "or a single int.")
        for index, window in enumerate(windows):
            if not isinstance(window, int) or window < 2 or window % 2:
                raise ValueError(f"attention_window of layer {index} is {window!r}: Longformer windows are positive "
                                 "even integers (half on each side of a token), e.g. 512.")
        if not isinstance(max_global_tokens, int) or max_global_tokens < 1:
            raise ValueError(f"max_global_tokens must be a positive integer, got {max_global_tokens!r}.")
        for option in ("hierarchical_position", "position_extension", "custom_position_ids"):
            if kwargs.get(option) not in (None, False, "none"):
                raise ValueError(f"model_type='longformer' computes RoBERTa position ids from the token ids; "
                                 f"{option} does not apply.")
        if kwargs.get("application", "encoder") != "encoder" or kwargs.get("attention", "full") != "full":
            raise ValueError("Longformer checkpoints are bidirectional encoders with their own attention: build "
                             "them with application='encoder' and no attention= option.")
        sequence_length, max_position = kwargs.get("sequence_length"), kwargs.get("max_position", 512)
        if sequence_length is not None and sequence_length > max_position:
            raise ValueError(
                f"sequence_length={sequence_length} is longer than the {max_position} positions this Longformer "
                "was trained with (max_position_embeddings minus pad_token_id + 1). Split the text into chunks, "
                "read it with bert4long.models.recurrence.SegmentRecurrentEncoder, or truncate it."
            )
        super().__init__(**kwargs)
        self.attention_window = windows
        self.max_global_tokens = max_global_tokens
        self.layer_windows = {self.layer_names(index)[0]: window for index, window in enumerate(windows)}

    def position_rows(self):
        """Rows of the position table: RoBERTa's positions start after ``pad_token_id``."""
        return self.max_position + self.family.offset(self.pad_token_id)

    def checkpoint_sizes(self):
        sizes = super().checkpoint_sizes()
        width = sizes["Embedding-Position", "embeddings"][1]
        sizes["Embedding-Position", "embeddings"] = (("max_position_embeddings", self.position_rows()), width)
        return sizes

    def apply_position_embeddings(self, x):
        position_ids = RobertaPositionIds(self.pad_token_id, self.max_position, name="Embedding-Position-Ids")(
            self.inputs[0])
        positions = keras.layers.Embedding(
            self.position_rows(),
            self.embedding_size,
            embeddings_initializer=self.initializer,
            name="Embedding-Position",
        )(position_ids)
        return Add(name="Embedding-Add-Position")([x, positions])

    def attention_layer(self, name):
        return MultiHeadAttention(
            heads=self.num_attention_heads,
            head_size=self.attention_head_size,
            attention_dropout=self.attention_dropout_rate,
            attention="longformer",
            attention_config={"window": self.layer_windows[name], "max_global_tokens": self.max_global_tokens},
            global_projections="trained",
            kernel_initializer=self.initializer,
            name=name,
        )

    def attention_weights(self, index):
        return (("query_global", "attention.self.query_global"),
                ("key_global", "attention.self.key_global"),
                ("value_global", "attention.self.value_global"))

    def variable_mapping(self):
        mapping = self.encoder_mapping()
        mapping["Pooler-Dense"] = dense_weights("pooler.dense")
        mapping["MLM-Dense"] = dense_weights("lm_head.dense")
        mapping["MLM-Norm"] = norm_weights("lm_head.layer_norm")
        mapping["MLM-Bias"] = {"bias": ("lm_head.bias", "keep_tokens")}
        return mapping
