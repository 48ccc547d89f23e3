"""ModernBERT (Answer.AI and LightOn, 2024) on Keras 3, read from and written to Hugging Face folders.

`build_transformer_model(checkpoint_path=FOLDER)` builds this family when the
folder's ``config.json`` says ``"model_type": "modernbert"`` (answerdotai/ModernBERT-base
and -large, mmBERT). The numbers are those of transformers' PyTorch
``ModernBertModel`` / ``ModernBertForMaskedLM`` on its padded (eager / sdpa) path:

* embeddings: the token table, then LayerNorm (``Embedding-Norm``); no position
  table and no segments;
* ``num_hidden_layers`` pre-norm blocks ``x + Wo(attention(norm(x)))`` then
  ``x + FeedForward(norm(x))``; block 0 has no attention norm (the embedding norm
  precedes it); the feed-forward is GeGLU (``Wi`` gives ``[a, g]``, ``Wo`` takes
  ``gelu(a) * g``);
* attention: one fused ``Wqkv`` projection, rotary positions in the rotate-half
  layout (`bert4long.ops.positions.apply_rotary_half`); layers whose
  ``layer_types`` entry is ``'full_attention'`` (every
  ``global_attn_every_n_layers``-th from layer 0) attend globally with base
  ``global_rope_theta``, the others through the ``sliding_window`` kernel,
  ``|i - j| <= local_attention // 2``, with base ``local_rope_theta``; each
  layer type's ``rope_parameters`` (or the older ``rope_scaling`` key, for both)
  may scale its rotary positions (``linear``, ``dynamic`` or ``yarn``,
  `bert4long.ops.positions.rope_frequencies`; read as transformers 5 reads them,
  `rope_from_config`), and ``rope_scaling=`` stretches them at build time;
* ``Output-Norm`` (transformers' ``final_norm``), then with ``with_mlm`` the head
  ``MLM-Dense`` (activation ``classifier_activation``), ``MLM-Norm``, the tied
  token table and ``MLM-Bias`` (``decoder.bias``).

No layer has biases unless the config's ``attention_bias`` / ``mlp_bias`` /
``norm_bias`` / ``classifier_bias`` say so. Weights are read with safetensors'
numpy API under their Hugging Face names, with or without the ``model.`` prefix
that ``ModernBertForMaskedLM`` and ``ModernBertForSequenceClassification`` add.

Reference: Warner et al., Smarter, Better, Faster, Longer: A Modern Bidirectional
Encoder (2024), https://arxiv.org/abs/2412.13663.
"""
import math

import keras

from bert4long.attention import MultiHeadAttention
from bert4long.attention.positions import RotateHalfPositions
from bert4long.layers import Add, BiasAdd, Embedding, FeedForward, GatherPositions
from bert4long.layers.activations import get_activation
from bert4long.models import Transformer
from bert4long.ops.dropout import Recompute, SeededDropout, name_seed
from bert4long.rope_scaling import check_rope_number, resolve_rope_scaling, rope_scaled_length

LAYER_TYPES = ("full_attention", "sliding_attention")


@keras.saving.register_keras_serializable(package="bert4long")
class ModernBertAttention(MultiHeadAttention):
    """The layer that older ``.keras`` files of ModernBERT hold, so that they load; removed in 0.3 (`ModernBERT`
    builds `MultiHeadAttention`): a `MultiHeadAttention` with a fused ``qkv``, `RotateHalfPositions` of base
    ``rope_theta`` and, with a ``window``, the ``sliding_window`` kernel (``|i - j| <= window // 2``).

    Example:
    >>> import numpy as np
    >>> from bert4long.models.modernbert import ModernBertAttention
    >>> layer = ModernBertAttention(heads=2, rope_theta=10000.0, window=4)
    >>> tuple(layer([np.random.rand(1, 9, 8).astype("float32"), np.ones((1, 9), bool)]).shape)
    (1, 9, 8)
    """

    def __init__(self, heads, rope_theta, window=None, use_bias=False, attention_dropout=0.0, attention="full",
                 attention_config=None, kernel_initializer="glorot_uniform", **kwargs):
        self.rope_theta = float(rope_theta)
        super().__init__(heads, None, use_bias=use_bias, attention_dropout=attention_dropout,
                         **modernbert_kernel(window, attention, attention_config),
                         kernel_initializer=kernel_initializer, positions=RotateHalfPositions(rope_theta),
                         fused_qkv=True, **kwargs)
        self.attention, self.attention_config = attention, dict(attention_config or {})

    @property
    def output_dense(self):
        """``o_dense`` under the name these files store its weights by."""
        return self.o_dense

    def get_config(self):
        config = keras.layers.Layer.get_config(self)
        config.update(heads=self.heads, rope_theta=self.rope_theta, window=self.window, use_bias=self.use_bias,
                      attention_dropout=self.attention_dropout, attention=self.attention,
                      attention_config=self.attention_config,
                      kernel_initializer=keras.initializers.serialize(self.kernel_initializer))
        return config


