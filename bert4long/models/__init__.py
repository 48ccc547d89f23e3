"""BERT-family models built layer by layer, with original-checkpoint loading.

`build_transformer_model` is the entry point bert4keras users know. This module
assembles models: the `Transformer` builder and `BERT`; `bert4long.families`
finds the families kept in their own modules (`bert4long.models.albert`,
`bert4long.models.relative_position` for NEZHA and RoFormer, `bert4long.models.electra`, and
the Hugging Face families), which are also names here. Each
model class writes its checkpoint layout down as data in `variable_mapping()`
(BERT's is `bert4long.checkpoints.bert_layout`): ``{layer name: {weight path: checkpoint
variable}}``; loading and saving both go through that table by name, never by
list order, in the checkpoint engine `bert4long.checkpoints.layout`. Config keys
are translated by `bert4long.checkpoints.config`.
"""
import inspect

import keras
import numpy as np

from bert4long.checkpoints.bert_layout import BERTCheckpointLayout
from bert4long.checkpoints.layout import CheckpointIO, check_sizes_before_build
from bert4long.checkpoints.source import Source, resolve_source
from bert4long.families import FAMILIES
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
from bert4long.layers.nodes import Add
from bert4long.lazy_names import lazy_getattr
from bert4long.models.checked import CheckedModel
from bert4long.models.masked_lm import MaskedLMModel
from bert4long.ops.dropout import Recompute, SeededDropout, name_seed
from bert4long.ops.position_extension import PositionExtension

APPLICATIONS = ("encoder", "lm", "unilm")


