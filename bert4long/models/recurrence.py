"""Segment recurrence (Transformer-XL style) over a pretrained BERT encoder.

A document longer than the attention span is read segment by segment; in every
layer the current segment attends to itself and to that layer's cached inputs
from the previous segment(s). The cache carries no gradient (``stop_gradient``),
so training cost is one segment's, while information flows forward across
segments through depth. Position ids are the tokens' true document positions,
read from the model's (extended) position table, so with hierarchical positions
a 10,000-token document keeps every token at its own place.
"""
import keras
from keras import ops


def _layer(model, *names):
    for name in names:
        try:
            return model.get_layer(name)
        except ValueError:
            continue
    return None


@keras.saving.register_keras_serializable(package="bert4long")
class SegmentRecurrentEncoder(keras.layers.Layer):
    """Encode ``[token_ids, segment_ids]`` of any length with a BERT encoder, segment by segment.

    Args:
        encoder: a bert4long BERT/RoBERTa model returning the sequence output
            (``build_transformer_model(...)`` with no heads), absolute positions.
        segment_length: tokens per segment (at most what the encoder can place in one go).
        memory_length: cached tokens per layer from previous segments (default:
            ``segment_length``; 0 disables recurrence).

    Call arguments:
        inputs: int32 ``[token_ids, segment_ids]`` ``[batch, length]``; the length must
            be static (pad batches to a fixed length). Returns ``[batch, length, hidden]``.

    Example:
    >>> import numpy as np, tempfile
    >>> from bert4long.models import build_transformer_model
    >>> from bert4long.models.recurrence import SegmentRecurrentEncoder
    >>> from bert4long.testing import write_tiny_checkpoint
    >>> config, ckpt, _ = write_tiny_checkpoint(tempfile.mkdtemp())
    >>> bert = build_transformer_model(config, ckpt, hierarchical_position=True)
    >>> xl = SegmentRecurrentEncoder(bert, segment_length=8)
    >>> tuple(xl([np.ones((1, 40), "int32"), np.zeros((1, 40), "int32")]).shape)
    (1, 40, 16)
    """

    def __init__(self, encoder, segment_length, memory_length=None, **kwargs):
        super().__init__(**kwargs)
        if isinstance(encoder, dict):
            encoder = keras.saving.deserialize_keras_object(encoder)
        self.encoder = encoder
        self.segment_length = int(segment_length)
        self.memory_length = self.segment_length if memory_length is None else int(memory_length)
        self.num_layers = 0
        while _layer(encoder, f"Transformer-{self.num_layers}-MultiHeadSelfAttention"):
            self.num_layers += 1
        if self.num_layers == 0:
            raise ValueError("encoder has no 'Transformer-<i>-*' layers: pass a BERT/RoBERTa model from "
                             "build_transformer_model (shared-layer ALBERT: use model='albert_unshared').")
        if _layer(encoder, "Padding-Mask") is None:
            raise ValueError("Segment recurrence builds its masks from token ids: use an encoder built without "
                             "attention_mask_input=True.")
        position = _layer(encoder, "Embedding-Position")
        if position is None or position.custom_position_ids:
            raise ValueError("Segment recurrence needs an absolute position table (BERT/ALBERT); relative or rotary "
                             "models (NEZHA, RoFormer) can use attention='chunked' or 'sliding_window' instead.")
        if position.max_length is not None and self.segment_length > position.max_length:
            raise ValueError(f"segment_length={segment_length} exceeds the {position.max_length} positions of the encoder.")

    def _block(self, index, name):
        return self.encoder.get_layer(f"Transformer-{index}-{name}")

    def _attention(self, layer, x, memory, key_mask, training):
        """Queries from the segment, keys/values from [memory; segment]."""
        layer = getattr(layer, "layer", layer)  # unwrap gradient-checkpointing wrappers
        return layer.call([x, key_mask], memory=memory, training=training)

    def _embed(self, tokens, segments, start, training):
        e = self.encoder
        x = e.get_layer("Embedding-Token")(tokens)
        segment_layer = _layer(e, "Embedding-Segment")
        if segment_layer is not None:
            x = x + segment_layer(segments)
        position = e.get_layer("Embedding-Position")
        ids = start + ops.arange(ops.shape(tokens)[1], dtype="int32")
        x = x + position.rows(ids, x.dtype)[None]
        x = e.get_layer("Embedding-Norm")(x)
        x = e.get_layer("Embedding-Dropout")(x, training=training)
        mapping = _layer(e, "Embedding-Mapping")
        return mapping(x) if mapping is not None else x

    def call(self, inputs, training=None):
        token_ids, segment_ids = inputs
        length = token_ids.shape[1]
        if length is None:
            raise ValueError("SegmentRecurrentEncoder needs a static sequence length: pad batches to a fixed length.")
        pad_id = self.encoder.get_layer("Padding-Mask").pad_token_id
        segments_count = -(-length // self.segment_length)
        padding = segments_count * self.segment_length - length
        token_ids = ops.pad(token_ids, [[0, 0], [0, padding]], constant_values=pad_id)
        segment_ids = ops.pad(segment_ids, [[0, 0], [0, padding]])
        memories = [None] * self.num_layers
        memory_mask = None
        outputs = []
        for s in range(segments_count):
            tokens = token_ids[:, s * self.segment_length:(s + 1) * self.segment_length]
            mask = ops.not_equal(tokens, pad_id)
            h = self._embed(tokens, segment_ids[:, s * self.segment_length:(s + 1) * self.segment_length],
                            s * self.segment_length, training)
            key_mask = mask if memory_mask is None else ops.concatenate([memory_mask, mask], axis=1)
            new_memories = []
            for i in range(self.num_layers):
                memory = memories[i] if memories[i] is not None else h[:, :0]
                new_memories.append(ops.stop_gradient(ops.concatenate([memory, h], axis=1)[:, -self.memory_length:])
                                    if self.memory_length else None)
                a = self._attention(self._block(i, "MultiHeadSelfAttention"), h, memory, key_mask, training)
                a = self._block(i, "MultiHeadSelfAttention-Dropout")(a, training=training)
                h = self._block(i, "MultiHeadSelfAttention-Norm")(h + a)
                f = self._block(i, "FeedForward")(h)
                f = self._block(i, "FeedForward-Dropout")(f, training=training)
                h = self._block(i, "FeedForward-Norm")(h + f)
            outputs.append(h)
            if self.memory_length:
                memories = new_memories
                memory_mask = ops.concatenate([memory_mask, mask], axis=1) if memory_mask is not None else mask
                memory_mask = memory_mask[:, -self.memory_length:]
        return ops.concatenate(outputs, axis=1)[:, :length]

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[0]) + (self.encoder.output.shape[-1],)

    def get_config(self):
        config = super().get_config()
        config.update(encoder=keras.saving.serialize_keras_object(self.encoder),
                      segment_length=self.segment_length, memory_length=self.memory_length)
        return config
