"""Dynamic masked-language-model masking, as a TF function for ``tf.data``.

`MLMMasker` picks ``mask_rate`` (15%) of the maskable tokens of one sequence,
replaces 80% of them by ``[MASK]``, 10% by a random token, leaves 10%
unchanged (BERT), and returns fixed-size ``max_predictions`` arrays for a
gathered MLM head. The randomness is stateless: the same ``seed`` gives the
same masks, a new seed per (epoch, element) gives new masks every time a
document is seen (RoBERTa's dynamic masking). `bert4long.data.mlm_dataset`
feeds it seeds from ``tf.data.Dataset.random(rerandomize_each_iteration=True)``.

>>> import tensorflow as tf
>>> from bert4long.data import MLMMasker
>>> masker = MLMMasker(vocab_size=100, mask_id=4, special_ids=[0, 1, 2, 3, 4],
...                    max_predictions=3)
>>> out = masker(tf.constant([2, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 3]), seed=[1, 2])
>>> sorted(out), out["masked_positions"].shape.as_list()
(['masked_ids', 'masked_positions', 'masked_weights', 'token_ids'], [3])
"""
import numpy as np
import tensorflow as tf

from bert4long.tokenizers import is_special


class MLMMasker:
    """Masks one sequence of token ids; use it inside ``Dataset.map``.

    Args:
        vocab_size: size of the vocabulary (random replacements are drawn
            from its non-special ids).
        mask_id: id of ``[MASK]``.
        special_ids: ids that are never masked nor drawn at random
            (``[PAD] [UNK] [CLS] [SEP] [MASK]``).
        max_predictions: static number of predicted positions ``P``; at most
            ``P`` tokens are masked per sequence.
        mask_rate: fraction of the maskable tokens to predict (rounded,
            at least one when there is any).
        mask_token_rate, random_token_rate: of the predicted tokens, the
            fraction replaced by ``[MASK]`` and by a random token; the rest
            is left unchanged.
        continuation_ids: ids of WordPiece ``##`` continuations; when given,
            whole words are masked (a word is kept whole or skipped, so a
            sequence may get slightly fewer than ``mask_rate`` predictions).
        random_pool: ids random replacements are drawn from (default: all
            ids not in ``special_ids``).

    Call arguments:
        token_ids: int ``[L]``, one sequence (padding ``[PAD]`` allowed).
        seed: int ``[2]``, the stateless random seed.

    Returns a dict: ``token_ids`` int32 ``[L]`` (masked), ``masked_positions``,
    ``masked_ids`` (the original ids) int32 ``[P]`` and ``masked_weights``
    float32 ``[P]`` (1.0 for a real prediction, 0.0 for padding). Positions
    are increasing; padded entries are 0.
    """

    def __init__(
        self,
        vocab_size,
        mask_id,
        special_ids,
        max_predictions,
        mask_rate=0.15,
        mask_token_rate=0.8,
        random_token_rate=0.1,
        continuation_ids=None,
        random_pool=None,
    ):
        if mask_id is None:
            raise ValueError("the vocab has no [MASK] token; MLM masking needs one")
        if max_predictions < 1:
            raise ValueError(f"max_predictions={max_predictions} must be >= 1")
        if not (0 < mask_rate <= 1 and 0 <= mask_token_rate and 0 <= random_token_rate
                and mask_token_rate + random_token_rate <= 1):
            raise ValueError(
                "need 0 < mask_rate <= 1 and mask_token_rate + random_token_rate <= 1, got "
                f"{mask_rate}, {mask_token_rate}, {random_token_rate}"
            )
        self.vocab_size = vocab_size
        self.mask_id = mask_id
        self.max_predictions = max_predictions
        self.mask_rate = mask_rate
        self.mask_token_rate = mask_token_rate
        self.random_token_rate = random_token_rate
        self.special = np.zeros(vocab_size, bool)
        self.special[list(special_ids)] = True
        self.continuation = None
        if continuation_ids is not None:
            self.continuation = np.zeros(vocab_size, bool)
            self.continuation[list(continuation_ids)] = True
        if random_pool is None:
            random_pool = np.flatnonzero(~self.special)
        self.random_pool = np.asarray(random_pool, np.int32)
        if len(self.random_pool) == 0:
            raise ValueError("no token is left to draw random replacements from")

    @classmethod
    def from_tokenizer(cls, tokenizer, max_predictions, whole_word=False, **kwargs):
        """A masker for ``tokenizer``'s vocab; ``whole_word`` masks whole words (WordPiece ``##``).

        The tokenizer's own special ids (``[PAD]`` or ``<pad>``, ``<s>``, ``<mask>``, and
        every token a ``tokenizer.json`` registers as special) are never masked, and
        random replacements never draw them nor a bracketed token (``[unused1]``...).
        """
        special = set(_never_masked(tokenizer))
        tokens = [tokenizer.id_to_token(i) for i in range(tokenizer.vocab_size)]
        kwargs.setdefault("random_pool", [i for i, t in enumerate(tokens)
                                          if t and not is_special(t) and i not in special])
        if whole_word:
            kwargs["continuation_ids"] = [i for i, t in enumerate(tokens) if t and t.startswith("##")]
        return cls(tokenizer.vocab_size, tokenizer.mask_id, sorted(special), max_predictions, **kwargs)

    def __call__(self, token_ids, seed):
        ids = tf.cast(token_ids, tf.int32)
        word_seed, kind_seed, random_seed = tf.unstack(
            tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), 3)
        )
        length = tf.shape(ids)[0]
        maskable = ~tf.gather(tf.constant(self.special), ids)
        starts = maskable
        if self.continuation is not None:
            after_maskable = tf.concat([[False], maskable[:-1]], axis=0)
            starts = maskable & ~(tf.gather(tf.constant(self.continuation), ids) & after_maskable)
        word = tf.maximum(tf.cumsum(tf.cast(starts, tf.int32)) - 1, 0)

        count = tf.reduce_sum(tf.cast(maskable, tf.int32))
        wanted = tf.cast(tf.round(tf.cast(count, tf.float32) * self.mask_rate), tf.int32)
        wanted = tf.minimum(tf.maximum(wanted, tf.minimum(count, 1)), self.max_predictions)

        # Order maskable tokens by a random score per word (ties keep position
        # order, so words stay contiguous) and take the words that end within
        # the first `wanted` places.
        score = tf.random.stateless_uniform([length], word_seed)
        score = tf.where(maskable, tf.gather(score, word), 2.0)
        rank = tf.math.invert_permutation(tf.argsort(score, stable=True))
        segment = tf.where(maskable, word, length)
        last_rank = tf.math.unsorted_segment_max(rank, segment, num_segments=length + 1)
        selected = maskable & (tf.gather(last_rank, segment) < wanted)

        kind = tf.random.stateless_uniform([length], kind_seed)
        random_ids = tf.gather(
            self.random_pool,
            tf.random.stateless_uniform([length], random_seed, 0, len(self.random_pool), tf.int32),
        )
        masked = tf.where(selected & (kind < self.mask_token_rate), self.mask_id, ids)
        masked = tf.where(
            selected & (kind >= self.mask_token_rate)
            & (kind < self.mask_token_rate + self.random_token_rate),
            random_ids,
            masked,
        )

        positions = tf.cast(tf.where(selected)[:, 0], tf.int32)
        padding = [[0, self.max_predictions - tf.shape(positions)[0]]]
        weights = tf.pad(tf.ones_like(positions, tf.float32), padding)
        return {
            "token_ids": masked,
            "masked_positions": tf.ensure_shape(tf.pad(positions, padding), [self.max_predictions]),
            "masked_ids": tf.ensure_shape(tf.pad(tf.gather(ids, positions), padding), [self.max_predictions]),
            "masked_weights": tf.ensure_shape(weights, [self.max_predictions]),
        }


def _never_masked(tokenizer):
    """Special ids of a tokenizer: every registered one (``tokenizer.json``), its ``special_ids``, or its roles'."""
    for name in ("registered_special_ids", "special_ids"):
        if hasattr(tokenizer, name):
            return getattr(tokenizer, name)
    roles = (tokenizer.pad_id, tokenizer.unk_id, tokenizer.mask_id, tokenizer.cls_id, tokenizer.sep_id)
    return [i for i in roles if i is not None]
