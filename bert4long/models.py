"""BERT-family models built layer by layer, with original-checkpoint loading.

`build_transformer_model` is the entry point bert4keras users know. Each model
class writes its checkpoint layout down as data in `variable_mapping()`:
``{layer name: {weight path: checkpoint variable}}``; loading and saving both
go through that table by name, never by list order, in the checkpoint engine
`bert4long.checkpoint_layout`. Config keys are translated by `bert4long.config_keys`.
"""
import importlib
import inspect
import json
import os

import keras
import numpy as np

from bert4long.checked_model import CheckedModel
from bert4long.checkpoint_layout import (  # noqa: F401 -- check_vocab_size, the constants: bert4long.models names
    LAYER_NAME,
    OPTIONAL_PREFIXES,
    SIZE_KEYS,
    STRUCTURE_KEYS,
    check_checkpoint_matches,
    check_vocab_size,
    checkpoint_variables,
    load_mapped_weights,
    mapped_weights,
    open_checkpoint,
    stored_config,
    to_layer,
)
from bert4long.checkpoints import MissingCheckpointVariableError, write_checkpoint  # noqa: F401
from bert4long.config_keys import (  # noqa: F401 -- CONFIG_RENAMES, read_config: bert4long.models names
    CONFIG_KEYS,
    CONFIG_RENAMES,
    from_google_config,
    read_config,
    to_google_config,
)
from bert4long.huggingface import FAMILY_MODELS, is_huggingface_folder, read_huggingface_config
from bert4long.layers import (
    BiasAdd,
    Embedding,
    FeedForward,
    GatherPositions,
    MultiHeadAttention,
    PaddingMask,
    PositionEmbedding,
    TakeToken,
    UniLMMask,
)
from bert4long.layers.activations import get_activation
from bert4long.layers.dropout import Recompute, SeededDropout, name_seed
from bert4long.layers.position_extension import PositionExtension
from bert4long.layers.positions import check_max_relative_position
from bert4long.masked_lm_model import MaskedLMModel
from bert4long.outputs import write_text_atomically

APPLICATIONS = ("encoder", "lm", "unilm")