class Transformer(CheckpointIO):
    """Base builder: configuration, inputs and the layer stack; checkpoint I/O comes from `CheckpointIO`.

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
        self.segment_vocab_size = segment_vocab_size
        self.keep_tokens = None if keep_tokens is None else np.asarray(keep_tokens, dtype="int64")
        self.configure_positions(max_position, sequence_length, hierarchical_position, position_extension,
                                 position_extension_length, custom_position_ids)
        self.configure_heads(with_pool, with_nsp, with_mlm, gathered_mlm, application)
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

    def configure_positions(self, max_position, sequence_length, hierarchical_position, position_extension,
                            position_extension_length, custom_position_ids):
        """Set the position settings; refuse a ``sequence_length`` longer than the positions can place."""
        self.max_position = max_position
        self.sequence_length = sequence_length
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

    def configure_heads(self, with_pool, with_nsp, with_mlm, gathered_mlm, application):
        """Set the output heads: NSP implies the pooler, a language model or gathered MLM implies MLM."""
        self.with_nsp = with_nsp
        self.with_pool = with_pool or with_nsp
        self.with_mlm = with_mlm or (application in ("lm", "unilm"))  # bert4keras: language models predict tokens
        self.gathered_mlm = gathered_mlm
        if gathered_mlm and not with_mlm:
            self.with_mlm = True
        self.application = application

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

    def dense(self, units, name, activation=None, dtype=None):
        return keras.layers.Dense(units, activation=activation, kernel_initializer=self.initializer, name=name,
                                  **({"dtype": dtype} if dtype else {}))

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
            positions=self.attention_positions(),
            name=name,
        )

    def attention_positions(self):
        """The position object placed inside each attention layer (`bert4long.attention.positions`; None: the
        positions are a table added to the embeddings)."""
        return None

    def attention_inputs(self, x):
        inputs = [x, self.key_mask]
        if self.attention_bias is not None:
            inputs.append(self.attention_bias)
        return inputs

    max_relative_position = None   # NEZHA's clipping distance (its config key)
    shared_block = False  # one block read by every layer (ALBERT)


class BERT(BERTCheckpointLayout, Transformer):
    """BERT (and RoBERTa, which shares its architecture and Google layout)."""


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
            x = Add(name="Embedding-Token-Segment")([x, s])
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
        x = self.reuse(attention_name + "-Add", lambda n: Add(name=n))([residual, x])
        x = self.reuse(attention_name + "-Norm", self.layer_norm)(x)
        residual = x
        x = self.reuse(feed_forward_name, self.feed_forward_layer)(x)
        x = self.reuse(feed_forward_name + "-Dropout", self.dropout)(x)
        x = self.reuse(feed_forward_name + "-Add", lambda n: Add(name=n))([residual, x])
        return self.reuse(feed_forward_name + "-Norm", self.layer_norm)(x)

    def reuse(self, name, factory):
        """Return the layer called ``name``, creating it once (ALBERT shares layers across depth)."""
        cache = self.__dict__.setdefault("_layers", {})
        if name not in cache:
            layer = factory(name)
            if self.recompute and isinstance(layer, (MultiHeadAttention, FeedForward, SeededDropout)):
                layer = Recompute(layer)  # gradient checkpointing, same name; see bert4long.ops.dropout
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


# Builder classes under their bert4keras names, imported on first use (``bert4long.models.ALBERT``, ...): every
# family's, and NEZHA's and RoFormer's base; {class name: its module}.
BUILDER_MODULES = {f.builder.split(":")[1]: f.builder.split(":")[0] for f in FAMILIES} | {
    "RelativePositionBERT": "bert4long.models.relative_position"}
__getattr__ = lazy_getattr(__name__, BUILDER_MODULES)


def build_transformer_model(
    config_path=None, checkpoint_path=None, model="bert", application="encoder", return_keras_model=True,
    partial_load=False, override_position_extension=False, **kwargs
):
    """Build a BERT-family model from a JSON config and load an original checkpoint.

    Keyword arguments override the config. Inputs are int32 ``[token_ids,
    segment_ids]`` (token id 0 is padding); outputs follow bert4keras: the
    sequence output, or the pooled/NSP output and/or MLM output when requested.

    Args:
        config_path: ``bert_config.json`` (Google keys; bert4keras renames applied), or a
            `bert4long.checkpoints.source.Source` (resolved once: config, family and open checkpoint; then
            ``checkpoint_path`` is left None and the source's reader, if any, is loaded).
        checkpoint_path: checkpoint prefix or folder (``bert_model.ckpt``); None
            leaves random weights.
        model: ``'bert'``, ``'roberta'``, ``'albert'``, ``'albert_unshared'``,
            ``'nezha'`` (``max_relative_position``, default 64), ``'roformer'`` or
            ``'electra'`` (``with_discriminator``), ``'xlm-roberta'``; see
            `bert4long.families`. A Hugging Face folder whose family reads its own
            tensor names (``'modernbert'``, ...) builds that family whatever ``model`` says.
        application: ``'encoder'``, ``'lm'`` (causal) or ``'unilm'`` (seq2seq mask).
        return_keras_model: False returns the builder (with
            ``load_weights_from_checkpoint`` / ``save_weights_as_checkpoint``).
        partial_load: True loads a checkpoint that does not match the
            configuration (trained weights dropped, settings that differ from the
            config stored beside it) with a warning instead of an error; see
            `Transformer.load_weights_from_checkpoint`.
        override_position_extension: True builds with the position options given
            although the config records another extension (`bert4long.checkpoints.position_record`:
            a config bert4long wrote says how it was trained; with no position option
            the model gets that one, and a different one is an error).
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
            ``feed_forward_chunk_size``, ``recompute``, ``rope_scaling`` (ModernBERT's rotary positions
            stretched, replacing the config's: ``{'rope_type': 'yarn', 'factor': 4.0}``; see
            `bert4long.models.modernbert.ModernBERT`), and any config key.

    Example:
    >>> from bert4long.models import build_transformer_model
    >>> model = build_transformer_model("bert_config.json", "bert_model.ckpt",
    ...                                 hierarchical_position=True, with_mlm=True)  # doctest: +SKIP
    """
    if isinstance(config_path, Source) and (checkpoint_path is not None or model not in ("bert", config_path.model)):
        raise ValueError("build_transformer_model(source, ...): a Source names its own checkpoint and model; drop "
                         "checkpoint_path= and model=, or give them to resolve_source instead.")
    source = config_path if isinstance(config_path, Source) else resolve_source(
        checkpoint_path, config_path, model, open_reader=checkpoint_path is not None)
    configs, kwargs = source.builder_arguments(kwargs, override_position_extension)
    builder_class = source.builder_class()
    configs["application"] = application
    accepted = set(Transformer.__init__.__code__.co_varnames[1 : Transformer.__init__.__code__.co_argcount])
    accepted |= set(inspect.signature(builder_class.__init__).parameters) - {"self", "kwargs"}  # e.g. NEZHA's
    unknown = sorted(set(kwargs) - accepted)
    if unknown:
        raise TypeError(f"Unknown argument(s) {unknown} for build_transformer_model; accepted: {sorted(accepted)}.")
    missing = [k for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
               if k not in configs]
    if missing:
        raise ValueError(f"Model configuration lacks {missing}: pass config_path (bert_config.json) or these arguments.")
    transformer = builder_class(**{k: v for k, v in configs.items() if k in accepted})
    if source.reader is not None:  # the config's sizes against the checkpoint's tensors, before any allocation
        check_sizes_before_build(transformer, source.reader, source.config_path)
    transformer.build()
    if source.reader is not None:
        transformer.load_weights_from_checkpoint(source.reader, partial_load=partial_load)
    return transformer.model if return_keras_model else transformer
