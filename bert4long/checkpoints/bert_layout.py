"""The Google BERT checkpoint layout (``bert/embeddings/``, ``bert/encoder/layer_N/``, ``cls/``) as data.

`BERTCheckpointLayout` gives a builder its `variable_mapping()`; `bert4long.checkpoints.layout`
applies that table to a checkpoint, both ways.

>>> BERTCheckpointLayout.block_mapping("bert/encoder/layer_0/")["attention_norm"]["gamma"]
'bert/encoder/layer_0/attention/output/LayerNorm/gamma'
"""


class BERTCheckpointLayout:
    """``{layer name: {weight path: checkpoint name}}`` of BERT's layers (the builder names them by
    ``layer_names(index)``); ALBERT, ELECTRA, NEZHA and RoFormer edit this table."""

    def embedding_mapping(self):
        return {
            "Embedding-Token": {"embeddings": ("bert/embeddings/word_embeddings", "keep_tokens")},
            "Embedding-Segment": {"embeddings": "bert/embeddings/token_type_embeddings"},
            "Embedding-Position": {"embeddings": "bert/embeddings/position_embeddings"},
            "Embedding-Norm": {"gamma": "bert/embeddings/LayerNorm/gamma", "beta": "bert/embeddings/LayerNorm/beta"},
            "Embedding-Mapping": {
                "kernel": "bert/encoder/embedding_hidden_mapping_in/kernel",
                "bias": "bert/encoder/embedding_hidden_mapping_in/bias",
            },
        }

    def head_mapping(self):
        return {
            "Pooler-Dense": {"kernel": "bert/pooler/dense/kernel", "bias": "bert/pooler/dense/bias"},
            "NSP-Proba": {
                "kernel": ("cls/seq_relationship/output_weights", "transpose"),
                "bias": "cls/seq_relationship/output_bias",
            },
            "MLM-Dense": {
                "kernel": "cls/predictions/transform/dense/kernel",
                "bias": "cls/predictions/transform/dense/bias",
            },
            "MLM-Norm": {
                "gamma": "cls/predictions/transform/LayerNorm/gamma",
                "beta": "cls/predictions/transform/LayerNorm/beta",
            },
            "MLM-Bias": {"bias": ("cls/predictions/output_bias", "keep_tokens")},
        }

    @staticmethod
    def block_mapping(prefix, attention="attention/", intermediate="intermediate/", output="output/",
                      attention_norm="attention/output/LayerNorm/", output_norm="output/LayerNorm/"):
        """Mapping of one transformer block whose variables start with ``prefix``."""

        def dense(sub):
            return {"kernel": prefix + sub + "kernel", "bias": prefix + sub + "bias"}

        def norm(sub):
            return {"gamma": prefix + sub + "gamma", "beta": prefix + sub + "beta"}

        attention_weights = {}
        for attr, sub in (("q_dense", "self/query/"), ("k_dense", "self/key/"), ("v_dense", "self/value/"),
                          ("o_dense", "output/dense/")):
            attention_weights.update({f"{attr}.{k}": v for k, v in dense(attention + sub).items()})
        feed_forward = {f"intermediate_dense.{k}": v for k, v in dense(intermediate + "dense/").items()}
        feed_forward.update({f"output_dense.{k}": v for k, v in dense(output + "dense/").items()})
        return {"attention": attention_weights, "attention_norm": norm(attention_norm),
                "feed_forward": feed_forward, "feed_forward_norm": norm(output_norm)}

    def layer_block(self, index):
        """The checkpoint names of transformer block ``index`` (see `block_mapping`)."""
        return self.block_mapping(f"bert/encoder/layer_{index}/")

    def variable_mapping(self):
        mapping = self.embedding_mapping()
        for index in range(self.num_hidden_layers):
            attention_name, feed_forward_name = self.layer_names(index)
            block = self.layer_block(index)
            mapping[attention_name] = block["attention"]
            mapping[attention_name + "-Norm"] = block["attention_norm"]
            mapping[feed_forward_name] = block["feed_forward"]
            mapping[feed_forward_name + "-Norm"] = block["feed_forward_norm"]
        mapping.update(self.head_mapping())
        return mapping
