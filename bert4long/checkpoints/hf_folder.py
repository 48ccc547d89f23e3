"""Hugging Face folders read and written under their own tensor names, without PyTorch.

The families declared with ``checkpoint="safetensors"`` (Longformer, BigBird) write their
`variable_mapping()` directly in the safetensors names, so that table is the whole format: a name is the key
without the task prefix (``longformer.``, ``bert.``: their `bert4long.families.Family`'s ``task_prefixes``) that
``*Model``, ``*ForMaskedLM`` and ``*ForSequenceClassification`` save it under or not, and the heads' names
(``lm_head.``, ``cls.``) carry none. `HuggingFaceFamily` is the builder mixin that writes that table; the
engine (`bert4long.checkpoints.layout`: its one safetensors reader and writer) loads and saves it.
`write_huggingface_folder` writes any builder's folder, the BERT builder's as BERT, RoBERTa or XLM-RoBERTa.
"""
from bert4long.checkpoints.layout import save_huggingface_folder
from bert4long.families import family


def dense_weights(name):
    """Mapping of a Keras ``Dense`` from a torch ``Linear`` ``name`` (its weight is the transposed kernel)."""
    return {"kernel": (name + ".weight", "transpose"), "bias": name + ".bias"}


def norm_weights(name):
    """Mapping of a Keras ``LayerNormalization`` from a torch ``LayerNorm`` ``name``."""
    return {"gamma": name + ".weight", "beta": name + ".bias"}


class HuggingFaceFamily:
    """Mixin of a `bert4long.models.Transformer` whose `variable_mapping()` uses safetensors names.

    Its ``family`` (`bert4long.checkpoints.layout.CheckpointIO.family`, from the family's declaration) gives the task
    prefix, head names (saved without the task prefix) and key table (``config.json`` <-> builder arguments, read both
    ways).
    """

    @classmethod
    def from_huggingface_config(cls, hf):
        """`build_transformer_model` keyword arguments from a ``config.json`` dict (the family's key table)."""
        return cls.family.from_huggingface(hf)

    def encoder_mapping(self):
        """Embeddings and post-norm blocks in the BERT layout that Longformer and BigBird share.

        `attention_weights(index)` adds weights of a layer's attention beyond its query/key/value/output.
        """
        mapping = {
            "Embedding-Token": {"embeddings": ("embeddings.word_embeddings.weight", "keep_tokens")},
            "Embedding-Segment": {"embeddings": "embeddings.token_type_embeddings.weight"},
            "Embedding-Position": {"embeddings": "embeddings.position_embeddings.weight"},
            "Embedding-Norm": norm_weights("embeddings.LayerNorm"),
        }
        for index in range(self.num_hidden_layers):
            attention_name, feed_forward_name = self.layer_names(index)
            prefix = f"encoder.layer.{index}."
            attention = {}
            for attribute, name in (("q_dense", "attention.self.query"), ("k_dense", "attention.self.key"),
                                    ("v_dense", "attention.self.value"), ("o_dense", "attention.output.dense"),
                                    *self.attention_weights(index)):
                attention.update({f"{attribute}.{k}": v for k, v in dense_weights(prefix + name).items()})
            feed_forward = {f"intermediate_dense.{k}": v for k, v in dense_weights(prefix + "intermediate.dense").items()}
            feed_forward.update({f"output_dense.{k}": v for k, v in dense_weights(prefix + "output.dense").items()})
            mapping[attention_name] = attention
            mapping[attention_name + "-Norm"] = norm_weights(prefix + "attention.output.LayerNorm")
            mapping[feed_forward_name] = feed_forward
            mapping[feed_forward_name + "-Norm"] = norm_weights(prefix + "output.LayerNorm")
        return mapping

    def attention_weights(self, index):
        """``(attribute path, torch Linear name)`` of extra attention projections of layer ``index``."""
        return ()


def write_huggingface_folder(builder, folder, model=None):
    """Write ``builder`` as a Hugging Face folder that transformers loads (``*ForMaskedLM`` with an MLM head,
    else ``*Model``), as family ``model`` (``'bert'``, ``'roberta'``, ``'xlm-roberta'`` for the BERT builder;
    default: the builder's own family, else ``'bert'``): `bert4long.checkpoints.layout.save_huggingface_folder`,
    each weight under the key its family's naming reads back (RoBERTa's unused position rows written as zeros).

    Example:
    >>> builder = build_transformer_model(checkpoint_path="xlm-roberta-base/", with_mlm=True,
    ...                                   return_keras_model=False)  # doctest: +SKIP
    >>> write_huggingface_folder(builder, "xlm-roberta-tuned/", model="xlm-roberta")  # doctest: +SKIP
    """
    declared = (builder.family or family("bert")) if model is None else family(model)
    if declared.reads_own_names and declared is not builder.family:
        raise ValueError(f"model={model!r} folders are written by the builder: save_weights_as_checkpoint(folder).")
    save_huggingface_folder(builder, folder, declared)
