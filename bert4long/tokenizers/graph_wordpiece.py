"""`Tokenizer`'s WordPiece as TensorFlow ops: raw UTF-8 documents in, the same ids out.

`GraphWordPiece` runs inside a graph (a SavedModel's signature) with core
TensorFlow ops only: no tensorflow-text, no Python. Its per-code-point tables
are computed at construction from `bert4long.tokenizers.wordpiece`'s own
predicates (removed control characters, whitespace, punctuation, CJK,
lower-casing + NFD + accent stripping for uncased vocabularies), so its ids
follow the same rules as `Tokenizer.content_ids`:

1. decode UTF-8 (a document that is not valid UTF-8 fails with
   ``InvalidArgumentError`` naming its index in the batch);
2. drop removed characters; lower-case (Python's ``str.lower``, final sigma
   ``Σ`` → ``ς`` included) and map each code point to its NFD form without
   nonspacing marks;
3. split at whitespace, around CJK ideographs and around punctuation;
4. greedy longest-match-first WordPiece over all pieces at once (a
   ``tf.while_loop`` whose iterations are the most word pieces in one piece,
   each testing every candidate length by hash-table lookup); a piece longer
   than ``word_maxlen`` characters or with an unmatchable rest is ``[UNK]``.

One documented difference: NFD is applied per code point, so the canonical
reordering of two combining marks that survive accent stripping (spacing
marks ``Mc`` with a non-zero combining class, e.g. musical symbols) is not
done; no text in the test corpora has one.

Offsets are code-point (Python ``str``) indices into the original document:
token ``k`` covers ``text[starts[k]:ends[k]]``.

>>> import tensorflow as tf
>>> from bert4long.tokenizers import Tokenizer
>>> from bert4long.tokenizers.graph_wordpiece import GraphWordPiece
>>> tok = Tokenizer({"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4,
...                  "un": 5, "##aff": 6, "##able": 7, "!": 8}, do_lower_case=True)
>>> ids, starts, ends = GraphWordPiece(tok)(tf.constant(["Unaffable!", ""]))
>>> ids.to_list(), starts.to_list(), ends.to_list()
([[5, 6, 7, 8], []], [[0, 2, 5, 9], []], [[2, 5, 9, 10], []])
"""
import functools

import numpy as np
import tensorflow as tf

from bert4long.tokenizers.wordpiece import (
    CJK_RANGES,
    _is_removed,
    _is_whitespace,
    _ranges,
    is_punctuation,
)

REMOVED, SPACE, PUNCT, CJK, CASE_IGNORABLE, CASED = 1, 2, 4, 8, 16, 32
CAPITAL_SIGMA, FINAL_SIGMA = 0x03A3, 0x03C2


def _final_sigma_flags():
    """``(case_ignorable, cased)`` boolean arrays over all code points, as Python's ``str.lower`` sees them.

    ``"AcΣ"`` lower-cases to a final ``ς`` when ``c`` is case-ignorable (skipped) or cased; ``"\\0cΣ"``
    when ``c`` is cased and not ignorable. One ``lower()`` over all code points at once.
    """
    # NUL (the separator) and surrogates (never decoded) stand in as a space: neither cased nor ignorable.
    chars = [" " if c == 0 or 0xD800 <= c <= 0xDFFF else chr(c) for c in range(0x110000)]
    skipped_or_cased = np.array([part[-1] == "ς" for part in "\0".join("A" + c + "Σ" for c in chars).lower().split("\0")])
    cased = np.array([part[-1] == "ς" for part in "\0".join("\0" + c + "Σ" for c in chars).lower().split("\0")[1::2]])
    return skipped_or_cased & ~cased, cased