class Transformer:
    """Base builder: configuration, inputs, the layer stack and checkpoint I/O.

    Subclasses implement `apply_embeddings`, `apply_main_layers`,
    `apply_final_layers` and `variable_mapping`.
    """

    def __init__(
        self,
        vocab_size,
        hidden_size,
        num_hidden_layers,
        num_attention_heads,
        intermediate_size,
        hidden_act="gelu",
        embedding_size=None,
        attention_head_size=None,
        attention_key_size=None,
        dropout_rate=0.0,
        attention_dropout_rate=0.0,
        max_position=512,
        segment_vocab_size=2,
        sequence_length=None,
        keep_tokens=None,
        hierarchical_position=None,
        position_extension=None,
        position_extension_length=None,
        custom_position_ids=False,
        with_pool=False,
        with_nsp=False,
        with_mlm=False,
        gathered_mlm=False,
        application="encoder",
        attention="full",
        attention_config=None,
        feed_forward_chunk_size=None,
        recompute=False,
        attention_mask_input=False,
        initializer_range=0.02,
        layer_norm_epsilon=1e-12,
        pad_token_id=0,
        name=None,
    ):
        if application not in APPLICATIONS:
            raise ValueError(f"Unknown application {application!r}: choose one of {APPLICATIONS}.")
        if application == "unilm" and not segment_vocab_size:
            raise ValueError("application='unilm' needs segment ids: do not set segment_vocab_size=0.")
        self.vocab_size = len(keep_tokens) if keep_tokens is not None else vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.attention_head_size = attention_head_size or hidden_size // num_attention_heads
        self.attention_key_size = attention_key_size or self.attention_head_size
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.embedding_size = embedding_size or hidden_size
        self.dropout_rate = dropout_rate or 0.0
        self.attention_dropout_rate = attention_dropout_rate or 0.0
        self.max_position = max_position
        self.segment_vocab_size = segment_vocab_size
        self.sequence_length = sequence_length
        self.keep_tokens = None if keep_tokens is None else np.asarray(keep_tokens, dtype="int64")
        self.position_extension = PositionExtension.from_options(hierarchical_position, position_extension,
                                                                 position_extension_length)
        capacity = self.position_extension.capacity(max_position)
        if sequence_length is not None and capacity is not None and sequence_length > capacity and not custom_position_ids:
            raise ValueError(
                f"sequence_length={sequence_length} is longer than the {capacity} positions this model can "
                "place: "
                + ("pass hierarchical_position=True to place up to "
                   f"{max_position * max_position}." if self.position_extension.method is None
                   else "split the input into chunks.")
            )
        self.custom_position_ids = custom_position_ids
        self.with_nsp = with_nsp
        self.with_pool = with_pool or with_nsp
        self.with_mlm = with_mlm or (application in ("lm", "unilm"))  # bert4keras: language models predict tokens
        self.gathered_mlm = gathered_mlm
        if gathered_mlm and not with_mlm:
            self.with_mlm = True
        self.application = application
        self.attention = attention
        self.attention_config = dict(attention_config or {})
        self.feed_forward_chunk_size = feed_forward_chunk_size
        self.recompute = recompute
        self.attention_mask_input = attention_mask_input
        self.initializer = keras.initializers.TruncatedNormal(stddev=initializer_range)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.pad_token_id = pad_token_id
        self.name = name
        self.model = None

    # ----------------------------------------------------------------- building
    def build(self):
        """Create the Keras model (``self.model``)."""
        inputs = self.get_inputs()
        token_ids = inputs[0]
        if self.attention_mask_input:  # int 0 pad / 1 local / 2 global, handed to every attention kernel
            self.key_mask = self.input_named("Input-Attention-Mask")
        else:
            self.key_mask = PaddingMask(self.pad_token_id, name="Padding-Mask")(token_ids)
        self.attention_bias = None
        if self.application == "unilm":
            self.attention_bias = UniLMMask(name="Attention-UniLM-Mask")(inputs[1])
        x = self.apply_embeddings(inputs)
        for index in range(self.num_hidden_layers):
            x = self.apply_main_layers(x, index)
        outputs = self.apply_final_layers(x)
        # a lone full-vocabulary MLM output: the training step projects only the weighted positions
        model_class = MaskedLMModel if self.with_mlm and not self.gathered_mlm and not self.with_pool else CheckedModel
        self.model = model_class(inputs, outputs, name=self.name or type(self).__name__.lower())
        return self.model

    def get_inputs(self):
        shape = (self.sequence_length,)
        inputs = [keras.Input(shape, dtype="int32", name="Input-Token")]
        if self.segment_vocab_size > 0:
            inputs.append(keras.Input(shape, dtype="int32", name="Input-Segment"))
        if self.custom_position_ids:
            inputs.append(keras.Input(shape, dtype="int32", name="Input-Position"))
        if self.gathered_mlm:
            inputs.append(keras.Input((None,), dtype="int32", name="Input-Masked-Positions"))
        if self.attention_mask_input:
            inputs.append(keras.Input(shape, dtype="int32", name="Input-Attention-Mask"))
        self.inputs = inputs
        return inputs

    def input_named(self, name):
        return next(i for i in self.inputs if i.name == name)

    def dense(self, units, name, activation=None):
        return keras.layers.Dense(units, activation=activation, kernel_initializer=self.initializer, name=name)

    def layer_norm(self, name):
        return keras.layers.LayerNormalization(epsilon=self.layer_norm_epsilon, name=name)

    def dropout(self, name):
        return SeededDropout(self.dropout_rate, seed=name_seed(name), name=name)

    def attention_layer(self, name):
        return MultiHeadAttention(
            heads=self.num_attention_heads,
            head_size=self.attention_head_size,
            key_size=self.attention_key_size,
            attention_dropout=self.attention_dropout_rate,
            attention=self.attention,
            attention_config=self.attention_config,
            causal=self.application == "lm",
            kernel_initializer=self.initializer,
            position_bias=self.position_bias,
            max_relative_position=self.max_relative_position,
            name=name,
        )

    def attention_inputs(self, x):
        inputs = [x, self.key_mask]
        if self.attention_bias is not None:
            inputs.append(self.attention_bias)
        return inputs

    # ---------------------------------------------------------- checkpoint I/O
    def variable_mapping(self):
        """``{layer name: {weight path: checkpoint name or (name, transform)}}``."""
        raise NotImplementedError

    def _mapped_weights(self):
        """Yield ``(layer name, weight path, variable, checkpoint name, transform)`` for present layers."""
        return mapped_weights(self.model, self.variable_mapping())

    def open_checkpoint(self, checkpoint_path):
        """The name-keyed reader `load_weights_from_checkpoint` reads (see `open_checkpoint`)."""
        return open_checkpoint(checkpoint_path)

    def _to_layer(self, value, transform):
        return to_layer(value, transform, self.keep_tokens)

    def load_weights_from_checkpoint(self, checkpoint_path, partial_load=False):
        """Load every mapped weight by its original checkpoint name, checking that config and checkpoint agree.

        Refused unless ``partial_load=True`` (then a warning lists what is left
        out): trained variables this model would drop (more layers than
        ``num_hidden_layers``, a position table ``model='roformer'``/``'nezha'``
        has no place for, ...; optional heads, ``global_step`` and optimizer
        slots are not counted), and a structural setting that differs from the
        config stored beside the checkpoint (``bert_config.json`` or a Hugging
        Face ``config.json``), which is the only way to see a wrong
        ``num_attention_heads``: the weights' shapes do not show it. A shape
        mismatch is always an error; a missing variable raises
        `MissingCheckpointVariableError`. The engine is `bert4long.checkpoint_layout`.

        Example:
        >>> from bert4long.models import build_transformer_model
        >>> bert = build_transformer_model("bert_config.json", return_keras_model=False)  # doctest: +SKIP
        >>> bert.load_weights_from_checkpoint("bert_model.ckpt")  # doctest: +SKIP
        """
        reader = self.open_checkpoint(checkpoint_path)
        load_mapped_weights(self, reader)
        self.check_checkpoint_matches(reader, partial_load)
        for layer in self.model.layers:  # layers that derive weights from loaded ones (attention kernels)
            if hasattr(layer, "after_weights_loaded"):
                layer.after_weights_loaded()

    def check_checkpoint_matches(self, reader, partial_load=False):
        """Raise ``ValueError`` where ``reader``'s checkpoint and this configuration disagree (see
        `load_weights_from_checkpoint`); with ``partial_load`` warn instead."""
        check_checkpoint_matches(self, reader, partial_load)

    def google_config(self):
        """The Google ``bert_config.json`` keys that rebuild this model (every setting that changes its outputs).

        Example:
        >>> from bert4long.models import build_transformer_model
        >>> bert = build_transformer_model(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
        ...                                intermediate_size=16, layer_norm_epsilon=1e-5, pad_token_id=1,
        ...                                return_keras_model=False)
        >>> {k: bert.google_config()[k] for k in ("layer_norm_eps", "pad_token_id")}
        {'layer_norm_eps': 1e-05, 'pad_token_id': 1}
        """
        settings = {ours: getattr(self, ours) for ours, _, _, _ in CONFIG_KEYS if ours != "initializer_range"}
        config = to_google_config({**settings, "initializer_range": float(self.initializer.stddev)})
        if self.embedding_size != self.hidden_size:
            config["embedding_size"] = self.embedding_size
        if self.attention_head_size != self.hidden_size // self.num_attention_heads:
            config["attention_head_size"] = self.attention_head_size
        if self.attention_key_size != self.attention_head_size:
            config["attention_key_size"] = self.attention_key_size
        if self.max_relative_position is not None:
            config["max_relative_position"] = self.max_relative_position
        return config

    def write_config(self, path):
        """Write `google_config` as JSON to ``path``, atomically (so a checkpoint folder rebuilds this model exactly)."""
        write_text_atomically(path, json.dumps(self.google_config(), indent=2))

    def save_weights_as_checkpoint(self, checkpoint_path):
        """Write the weights back in the original layout (hierarchical positions add no rows).

        Example:
        >>> bert.save_weights_as_checkpoint("out/bert_model.ckpt")  # doctest: +SKIP
        """
        variables = checkpoint_variables(self)
        write_checkpoint(checkpoint_path, variables)

    model_name = "bert"
    position_bias = None  # positions inside attention: 'rotary' (RoFormer), 'typical_relative' (NEZHA)
    max_relative_position = None


