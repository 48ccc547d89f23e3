"""ELECTRA: the discriminator of google-research/electra on the BERT builder.

>>> from bert4long.models import build_transformer_model
>>> model = build_transformer_model(vocab_size=30, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
...                                 intermediate_size=16, model="electra", with_discriminator=True)
>>> model.output.shape
(None, None, 1)
"""
from bert4long.layers.activations import get_activation
from bert4long.models import BERT


class ELECTRA(BERT):
    """ELECTRA discriminator (google-research/electra layout, ``electra/...`` names).

    The encoder is BERT's; with ``embedding_size != hidden_size`` the embeddings
    are projected by ``electra/embeddings_project``. The checkpoints have no
    pooler or MLM head.

    Args:
        with_discriminator: False returns the sequence output; True adds the
            replaced-token head (``discriminator_predictions/dense``, ``dense_1``)
            with a sigmoid, ``[batch, length, 1]``; a string picks another
            activation (e.g. ``'linear'`` for logits).
        **kwargs: `Transformer` arguments.

    Example:
    >>> from bert4long.models import build_transformer_model
    >>> model = build_transformer_model("electra/config.json", "electra/model.ckpt",
    ...                                 model="electra", with_discriminator=True)  # doctest: +SKIP

    Reference: Clark et al., ELECTRA (2020), https://arxiv.org/abs/2003.10555.
    """


    def __init__(self, with_discriminator=False, **kwargs):
        heads = [k for k in ("with_pool", "with_nsp", "with_mlm", "gathered_mlm") if kwargs.get(k)]
        if heads:
            raise ValueError(
                f"model='electra' has no {', '.join(heads)} head: ELECTRA discriminator checkpoints hold the "
                "encoder and discriminator_predictions only. Pass with_discriminator=True instead."
            )
        super().__init__(**kwargs)
        self.with_discriminator = with_discriminator

    def apply_final_layers(self, x):
        if not self.with_discriminator:
            return x
        activation = "sigmoid" if self.with_discriminator is True else self.with_discriminator
        x = self.dense(self.hidden_size, "Discriminator-Dense", activation=get_activation(self.hidden_act))(x)
        # float32 like every MLM head (`MLM-Activation`): under mixed_float16 the probabilities and their loss
        return self.dense(1, "Discriminator-Prediction", activation=activation, dtype="float32")(x)

    def variable_mapping(self):
        def electra(target):
            if isinstance(target, tuple):
                return (electra(target[0]),) + target[1:]
            return "electra/" + target[len("bert/"):]

        mapping = super().variable_mapping()
        for layer_name in self.head_mapping():
            del mapping[layer_name]
        mapping = {layer: {path: electra(t) for path, t in weights.items()} for layer, weights in mapping.items()}
        mapping["Embedding-Mapping"] = {"kernel": "electra/embeddings_project/kernel",
                                        "bias": "electra/embeddings_project/bias"}
        mapping["Discriminator-Dense"] = {
            "kernel": "discriminator_predictions/dense/kernel",
            "bias": "discriminator_predictions/dense/bias",
        }
        mapping["Discriminator-Prediction"] = {
            "kernel": "discriminator_predictions/dense_1/kernel",
            "bias": "discriminator_predictions/dense_1/bias",
        }
        return mapping