@functools.cache
def code_point_classes():
    """``(starts, classes)``: code points ``starts[i]..starts[i+1]-1`` have the bit set ``classes[i]``.

    Bits: REMOVED, SPACE (whitespace that is not removed), PUNCT, CJK, and for
    the final-sigma rule CASE_IGNORABLE and CASED. About 5 s, once per process.
    """
    bits = np.zeros(0x110000, np.uint8)
    for bit, predicate in ((REMOVED, _is_removed), (SPACE, lambda ch: _is_whitespace(ch) and not _is_removed(ch)),
                           (PUNCT, is_punctuation)):
        for lo, hi in _ranges(predicate):
            bits[lo:hi + 1] |= bit
    for lo, hi in CJK_RANGES:  # is_cjk_character's table
        bits[lo:hi + 1] |= CJK
    ignorable, cased = _final_sigma_flags()
    bits |= np.where(ignorable, CASE_IGNORABLE, 0).astype(np.uint8) | np.where(cased, CASED, 0).astype(np.uint8)
    starts = np.flatnonzero(np.concatenate([[True], bits[1:] != bits[:-1]]))
    return starts.astype(np.int32), bits[starts].astype(np.int32)


_REPLACEMENTS = {}


def uncased_replacements(tokenizer):
    """``{code point: replacement code points}`` where ``tokenizer``'s lower-casing + NFD + mark stripping
    (its own ``_normalize_word``) changes a code point; computed once per process (about 3 s)."""
    if not _REPLACEMENTS:
        for code in range(0x110000):
            if 0xD800 <= code <= 0xDFFF:
                continue
            ch = chr(code)
            new = tokenizer._normalize_word(ch.lower())
            if new != ch:
                _REPLACEMENTS[code] = [ord(c) for c in new]
    return _REPLACEMENTS


