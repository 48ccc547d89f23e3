"""ALBERT: factorised embeddings and one transformer block shared across depth, on the BERT builder.

>>> from bert4long.models import build_transformer_model
>>> model = build_transformer_model(vocab_size=30, hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
...                                 intermediate_size=16, embedding_size=4, model="albert")
>>> [layer.name for layer in model.layers].count("Transformer-MultiHeadSelfAttention")  # one, used twice
1
"""
from bert4long.models import BERT


class ALBERT(BERT):
    """ALBERT: factorised embeddings and one transformer block shared across depth
    (google-research/albert TF1 layout, ``bert/encoder/transformer/group_0/inner_group_0/``)."""

    shared_block = True
    ALBERT_PREFIX = "bert/encoder/transformer/group_0/inner_group_0/"

    def layer_names(self, index):
        return "Transformer-MultiHeadSelfAttention", "Transformer-FeedForward"

    def layer_block(self, index):
        """Every layer reads the one shared block."""
        return self.block_mapping(
            self.ALBERT_PREFIX,
            attention="attention_1/",
            intermediate="ffn_1/intermediate/",
            output="ffn_1/intermediate/output/",
            attention_norm="LayerNorm/",
            output_norm="LayerNorm_1/",
        )


class ALBERTUnshared(ALBERT):
    """ALBERT weights loaded into separate per-layer blocks (each starts from the shared block)."""

    shared_block = False

    def layer_names(self, index):
        return BERT.layer_names(self, index)