def modernbert_kernel(window, attention, attention_config):
    """The kernel of a ModernBERT layer: ``attention`` on global layers (``window`` None), else the
    ``sliding_window`` kernel of that total window without global tokens."""
    if window is None:
        return {"attention": attention, "attention_config": attention_config}
    return {"attention": "sliding_window",
            "attention_config": {"window": window, "global_tokens": [], "max_global_tokens": 0}}


def rope_from_config(hf, source="config.json"):
    """``({layer type: rope_theta}, {layer type: resolved scaling or None})`` of a ModernBERT ``config.json``
    dict, read as transformers 5 reads it: ``rope_parameters`` per layer type (one left out: unscaled), the
    older ``rope_scaling`` merged into both, ``global_rope_theta`` / ``local_rope_theta`` where an entry has no
    ``rope_theta``, ``type`` for a missing ``rope_type``; ``dynamic`` counts from ``max_position_embeddings``.
    What transformers refuses (a flat ``rope_parameters``, a null entry) or reads otherwise than it is written
    is refused naming ``source`` and the key."""
    where, rope, legacy = f"Config file {source!r}", hf.get("rope_parameters") or {}, hf.get("rope_scaling")
    if not (isinstance(rope, dict) and set(rope) <= set(LAYER_TYPES) and all(isinstance(e, dict) for e in rope.values())):
        raise ValueError(f"{where}: rope_parameters = {rope!r} is not one dict per layer type, which transformers 5 "
                         "refuses for ModernBERT: write {'full_attention': {'rope_type': 'linear', 'factor': 2.0, "
                         "'rope_theta': 160000.0}, 'sliding_attention': {...}}, or the older rope_scaling key "
                         "(applied to both layer types).")
    if legacy is not None and not (isinstance(legacy, dict) and (not rope or set(rope) == set(LAYER_TYPES))):
        raise ValueError(f"{where}: rope_scaling = {legacy!r} needs to be a dict such as {{'rope_type': 'linear', "
                         "'factor': 2.0}, beside a rope_parameters with both layer types or none (transformers 5 "
                         f"refuses anything else); got rope_parameters for {sorted(rope)}.")
    thetas, scalings = {}, {}
    for layer_type, (theta_key, theta) in {"full_attention": ("global_rope_theta", 160000.0),
                                          "sliding_attention": ("local_rope_theta", 10000.0)}.items():
        entry = {**(rope.get(layer_type) or {"rope_type": "default"}), **(legacy or {})}
        what = f"{where}: rope_parameters[{layer_type!r}]" + (" with rope_scaling" if legacy else "")
        thetas[layer_type] = (check_rope_number("rope_theta", entry.pop("rope_theta"), what) if "rope_theta" in entry
                              else check_rope_number(theta_key, hf.get(theta_key, theta), where))
        kind = entry.pop("type", None)
        entry.setdefault("rope_type", kind or "default")
        if kind is not None and kind != entry["rope_type"]:
            raise ValueError(f"{what}: 'type': {kind!r} beside rope_type {entry['rope_type']!r}: transformers 5 reads "
                             "rope_type and ignores type; rename type to rope_type to scale, or drop it.")
        if entry.pop("truncate", True) is not True:
            raise ValueError(f"{what}: truncate must be true: transformers' ModernBERT reads no truncate per layer "
                             "type (it always truncates yarn's correction range); drop it.")
        scaling = resolve_rope_scaling(entry, hf.get("max_position_embeddings", 8192), what)
        if scaling is not None and scaling["rope_type"] == "dynamic":   # (transformers ignores it there)
            scaling.pop("original_max_position_embeddings")
        scalings[layer_type] = scaling
    return thetas, scalings