class GraphWordPiece(tf.Module):
    """The content ids of `Tokenizer` (``tokenizer``'s vocab and settings) as TensorFlow ops.

    Call it on a string tensor ``[batch]``; it returns ragged int32
    ``(ids, starts, ends)`` of shape ``[batch, (tokens)]``: the ids of
    ``tokenizer.content_ids(text)`` (no ``[CLS]``/``[SEP]``) and each token's
    code-point offsets. Track it (or its ``tables``) in a SavedModel.
    """

    def __init__(self, tokenizer, name=None):
        super().__init__(name=name)
        tokens = tokenizer.token_dict
        self.unk_id = tokenizer.unk_id
        self.word_maxlen = tokenizer._word_maxlen
        self.piece_maxlen = tokenizer._piece_maxlen
        self.do_lower_case = tokenizer._do_lower_case
        self.vocab = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
            tf.constant(list(tokens), tf.string), tf.constant(list(tokens.values()), tf.int32)), default_value=-1)
        starts, classes = code_point_classes()
        self.class_starts, self.classes = tf.constant(starts), tf.constant(classes)
        self.tables = [self.vocab]
        if self.do_lower_case:
            replacements = uncased_replacements(tokenizer)
            codes = sorted(replacements)
            self.replaced = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
                tf.constant(codes, tf.int32), tf.range(len(codes), dtype=tf.int32)), default_value=len(codes))
            # One row per replaced code point, then a row [-1] meaning "keep the code point".
            self.replacement_values = tf.constant(
                [c for code in codes for c in replacements[code]] + [-1], tf.int32)
            self.replacement_lengths = tf.constant([len(replacements[code]) for code in codes] + [1], tf.int64)
            self.tables.append(self.replaced)

    def _classes_of(self, codes):
        index = tf.searchsorted(self.class_starts, codes, side="right") - 1
        return tf.gather(self.classes, index)

    def _decode(self, texts):
        codes = tf.strings.unicode_decode(texts, "UTF-8", errors="replace", replacement_char=0xFFFD)
        valid = tf.equal(tf.strings.unicode_encode(codes, "UTF-8"), texts)
        check = tf.debugging.Assert(tf.reduce_all(valid), [
            ("documents at these batch indices are not valid UTF-8 (send text encoded as UTF-8, e.g. "
            "decode with errors='replace' first):"), tf.reshape(tf.where(~valid), [-1])], summarize=20)
        with tf.control_dependencies([check]):
            return tf.identity(codes.flat_values), codes.value_rowids(), codes.row_splits

    def _lower(self, codes, docs):
        """Uncased: lower-case + NFD + strip marks per code point, final sigma from its context.

        Returns the new code points and, for each, the index of the code point it came from.
        """
        classes = self._classes_of(codes)
        stop = tf.equal(tf.bitwise.bitwise_and(classes, CASE_IGNORABLE), 0)
        cased = tf.logical_and(stop, tf.not_equal(tf.bitwise.bitwise_and(classes, CASED), 0))
        stops = tf.cast(tf.where(stop)[:, 0], tf.int32)
        before = tf.cumsum(tf.cast(stop, tf.int32), exclusive=True)  # stops before each character
        count = tf.shape(stops)[0]

        def stop_cased(k):  # is stop number k (if any, in the same document) cased?
            inside = tf.logical_and(k >= 0, k < count)
            at = tf.where(inside, tf.gather(stops, tf.clip_by_value(k, 0, tf.maximum(count - 1, 0))), 0)
            return tf.logical_and(inside, tf.logical_and(tf.equal(tf.gather(docs, at), docs), tf.gather(cased, at)))

        after = before + tf.cast(stop, tf.int32)
        final = tf.logical_and(tf.equal(codes, CAPITAL_SIGMA),
                               tf.logical_and(stop_cased(before - 1), ~stop_cased(after)))
        pieces = tf.RaggedTensor.from_row_lengths(self.replacement_values, self.replacement_lengths)
        new = tf.gather(pieces, self.replaced.lookup(codes))
        owner = tf.cast(new.value_rowids(), tf.int32)
        values = tf.where(tf.equal(new.flat_values, -1), tf.gather(codes, owner), new.flat_values)
        return tf.where(tf.gather(final, owner), FINAL_SIGMA, values), owner

    def __call__(self, texts):
        texts = tf.convert_to_tensor(texts, tf.string)
        batch = tf.shape(texts, out_type=tf.int64)[0]
        codes, docs, row_splits = self._decode(texts)
        codes, docs = tf.cast(codes, tf.int32), tf.cast(docs, tf.int32)
        # Position of each code point inside its document.
        positions = tf.range(tf.shape(codes)[0]) - tf.gather(tf.cast(row_splits, tf.int32), docs)
        keep = tf.equal(tf.bitwise.bitwise_and(self._classes_of(codes), REMOVED), 0)
        codes, docs, positions = (tf.boolean_mask(t, keep) for t in (codes, docs, positions))
        # Whitespace and CJK are decided before normalization (the reference's first split).
        classes = self._classes_of(codes)
        space_before, cjk_before = (tf.not_equal(tf.bitwise.bitwise_and(classes, bit), 0) for bit in (SPACE, CJK))
        origin = tf.range(tf.shape(codes)[0])
        if self.do_lower_case:
            codes, origin = self._lower(codes, docs)
            docs, positions = tf.gather(docs, origin), tf.gather(positions, origin)
        space = tf.gather(space_before, origin)
        punct = tf.not_equal(tf.bitwise.bitwise_and(self._classes_of(codes), PUNCT), 0)
        alone = tf.logical_or(punct, tf.gather(cjk_before, origin))
        # A piece starts after a space, at/after an isolated character, or at a new document.

        def previous(t, fill):
            return tf.concat([[fill], t[:-1]], 0)
        starts_piece = tf.logical_or(tf.logical_or(alone, previous(alone, True)),
                                     tf.logical_or(previous(space, True), tf.not_equal(previous(docs, -1), docs)))
        keep = ~space
        codes, docs, positions, starts_piece = (tf.boolean_mask(t, keep) for t in (codes, docs, positions, starts_piece))
        piece_of = tf.cumsum(tf.cast(starts_piece, tf.int32)) - 1
        pieces = tf.RaggedTensor.from_value_rowids(codes, piece_of)
        piece_positions = tf.RaggedTensor.from_value_rowids(positions, piece_of)
        piece_docs = tf.gather(docs, tf.cast(tf.where(starts_piece)[:, 0], tf.int32))
        ids, piece_index, begin, end = self._wordpiece(tf.strings.unicode_encode(pieces, "UTF-8"),
                                                       tf.cast(pieces.row_lengths(), tf.int32))
        token_docs = tf.cast(tf.gather(piece_docs, piece_index), tf.int64)
        chars = tf.gather(piece_positions, piece_index)  # [tokens, (chars of its piece)]
        starts = tf.gather(chars.flat_values, tf.cast(chars.row_splits[:-1], tf.int32) + begin)
        ends = tf.gather(chars.flat_values, tf.cast(chars.row_splits[:-1], tf.int32) + end - 1) + 1
        return tuple(tf.RaggedTensor.from_value_rowids(t, token_docs, nrows=batch) for t in (ids, starts, ends))

    def _wordpiece(self, pieces, lengths):
        """Greedy longest-match-first over every piece at once.

        Each iteration looks up, for every piece not yet done, all candidates
        from its current start (widths 1..min(longest vocab entry, rest)).
        Returns flat ``(ids, piece_index, begin, end)`` of every token, in
        piece order; ``begin``/``end`` are character indices inside the piece.
        """
        count = tf.shape(pieces)[0]
        too_long = lengths > self.word_maxlen

        def step(t, start, done, unknown, emitted):
            active = tf.cast(tf.where(~done)[:, 0], tf.int32)
            at = tf.gather(start, active)
            widths = tf.ragged.range(1, tf.minimum(self.piece_maxlen, tf.gather(lengths, active) - at) + 1)
            owner = tf.cast(widths.value_rowids(), tf.int32)
            begin = tf.gather(at, owner)
            text = tf.strings.substr(tf.gather(pieces, tf.gather(active, owner)), begin, widths.flat_values,
                                     unit="UTF8_CHAR")
            text = tf.where(begin > 0, tf.strings.join(["##", text]), text)
            found = self.vocab.lookup(text)
            matched = tf.where(found >= 0, widths.flat_values, 0)
            best = tf.math.unsorted_segment_max(matched, owner, tf.shape(active)[0])
            best = tf.maximum(best, 0)  # a piece with no candidate at all gets the identity of max: lowest int
            best_id = tf.math.unsorted_segment_max(
                tf.where(tf.logical_and(found >= 0, tf.equal(matched, tf.gather(best, owner))), found, -1),
                owner, tf.shape(active)[0])
            stuck = tf.equal(best, 0)
            emit = ~stuck
            emitted = [ta.write(t, tf.boolean_mask(value, emit)) for ta, value in zip(
                emitted, (best_id, active, at, at + best))]
            rows = active[:, None]
            unknown = tf.tensor_scatter_nd_update(unknown, rows, stuck)
            start = tf.tensor_scatter_nd_add(start, rows, best)
            done = tf.logical_or(unknown, start >= lengths)
            return t + 1, start, done, unknown, emitted

        emitted = [tf.TensorArray(tf.int32, size=0, dynamic_size=True, infer_shape=False,
                                  element_shape=tf.TensorShape([None])) for _ in range(4)]
        _, _, _, unknown, emitted = tf.while_loop(
            lambda t, start, done, *_: tf.logical_or(tf.equal(t, 0), tf.reduce_any(~done)),
            step, [0, tf.zeros([count], tf.int32), too_long, too_long, emitted])
        ids, index, begin, end = (ta.concat() for ta in emitted)
        # A piece with an unmatchable rest (or too long) is one [UNK] covering it.
        keep = ~tf.gather(unknown, index)
        unknown_pieces = tf.cast(tf.where(unknown)[:, 0], tf.int32)
        ids, index, begin, end = (tf.concat([tf.boolean_mask(value, keep), extra], 0) for value, extra in zip(
            (ids, index, begin, end), (tf.fill(tf.shape(unknown_pieces), self.unk_id), unknown_pieces,
                                       tf.zeros_like(unknown_pieces), tf.gather(lengths, unknown_pieces))))
        order = tf.argsort(index, stable=True)  # emitted iteration by iteration: stable keeps each piece's order
        return tuple(tf.gather(value, order) for value in (ids, index, begin, end))