class BERT(Transformer):
    """BERT (and RoBERTa, which shares its architecture and Google layout)."""

    model_name = "bert"

    def apply_embeddings(self, inputs):
        token_ids = inputs[0]
        self.token_embedding = Embedding(
            self.vocab_size, self.embedding_size, embeddings_initializer=self.initializer, name="Embedding-Token"
        )
        x = self.token_embedding(token_ids)
        if self.segment_vocab_size > 0:
            s = Embedding(
                self.segment_vocab_size,
                self.embedding_size,
                embeddings_initializer=self.initializer,
                name="Embedding-Segment",
            )(self.input_named("Input-Segment"))
            x = keras.layers.Add(name="Embedding-Token-Segment")([x, s])
        x = self.apply_position_embeddings(x)
        x = self.layer_norm("Embedding-Norm")(x)
        x = self.dropout("Embedding-Dropout")(x)
        if self.embedding_size != self.hidden_size:
            x = self.dense(self.hidden_size, "Embedding-Mapping")(x)
        return x

    def apply_position_embeddings(self, x):
        position_layer = PositionEmbedding(
            self.max_position,
            self.embedding_size,
            merge_mode="add",
            extension=self.position_extension,
            custom_position_ids=self.custom_position_ids,
            embeddings_initializer=self.initializer,
            name="Embedding-Position",
        )
        return position_layer([x, self.input_named("Input-Position")] if self.custom_position_ids else x)

    def layer_names(self, index):
        return f"Transformer-{index}-MultiHeadSelfAttention", f"Transformer-{index}-FeedForward"

    def apply_main_layers(self, x, index):
        attention_name, feed_forward_name = self.layer_names(index)
        residual = x
        x = self.reuse(attention_name, self.attention_layer)(self.attention_inputs(x))
        x = self.reuse(attention_name + "-Dropout", self.dropout)(x)
        x = self.reuse(attention_name + "-Add", lambda n: keras.layers.Add(name=n))([residual, x])
        x = self.reuse(attention_name + "-Norm", self.layer_norm)(x)
        residual = x
        x = self.reuse(feed_forward_name, self.feed_forward_layer)(x)
        x = self.reuse(feed_forward_name + "-Dropout", self.dropout)(x)
        x = self.reuse(feed_forward_name + "-Add", lambda n: keras.layers.Add(name=n))([residual, x])
        return self.reuse(feed_forward_name + "-Norm", self.layer_norm)(x)

    def reuse(self, name, factory):
        """Return the layer called ``name``, creating it once (ALBERT shares layers across depth)."""
        cache = self.__dict__.setdefault("_layers", {})
        if name not in cache:
            layer = factory(name)
            if self.recompute and isinstance(layer, (MultiHeadAttention, FeedForward, SeededDropout)):
                layer = Recompute(layer)  # gradient checkpointing, same name; see bert4long.layers.dropout
            cache[name] = layer
        return cache[name]

    def feed_forward_layer(self, name):
        return FeedForward(
            self.intermediate_size,
            activation=self.hidden_act,
            chunk_size=self.feed_forward_chunk_size,
            kernel_initializer=self.initializer,
            name=name,
        )

    def apply_final_layers(self, x):
        outputs = [x]
        if self.with_pool:
            pooled = TakeToken(0, name="Pooler")(x)
            pooled = self.dense(self.hidden_size, "Pooler-Dense", activation="tanh")(pooled)
            if self.with_nsp:
                pooled = self.dense(2, "NSP-Proba", activation="softmax")(pooled)
            outputs.append(pooled)
        if self.with_mlm:
            y = x
            if self.gathered_mlm:
                y = GatherPositions(name="MLM-Gather")([y, self.input_named("Input-Masked-Positions")])
            y = self.dense(self.embedding_size, "MLM-Dense", activation=get_activation(self.hidden_act))(y)
            y = self.layer_norm("MLM-Norm")(y)
            y = self.token_embedding(y, mode="dense")
            y = BiasAdd(name="MLM-Bias")(y)
            activation = "softmax" if self.with_mlm is True else self.with_mlm
            y = keras.layers.Activation(activation, dtype="float32", name="MLM-Activation")(y)
            outputs.append(y)
        if len(outputs) == 1:
            return outputs[0]
        if len(outputs) == 2:
            return outputs[1]
        return outputs[1:]

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