def rope_parameters_entry(theta, scaling):
    """The ``rope_parameters`` entry transformers reads for base ``theta`` and a resolved ``scaling``."""
    if scaling is None:
        return {"rope_type": "default", "rope_theta": theta}
    entry = {key: value for key, value in scaling.items() if value is not None}
    if scaling["rope_type"] == "dynamic":
        entry.pop("original_max_position_embeddings")
    return {**entry, "rope_theta": theta}


def rope_scaling_per_layer_type(rope_scaling, max_position):
    """``{layer type: resolved scaling or None}`` of a ``rope_scaling`` argument: one description for both
    layer types (transformers' ``ModernBertConfig(rope_scaling=...)``), or one per layer type. ``dynamic``
    counts from ``max_position``, as transformers' ModernBERT does."""
    if rope_scaling and isinstance(rope_scaling, dict) and set(rope_scaling) <= set(LAYER_TYPES):
        scalings = {t: resolve_rope_scaling(rope_scaling.get(t), max_position, f"rope_scaling[{t!r}]")
                    for t in LAYER_TYPES}
    else:
        scalings = dict.fromkeys(LAYER_TYPES, resolve_rope_scaling(rope_scaling, max_position))
    for scaling in scalings.values():
        if scaling and scaling["rope_type"] == "dynamic" and scaling["original_max_position_embeddings"] != max_position:
            raise ValueError(f"rope_scaling: ModernBERT's dynamic scaling counts from max_position ({max_position}), "
                             "as transformers' does, not from original_max_position_embeddings="
                             f"{scaling['original_max_position_embeddings']}: drop that key or pass max_position.")
    return scalings


def layer_types_from(num_hidden_layers, global_attn_every_n_layers):
    """transformers' default ``layer_types``: global attention at layers 0, n, 2n, ..."""
    return ["sliding_attention" if i % global_attn_every_n_layers else "full_attention"
            for i in range(num_hidden_layers)]


