"""BigBird (Google) from a Hugging Face folder, equal to transformers' PyTorch implementation.

A BERT encoder whose attention is block-sparse (``attention_type='block_sparse'``:
window, random and global blocks; see `bert4long.attention.block_sparse`) or full
(``'original_full'``); docs/long_encoders.md.
"""
from bert4long.checkpoints.hf_folder import HuggingFaceFamily, dense_weights, norm_weights
from bert4long.layers import MultiHeadAttention
from bert4long.models import BERT

ATTENTION_TYPES = ("block_sparse", "original_full")


class BigBird(HuggingFaceFamily, BERT):
    """BigBird built from ``config.json`` + ``model.safetensors`` (``model_type: big_bird``).

    Inputs are ``[token_ids, segment_ids]`` (and ``Input-Attention-Mask``, 0 for
    padding, with ``attention_mask_input=True``); outputs as
    `bert4long.models.build_transformer_model` (``with_pool``: ``BigBirdModel``'s
    pooler, ``with_mlm``: the ``cls.predictions`` head, ``with_nsp``:
    ``BigBirdForPreTraining``'s ``cls.seq_relationship``).

    Args:
        block_size: tokens per block.
        num_random_blocks: random key blocks per query block.
        attention_type: ``'block_sparse'`` or ``'original_full'``.
        **kwargs: `bert4long.models.Transformer` arguments.

    Example:
    >>> from bert4long.models import build_transformer_model
    >>> model = build_transformer_model(checkpoint_path="bigbird-roberta-base/", with_mlm="linear")  # doctest: +SKIP

    Reference: Zaheer et al., Big Bird: Transformers for Longer Sequences (2020), https://arxiv.org/abs/2007.14062.
    """


    def __init__(self, block_size=64, num_random_blocks=3, attention_type="block_sparse", **kwargs):
        if attention_type not in ATTENTION_TYPES:
            raise ValueError(f"attention_type must be one of {ATTENTION_TYPES}, got {attention_type!r}.")
        if kwargs.get("application", "encoder") != "encoder" or kwargs.get("attention", "full") != "full":
            raise ValueError("BigBird checkpoints are bidirectional encoders with their own attention: build them "
                             "with application='encoder' and no attention= option (attention_type picks it).")
        super().__init__(**kwargs)
        self.block_size = block_size
        self.num_random_blocks = num_random_blocks
        self.attention_type = attention_type
        self.layer_indices = {self.layer_names(index)[0]: index for index in range(self.num_hidden_layers)}

    def attention_layer(self, name):
        if self.attention_type == "original_full":
            attention, config = "full", {}
        else:
            attention = "block_sparse"
            config = {"block_size": self.block_size, "num_random_blocks": self.num_random_blocks,
                      "num_heads": self.num_attention_heads, "max_position": self.max_position,
                      "seed": self.layer_indices[name]}
        return MultiHeadAttention(
            heads=self.num_attention_heads,
            head_size=self.attention_head_size,
            attention_dropout=self.attention_dropout_rate,
            attention=attention,
            attention_config=config,
            kernel_initializer=self.initializer,
            name=name,
        )

    def variable_mapping(self):
        mapping = self.encoder_mapping()
        mapping["Pooler-Dense"] = dense_weights("pooler")
        mapping["NSP-Proba"] = dense_weights("cls.seq_relationship")
        mapping["MLM-Dense"] = dense_weights("cls.predictions.transform.dense")
        mapping["MLM-Norm"] = norm_weights("cls.predictions.transform.LayerNorm")
        mapping["MLM-Bias"] = {"bias": ("cls.predictions.bias", "keep_tokens")}
        return mapping