class ALBERT(BERT):
    """ALBERT: factorised embeddings and one transformer block shared across depth
    (google-research/albert TF1 layout, ``bert/encoder/transformer/group_0/inner_group_0/``)."""

    model_name = "albert"
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

    model_name = "albert_unshared"

    def layer_names(self, index):
        return BERT.layer_names(self, index)


class RelativePositionBERT(BERT):
    """Base of BERT variants whose positions enter inside attention (`Transformer.position_bias`).

    They have no position table, so no length limit (``max_position`` is unused),
    and their checkpoints are the Google BERT layout without
    ``bert/embeddings/position_embeddings``.
    """

    def __init__(self, **kwargs):
        for option in ("hierarchical_position", "custom_position_ids"):
            if kwargs.get(option):
                raise ValueError(
                    f"model={self.model_name!r} has no position table, so {option} does not apply: "
                    f"its {self.position_bias!r} positions already place any length. Drop {option}."
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
    (``position_bias='typical_relative'``), which only ``attention='full'``
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

    model_name = "nezha"
    position_bias = "typical_relative"

    def __init__(self, max_relative_position=64, **kwargs):
        super().__init__(**kwargs)
        self.max_relative_position = check_max_relative_position(max_relative_position)


class RoFormer(RelativePositionBERT):
    """RoFormer (ZhuiyiTechnology): rotary position embedding on queries and keys.

    Queries and keys are rotated by their position before the attention kernel
    (``position_bias='rotary'``), so every ``attention=`` kernel works with it.
    Checkpoint layout: Google BERT names (``bert/...``, pooler and ``cls/`` heads)
    without position embeddings.

    Example:
    >>> from bert4long.models import build_transformer_model
    >>> model = build_transformer_model("roformer/bert_config.json", "roformer/bert_model.ckpt",
    ...                                 model="roformer", attention="chunked")  # doctest: +SKIP

    Reference: Su et al., RoFormer (2021), https://arxiv.org/abs/2104.09864.
    """

    model_name = "roformer"
    position_bias = "rotary"


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

    model_name = "electra"

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
        return self.dense(1, "Discriminator-Prediction", activation=activation)(x)

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


MODELS = {"bert": BERT, "roberta": BERT, "albert": ALBERT, "albert_unshared": ALBERTUnshared,
          "nezha": NEZHA, "roformer": RoFormer, "electra": ELECTRA}

def family_model_class(model_type):
    """The class of a family kept in its own module (`FAMILY_MODELS`), imported on first use."""
    module, name = FAMILY_MODELS[model_type].split(":")
    return getattr(importlib.import_module(module), name)


def build_transformer_model(
    config_path=None, checkpoint_path=None, model="bert", application="encoder", return_keras_model=True,
    partial_load=False, **kwargs
):
    """Build a BERT-family model from a JSON config and load an original checkpoint.

    Keyword arguments override the config. Inputs are int32 ``[token_ids,
    segment_ids]`` (token id 0 is padding); outputs follow bert4keras: the
    sequence output, or the pooled/NSP output and/or MLM output when requested.

    Args:
        config_path: ``bert_config.json`` (Google keys; bert4keras renames applied).
        checkpoint_path: checkpoint prefix or folder (``bert_model.ckpt``); None
            leaves random weights.
        model: ``'bert'``, ``'roberta'``, ``'albert'``, ``'albert_unshared'``,
            ``'nezha'`` (``max_relative_position``, default 64), ``'roformer'`` or
            ``'electra'`` (``with_discriminator``); see `MODELS`. A Hugging Face
            folder whose ``model_type`` names a family in `FAMILY_MODELS`
            (``'modernbert'``) builds that family whatever ``model`` says.
        application: ``'encoder'``, ``'lm'`` (causal) or ``'unilm'`` (seq2seq mask).
        return_keras_model: False returns the builder (with
            ``load_weights_from_checkpoint`` / ``save_weights_as_checkpoint``).
        partial_load: True loads a checkpoint that does not match the
            configuration (trained weights dropped, settings that differ from the
            config stored beside it) with a warning instead of an error; see
            `Transformer.load_weights_from_checkpoint`.
        **kwargs: ``with_pool``, ``with_nsp``, ``with_mlm`` (True: probabilities,
            ``'linear'``: logits), ``gathered_mlm`` (extra input of masked positions;
            MLM output only there), ``hierarchical_position`` (None, True = 0.4, or
            alpha), ``segment_vocab_size``, ``sequence_length``, ``keep_tokens``,
            ``custom_position_ids``, ``attention`` / ``attention_config`` (long-text
            kernels), ``attention_mask_input`` (True: a last int32 input
            ``Input-Attention-Mask`` ``[batch, length]``, 0 padding / 1 local /
            2 global, replacing the padding mask from token ids; with
            ``attention='sliding_window'`` the tokens marked 2 are global, up to
            ``attention_config['max_global_tokens']`` per example),
            ``feed_forward_chunk_size``, ``recompute``, and any config key.

    Example:
    >>> from bert4long.models import build_transformer_model
    >>> model = build_transformer_model("bert_config.json", "bert_model.ckpt",
    ...                                 hierarchical_position=True, with_mlm=True)  # doctest: +SKIP
    """
    configs = {}
    if config_path is None and is_huggingface_folder(checkpoint_path):
        config_path = os.path.join(checkpoint_path, "config.json")
    if config_path is not None:
        configs.update(read_config(config_path))
        if "model_type" in configs:  # a Hugging Face config.json
            configs = read_huggingface_config(config_path)
            family = configs.pop("model")
            if family in FAMILY_MODELS:  # a family with its own class (e.g. ModernBERT)
                model = family
    configs = from_google_config({**configs, **kwargs})
    if isinstance(model, str):
        if model.lower() not in MODELS and model.lower() not in FAMILY_MODELS:
            raise ValueError(f"Unknown model {model!r}: choose one of {sorted(MODELS) + sorted(FAMILY_MODELS)}.")
        model_class = MODELS.get(model.lower()) or family_model_class(model.lower())
    else:
        model_class = model
    configs["application"] = application
    accepted = set(Transformer.__init__.__code__.co_varnames[1 : Transformer.__init__.__code__.co_argcount])
    accepted |= set(inspect.signature(model_class.__init__).parameters) - {"self", "kwargs"}  # e.g. NEZHA's
    unknown = sorted(set(kwargs) - accepted)
    if unknown:
        raise TypeError(f"Unknown argument(s) {unknown} for build_transformer_model; accepted: {sorted(accepted)}.")
    missing = [k for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
               if k not in configs]
    if missing:
        raise ValueError(f"Model configuration lacks {missing}: pass config_path (bert_config.json) or these arguments.")
    transformer = model_class(**{k: v for k, v in configs.items() if k in accepted})
    transformer.build()
    if checkpoint_path is not None:
        transformer.load_weights_from_checkpoint(checkpoint_path, partial_load=partial_load)
    return transformer.model if return_keras_model else transformer