class ModernBERT(Transformer):
    """ModernBERT (see the module docstring); built from a Hugging Face folder by `build_transformer_model`.

    Args:
        local_attention: total window of the local layers (``|i - j| <= local_attention // 2``).
        global_attn_every_n_layers: global attention at layers 0, n, 2n, ... (when
            ``layer_types`` is not given).
        layer_types: ``'full_attention'`` / ``'sliding_attention'`` per layer
            (transformers 5 writes it into ``config.json``).
        global_rope_theta, local_rope_theta: rotary bases of the global and local layers.
        rope_scaling: stretches the rotary positions beyond the trained length, as transformers'
            ``ModernBertConfig(rope_scaling=...)``: ``{'rope_type': 'linear' | 'dynamic' | 'yarn', 'factor':
            F, ...}`` for both layer types, or ``{'full_attention': ..., 'sliding_attention': ...}`` (None:
            unscaled); ``original_max_position_embeddings`` defaults to ``max_position``
            (`bert4long.rope_scaling.resolve_rope_scaling`). A given value replaces the config's.
        norm_bias, attention_bias, mlp_bias, classifier_bias, decoder_bias: which
            layers have biases (the config's flags).
        classifier_activation: activation of ``MLM-Dense``.
        embedding_dropout, mlp_dropout: dropout after the embedding norm and after
            each feed-forward (transformers drops inside it, before ``Wo``);
            ``attention_dropout_rate`` drops attention probabilities and the
            attention output. All 0 in the released models.
        huggingface_config: the ``config.json`` it was read from, kept for
            `save_weights_as_checkpoint`.
        **kwargs: `Transformer` arguments: ``with_mlm``, ``gathered_mlm``,
            ``attention_mask_input``, ``recompute``, ``sequence_length``,
            ``attention`` / ``attention_config`` (the global layers' kernel),
            ``feed_forward_chunk_size``, ``keep_tokens``, ...

    Example:
    >>> from bert4long.models import build_transformer_model
    >>> model = build_transformer_model(checkpoint_path="ModernBERT-base/", with_mlm=True)  # doctest: +SKIP
    >>> longer = build_transformer_model(checkpoint_path="ModernBERT-base/", sequence_length=32768,
    ...                                  rope_scaling={"rope_type": "yarn", "factor": 4.0})  # doctest: +SKIP
    """


    def __init__(self, local_attention=128, global_attn_every_n_layers=3, layer_types=None,
                 global_rope_theta=160000.0, local_rope_theta=10000.0, rope_scaling=None, norm_bias=False,
                 attention_bias=False, mlp_bias=False, classifier_bias=False, decoder_bias=True,
                 classifier_activation="gelu", embedding_dropout=0.0, mlp_dropout=0.0, tie_word_embeddings=True,
                 huggingface_config=None, **kwargs):
        unsupported = {"with_pool": "it has no pooler: take the first token of the sequence output "
                                    "(bert4long.layers.TakeToken) or its mean",
                       "with_nsp": "it has no next-sentence head",
                       "hierarchical_position": "its rotary positions have no table to extend; stretch them "
                                                "with rope_scaling={'rope_type': 'yarn', 'factor': 4.0}",
                       "position_extension": "its rotary positions have no table to extend; stretch them with "
                                             "rope_scaling={'rope_type': 'yarn', 'factor': 4.0}",
                       "custom_position_ids": "positions are always 0 .. length - 1, as in transformers"}
        for option, why in unsupported.items():
            if kwargs.get(option):
                raise ValueError(f"model='modernbert' does not take {option}: {why}. Drop {option}.")
        if kwargs.get("segment_vocab_size"):
            raise ValueError("model='modernbert' has no segment embeddings: build it without segment_vocab_size "
                             "(its only input is the token ids).")
        if kwargs.get("application", "encoder") != "encoder":
            raise ValueError("model='modernbert' is a bidirectional encoder: use application='encoder'.")
        if kwargs.get("with_mlm") and not tie_word_embeddings:
            raise ValueError("model='modernbert' ties the MLM decoder to the token embeddings; this config has "
                             "tie_word_embeddings=false, which bert4long does not build.")
        max_position = kwargs.setdefault("max_position", 8192)
        self.rope_scaling = rope_scaling_per_layer_type(rope_scaling, max_position)
        sequence_length = kwargs.pop("sequence_length", None)
        limit = rope_scaled_length(self.rope_scaling["full_attention"], max_position)  # local layers see a window
        if sequence_length is not None and limit is not None and sequence_length > limit:
            raise ValueError(
                f"sequence_length={sequence_length} is longer than the {limit} positions this ModernBERT places "
                f"(max_position_embeddings={max_position}): split the input into chunks (bert4long.data.chunking), "
                "stretch its rotary positions with rope_scaling={'rope_type': 'yarn', 'factor': "
                f"{math.ceil(sequence_length / max_position)}.0}} or pass max_position={sequence_length} to run "
                "them unscaled beyond the trained length."
            )
        kwargs["segment_vocab_size"] = 0
        super().__init__(**kwargs)
        self.sequence_length = sequence_length
        self.local_attention = local_attention
        self.layer_types = list(layer_types or layer_types_from(self.num_hidden_layers, global_attn_every_n_layers))
        if len(self.layer_types) != self.num_hidden_layers or not set(self.layer_types) <= set(LAYER_TYPES):
            raise ValueError(f"layer_types must list {self.num_hidden_layers} entries from {LAYER_TYPES}, got "
                             f"{self.layer_types}.")
        self.global_rope_theta = global_rope_theta
        self.local_rope_theta = local_rope_theta
        self.norm_bias = norm_bias
        self.attention_use_bias = attention_bias  # (`Transformer.build` owns `self.attention_bias`: the UniLM mask)
        self.mlp_bias = mlp_bias
        self.classifier_bias = classifier_bias
        self.decoder_bias = decoder_bias
        self.classifier_activation = classifier_activation
        self.embedding_dropout = embedding_dropout
        self.mlp_dropout = mlp_dropout
        self.huggingface_config = dict(huggingface_config or {})

    @staticmethod
    def placed_positions(config):
        """How many positions builder arguments ``config`` place: the trained ones, stretched by the rotary
        scaling of its global layers (None: ``dynamic``, any length); local layers see only their window."""
        max_position = config.get("max_position", 8192)
        scaling = rope_scaling_per_layer_type(config.get("rope_scaling"), max_position)["full_attention"]
        return rope_scaled_length(scaling, max_position)

    @staticmethod
    def from_huggingface_config(hf, source="config.json"):
        """`build_transformer_model` keyword arguments from a ModernBERT ``config.json`` dict (read from ``source``).

        Reads transformers 5's ``layer_types`` / ``rope_parameters`` and the older
        ``global_attn_every_n_layers`` / ``global_rope_theta`` / ``local_rope_theta`` / ``rope_scaling``
        (`rope_from_config`).
        """
        thetas, scalings = rope_from_config(hf, source)
        max_position = hf.get("max_position_embeddings", 8192)
        config = {key: hf[key] for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                                           "intermediate_size", "initializer_range", "local_attention",
                                           "global_attn_every_n_layers", "layer_types", "norm_bias",
                                           "attention_bias", "mlp_bias", "classifier_bias", "decoder_bias",
                                           "classifier_activation", "embedding_dropout", "mlp_dropout",
                                           "tie_word_embeddings") if hf.get(key) is not None}
        config.update(
            hidden_act=hf.get("hidden_activation", "gelu"),
            max_position=max_position,
            layer_norm_epsilon=hf.get("norm_eps", 1e-5),
            pad_token_id=hf.get("pad_token_id", 50283),
            attention_dropout_rate=hf.get("attention_dropout", 0.0),
            global_rope_theta=thetas["full_attention"],
            local_rope_theta=thetas["sliding_attention"],
            rope_scaling=scalings,
            huggingface_config=hf,
        )
        return config

    # ----------------------------------------------------------------- building
    def norm(self, name):
        return keras.layers.LayerNormalization(epsilon=self.layer_norm_epsilon, center=self.norm_bias, name=name)

    def dropout(self, name, rate=None):
        rate = self.dropout_rate if rate is None else rate
        return SeededDropout(rate, seed=name_seed(name), name=name)

    def recomputed(self, layer):
        return Recompute(layer) if self.recompute else layer

    def apply_embeddings(self, inputs):
        self.token_embedding = Embedding(self.vocab_size, self.hidden_size, embeddings_initializer=self.initializer,
                                         name="Embedding-Token")
        x = self.norm("Embedding-Norm")(self.token_embedding(inputs[0]))
        return self.dropout("Embedding-Dropout", self.embedding_dropout)(x)

    def layer_names(self, index):
        return f"Transformer-{index}-MultiHeadSelfAttention", f"Transformer-{index}-FeedForward"

    def apply_main_layers(self, x, index):
        attention_name, feed_forward_name = self.layer_names(index)
        is_global = self.layer_types[index] == "full_attention"
        window = None if is_global else 2 * (self.local_attention // 2)
        attention = MultiHeadAttention(
            self.num_attention_heads,
            None,   # hidden size / heads, checked when built
            use_bias=self.attention_use_bias,
            attention_dropout=self.attention_dropout_rate,
            **modernbert_kernel(window, self.attention, self.attention_config),
            kernel_initializer=self.initializer,
            positions=RotateHalfPositions(self.global_rope_theta if is_global else self.local_rope_theta,
                                          self.rope_scaling[self.layer_types[index]]),
            fused_qkv=True,
            name=attention_name,
        )
        h = x if index == 0 else self.norm(attention_name + "-Norm")(x)
        h = self.recomputed(attention)([h, self.key_mask])
        h = self.dropout(attention_name + "-Dropout", self.attention_dropout_rate)(h)
        x = Add(name=attention_name + "-Add")([x, h])
        feed_forward = FeedForward(self.intermediate_size, activation=self.hidden_act, use_bias=self.mlp_bias,
                                   gated=True, chunk_size=self.feed_forward_chunk_size,
                                   kernel_initializer=self.initializer, name=feed_forward_name)
        h = self.recomputed(feed_forward)(self.norm(feed_forward_name + "-Norm")(x))
        h = self.dropout(feed_forward_name + "-Dropout", self.mlp_dropout)(h)
        return Add(name=feed_forward_name + "-Add")([x, h])

    def apply_final_layers(self, x):
        x = self.norm("Output-Norm")(x)
        if not self.with_mlm:
            return x
        if self.gathered_mlm:
            x = GatherPositions(name="MLM-Gather")([x, self.input_named("Input-Masked-Positions")])
        x = keras.layers.Dense(self.hidden_size, activation=get_activation(self.classifier_activation),
                               use_bias=self.classifier_bias, kernel_initializer=self.initializer,
                               name="MLM-Dense")(x)
        x = self.token_embedding(self.norm("MLM-Norm")(x), mode="dense")
        if self.decoder_bias:
            x = BiasAdd(name="MLM-Bias")(x)
        activation = "softmax" if self.with_mlm is True else self.with_mlm
        return keras.layers.Activation(activation, dtype="float32", name="MLM-Activation")(x)

    # ---------------------------------------------------------- checkpoint I/O
    def variable_mapping(self):
        """``{layer: {weight: Hugging Face name (no 'model.' prefix) or (name, transform)}}``."""

        def linear(prefix, bias):
            return {"kernel": (prefix + ".weight", "transpose"), **({"bias": prefix + ".bias"} if bias else {})}

        def norm(prefix):
            return {"gamma": prefix + ".weight", **({"beta": prefix + ".bias"} if self.norm_bias else {})}

        def sub(prefix, weights):
            return {f"{prefix}.{path}": target for path, target in weights.items()}

        mapping = {"Embedding-Token": {"embeddings": ("embeddings.tok_embeddings.weight", "keep_tokens")},
                   "Embedding-Norm": norm("embeddings.norm")}
        for index in range(self.num_hidden_layers):
            attention_name, feed_forward_name = self.layer_names(index)
            layer = f"layers.{index}."
            if index:
                mapping[attention_name + "-Norm"] = norm(layer + "attn_norm")
            mapping[attention_name] = {**sub("qkv", linear(layer + "attn.Wqkv", self.attention_use_bias)),
                                       **sub("o_dense", linear(layer + "attn.Wo", self.attention_use_bias))}
            mapping[feed_forward_name + "-Norm"] = norm(layer + "mlp_norm")
            mapping[feed_forward_name] = {**sub("intermediate_dense", linear(layer + "mlp.Wi", self.mlp_bias)),
                                          **sub("output_dense", linear(layer + "mlp.Wo", self.mlp_bias))}
        mapping["Output-Norm"] = norm("final_norm")
        mapping["MLM-Dense"] = linear("head.dense", self.classifier_bias)
        mapping["MLM-Norm"] = norm("head.norm")
        mapping["MLM-Bias"] = {"bias": ("decoder.bias", "keep_tokens")}
        return mapping

    def to_huggingface_config(self, family=None):
        """This model's ``config.json`` (the one it was read from, updated with its sizes and options), what
        `save_weights_as_checkpoint` writes beside ``model.safetensors`` (``ModernBertForMaskedLM`` with
        ``with_mlm``, its encoder under ``model.``; else ``ModernBertModel``)."""
        config = dict(self.huggingface_config)
        config.update(
            model_type="modernbert",
            architectures=["ModernBertForMaskedLM" if self.with_mlm else "ModernBertModel"],
            vocab_size=self.vocab_size, hidden_size=self.hidden_size, num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads, intermediate_size=self.intermediate_size,
            hidden_activation=self.hidden_act, max_position_embeddings=self.max_position,
            norm_eps=self.layer_norm_epsilon, pad_token_id=self.pad_token_id, local_attention=self.local_attention,
            layer_types=self.layer_types, norm_bias=self.norm_bias, attention_bias=self.attention_use_bias,
            mlp_bias=self.mlp_bias, classifier_bias=self.classifier_bias, decoder_bias=self.decoder_bias,
            classifier_activation=self.classifier_activation, tie_word_embeddings=True,
            rope_parameters={"full_attention": rope_parameters_entry(self.global_rope_theta,
                                                                     self.rope_scaling["full_attention"]),
                             "sliding_attention": rope_parameters_entry(self.local_rope_theta,
                                                                        self.rope_scaling["sliding_attention"])},
        )
        for old in ("global_rope_theta", "local_rope_theta", "rope_scaling"):  # superseded by rope_parameters
            config.pop(old, None)
        return config
