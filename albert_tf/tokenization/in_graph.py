"""The SentencePiece tokenizer as TensorFlow ops: `InGraphTokenizer` (tensorflow-text, for
SavedModels that take raw text) and `OnDeviceTokenizer` (TensorFlow Lite), equal to
`Tokenizer.encode` but for the divergence classes each documents; the RE2 character classes built
from Python's Unicode tables that both use."""

from __future__ import annotations

import functools
import hashlib
import sys
import unicodedata

from albert_tf.tokenization.common import (CLS_ID, MASK_ID, MASK_PIECE, PAD_ID, SEP_ID,
                                           SPIECE_UNDERLINE, UNK_ID)
from albert_tf.tokenization.model_file import digit_comma_form


def _ranges_class(predicate) -> str:
    """An RE2 character class of every code point satisfying `predicate`."""
    ranges, start, prev = [], None, None
    for cp in range(sys.maxunicode + 1):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        if predicate(chr(cp)):
            if start is None:
                start = cp
            prev = cp
        elif start is not None:
            ranges.append((start, prev))
            start = None
    if start is not None:
        ranges.append((start, prev))
    fmt = lambda cp: f"\\x{{{cp:x}}}"  # noqa: E731
    return "[" + "".join(fmt(a) if a == b else f"{fmt(a)}-{fmt(b)}" for a, b in ranges) + "]"


@functools.lru_cache(maxsize=None)
def _whitespace_class() -> str:
    # Exactly the characters Python's str.split() splits on.
    return _ranges_class(str.isspace)


@functools.lru_cache(maxsize=None)
def _combining_class() -> str:
    # Exactly the characters unicodedata.combining() reports non-zero (Python's Unicode tables).
    return _ranges_class(unicodedata.combining)


def _persistent_model_resource(model_proto: bytes):
    """The SentencePiece model resource of tensorflow-text's tokenizer, created eagerly under a
    shared name (the model's digest) so that it outlives the eager kernel that made it.

    tensorflow-text's own resource is owned by that kernel (its TODO b/318839908), and
    TensorFlow clears its eager kernel cache when the global seed is set: after
    `keras.utils.set_random_seed` (or `tf.random.set_seed`) every tokenizer built before it
    failed with "Resource localhost/_0_SentencepieceOp/... does not exist". A shared resource is
    not deleted with its kernel; tokenizers of the same model share it (it is read-only). In a
    traced function (a SavedModel's resource initializer) the op is tensorflow-text's as before,
    so exports are unchanged and a server still frees the model with its version."""
    import tensorflow as tf
    from tensorflow_text.python.ops.sentencepiece_tokenizer import gen_sentencepiece_tokenizer

    shared_name = "albert_tf_sentencepiece_" + hashlib.sha256(model_proto).hexdigest()[:24]

    class PersistentModel(tf.saved_model.experimental.TrackableResource):
        def __init__(self):
            super().__init__()
            _ = self.resource_handle  # created now, eagerly

        def _create_resource(self):
            return gen_sentencepiece_tokenizer.sentencepiece_op(
                model=model_proto, shared_name=shared_name if tf.executing_eagerly() else "")

    return PersistentModel()


class InGraphTokenizer:
    """The same tokenizer as TensorFlow ops (tensorflow-text SentencePiece), for SavedModels.

    `__call__(strings)` maps a string tensor [batch] to a `tf.RaggedTensor` of int32 ids
    [batch, (tokens)], equal to `Tokenizer.encode` element by element except in these divergence
    classes (measured on the shipped corpora by `tests/test_tokenization.py`):

    - characters whose NFKD decomposition differs between Python's Unicode tables and the ICU
      tables inside TensorFlow (only where the two Unicode versions differ);
    - ties between segmentations of equal score (the same pieces in another order, e.g. "000"
      as "0" + "00" or "00" + "0"): tensorflow-text's SentencePiece build and the pip one can
      break them differently.

    Input bytes that are not valid UTF-8 are replaced by U+FFFD (one per maximal invalid
    subsequence, as Python's `bytes.decode("utf-8", "replace")` does) before anything else.

    Importing tensorflow_text registers the SentencePiece ops; any process that loads a
    SavedModel using this must import tensorflow_text first. `sentencepiece` (also `trackable`,
    the name both in-graph tokenizers share) is the tensorflow-text tokenizer (a `tf.Module`
    owning the model resource): a module that exports this tokenizer must track it.
    """

    pad_id, unk_id, cls_id, sep_id, mask_id = PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID

    def __init__(self, model_proto: bytes, do_lower_case: bool = True):
        import tensorflow_text as tf_text

        import tensorflow as tf

        self.do_lower_case = do_lower_case
        self.digit_comma = digit_comma_form(model_proto)
        self._sp = tf_text.SentencepieceTokenizer(model=model_proto, out_type=tf.string)
        self._sp._model_resource = _persistent_model_resource(model_proto)
        self.sentencepiece = self.trackable = self._sp
        self._whitespace = _whitespace_class() + "+"
        self._combining = _combining_class()

    def preprocess(self, strings):
        import tensorflow as tf
        import tensorflow_text as tf_text

        x = tf.strings.unicode_transcode(strings, "UTF-8", "UTF-8", errors="replace",
                                         replacement_char=0xFFFD)
        x = tf.strings.regex_replace(x, self._whitespace, " ")
        x = tf.strings.regex_replace(x, "^ | $", "")
        x = tf_text.normalize_utf8(x, "NFKD")
        x = tf.strings.regex_replace(x, self._combining, "")
        if self.do_lower_case:
            x = tf.strings.lower(x, encoding="utf-8")
        return x

    def tokenize_pieces(self, strings, preprocessed=False):
        """Pieces (string RaggedTensor [batch, (pieces)]) with the digit-comma re-split;
        `preprocessed`: `strings` are already `preprocess`'s output."""
        import tensorflow as tf

        pieces = self._sp.tokenize(strings if preprocessed else self.preprocess(strings))
        flat = pieces.flat_values
        n = tf.size(flat, out_type=tf.int64)
        # Official test: len(piece) > 1, piece[-1] == "," and piece[-2].isdigit(). After NFKD the
        # digits str.isdigit() accepts are the decimal digits \p{Nd}.
        match = tf.strings.regex_full_match(flat, r"(?s).*\p{Nd},")
        matched = tf.boolean_mask(flat, match)
        m = tf.size(matched, out_type=tf.int64)
        length = tf.strings.length(matched, unit="UTF8_CHAR")
        core = tf.strings.regex_replace(
            tf.strings.substr(matched, tf.zeros_like(length), length - 1, unit="UTF8_CHAR"),
            SPIECE_UNDERLINE, "")
        sub = self._sp.tokenize(core)  # never empty: the core holds at least the digit
        comma = tf.RaggedTensor.from_row_lengths(tf.fill([m], ","), tf.ones([m], tf.int64),
                                                 validate=False)
        if self.digit_comma == "official":
            replacement = tf.concat([sub, comma], axis=1)
        else:
            replacement = tf.concat([self._strip_first(matched, sub), sub[:, 1:], comma],
                                    axis=1)
        singles = tf.RaggedTensor.from_row_lengths(flat, tf.ones([n], tf.int64), validate=False)
        # Row i of `rows`: piece i itself, or its replacement when it matched.
        index = tf.where(match, n + tf.cumsum(tf.cast(match, tf.int64)) - 1,
                         tf.range(n, dtype=tf.int64))
        rows = tf.gather(tf.concat([singles, replacement], axis=0), index)
        return tf.RaggedTensor.from_nested_row_splits(
            rows.flat_values, [pieces.row_splits, rows.row_splits]).merge_dims(1, 2)

    @staticmethod
    def _strip_first(matched, sub):
        """The Hugging Face form: the first piece of each re-encoding ([m, 0 or 1]), without
        its "▁" where the matched piece did not start with one (and gone if it was "▁")."""
        import tensorflow as tf

        first = tf.gather(sub.values, sub.row_starts())
        # A piece that did not start with "▁" keeps no "▁" at the front of its re-encoding.
        starts_plain = ~tf.strings.regex_full_match(matched, f"(?s){SPIECE_UNDERLINE}.*")
        fix = starts_plain & tf.strings.regex_full_match(first, f"(?s){SPIECE_UNDERLINE}.*")
        keep_first = ~(fix & tf.equal(first, SPIECE_UNDERLINE))
        first_length = tf.strings.length(first, unit="UTF8_CHAR")
        first = tf.where(fix, tf.strings.substr(first, tf.ones_like(first_length),
                                                first_length - 1, unit="UTF8_CHAR"), first)
        return tf.RaggedTensor.from_row_lengths(tf.boolean_mask(first, keep_first),
                                                tf.cast(keep_first, tf.int64), validate=False)

    def __call__(self, strings):
        import tensorflow as tf

        pieces = self.tokenize_pieces(strings)
        return tf.ragged.map_flat_values(self._sp.string_to_id, pieces)

    def encode_with_masks(self, strings):
        """`Tokenizer.encode_with_masks` for a string batch: int32 RaggedTensor [batch, (ids)]
        in which each literal "[MASK]" of the text is the [MASK] id."""
        return _encode_with_masks_in_graph(self, strings)

    def pieces_to_ids(self, pieces):
        """The ids of piece strings (any shape), as int32."""
        return self._sp.string_to_id(pieces)

    def id_to_piece(self, ids):
        """The pieces of int ids (any shape), as strings."""
        return self._sp.id_to_string(ids)


class OnDeviceTokenizer:
    """The same tokenizer with ops TensorFlow Lite runs: tensorflow-text's
    `FastSentencepieceTokenizer` on `Tokenizer.on_device_model_proto` (the official
    preprocessing compiled into SentencePiece's normalizer), then the digit-comma re-split as a
    table lookup and the "▁" before each [MASK] dropped, all with dense TensorFlow ops (no
    ragged tensors, no string ops), so a graph using it converts with TFLite builtins plus the
    two tensorflow-text custom ops (`tensorflow_text.tflite_registrar`).

    `encode_with_masks` equals `Tokenizer.encode_with_masks` except where the preprocessing
    depends on context (`_preprocessed_code_points`): a word-final capital sigma, and a
    multi-character source of the model's own normalizer that the preprocessing of a
    *neighbouring* character completes. Measured on the shipped corpora by
    `tests/test_tflite.py`.
    """

    def __init__(self, tokenizer):  # a `Tokenizer` (its `on_device()` makes this)
        import tensorflow as tf
        import tensorflow_text as tf_text

        self.sentencepiece = tf_text.FastSentencepieceTokenizer(tokenizer.on_device_model_proto)
        space = tokenizer.sp.PieceToId(SPIECE_UNDERLINE)
        self._space_id = space if tokenizer.sp.IdToPiece(space) == SPIECE_UNDERLINE else -1
        table = tokenizer.resplit_table
        self._resplit = None if table is None else tf.constant(table)
        self.vocab_size = tokenizer.vocab_size

    def encode_flat(self, strings):
        """(ids, rows): int32 [n] ids of every string of `strings` [batch], concatenated, and
        int64 [n] the index of the string each came from."""
        import tensorflow as tf

        tokens = self.sentencepiece.tokenize(strings)
        ids = tf.cast(tokens.flat_values, tf.int32)
        rows = tf.cast(tokens.value_rowids(), tf.int64)
        return self._finish(ids, rows)

    def encode_one(self, text):
        """int32 [n] ids of one string (`text`: string [] or [1]); the form a TFLite graph uses
        (no row bookkeeping)."""
        import tensorflow as tf

        ids = tf.cast(self.sentencepiece.tokenize(tf.reshape(text, [1])).flat_values, tf.int32)
        return self._finish(ids, None)[0]

    def _finish(self, ids, rows):
        import tensorflow as tf

        if self._space_id >= 0:  # "x [MASK]" gives "▁x", "▁", "[MASK]": drop that "▁"
            following = tf.concat([ids[1:], [-1]], axis=0)
            drop = tf.equal(ids, self._space_id) & tf.equal(following, MASK_ID)
            if rows is not None:
                drop &= tf.equal(tf.concat([rows[1:], [-1]], axis=0), rows)
            keep = tf.logical_not(drop)
            ids = tf.boolean_mask(ids, keep)
            rows = None if rows is None else tf.boolean_mask(rows, keep)
        if self._resplit is not None:
            replaced = tf.gather(self._resplit, ids)  # [n, K], -1 padded
            valid = tf.reshape(replaced >= 0, [-1])
            ids = tf.boolean_mask(tf.reshape(replaced, [-1]), valid)
            if rows is not None:
                rows = tf.boolean_mask(tf.reshape(tf.broadcast_to(
                    rows[:, None], tf.shape(replaced, out_type=rows.dtype)), [-1]), valid)
        return ids, rows

    def encode_with_masks(self, strings):
        """int32 RaggedTensor [batch, (ids)] (for TensorFlow graphs and tests)."""
        import tensorflow as tf

        ids, rows = self.encode_flat(strings)
        return tf.RaggedTensor.from_value_rowids(ids, rows,
                                                 nrows=tf.shape(strings, out_type=tf.int64)[0])


def _encode_with_masks_in_graph(tokenizer, strings):
    """int32 RaggedTensor [batch, (ids)]: each string's parts between literal "[MASK]" markers
    encoded by `tokenizer(parts)`, with `tokenizer.mask_id` between them."""
    import tensorflow as tf

    if tokenizer.mask_id is None:  # a vocabulary without [MASK]: the marker is text
        return tokenizer(strings)
    parts = tf.strings.split(strings, sep=MASK_PIECE)  # [batch, (parts)], never empty rows
    ids = tokenizer(parts.flat_values)  # [parts, (ids)]
    # every part but a row's last is followed by a mask (flat: no ragged broadcasting asserts)
    is_last = tf.equal(tf.range(tf.size(parts.values, out_type=parts.row_splits.dtype),
                                dtype=parts.row_splits.dtype) + 1,
                       tf.gather(parts.row_splits[1:], parts.value_rowids()))
    follows = tf.cast(~is_last, tf.int64)
    masks = tf.RaggedTensor.from_row_lengths(
        tf.fill([tf.reduce_sum(follows)], tf.constant(tokenizer.mask_id, ids.dtype)), follows,
        validate=False)
    joined = tf.concat([ids, masks], axis=1)
    return tf.RaggedTensor.from_row_splits(joined, parts.row_splits).merge_dims(1, 2)


def in_graph_tokenizer(source, do_lower_case: bool = True):
    """The in-graph tokenizer of `source`: a Python tokenizer (`Tokenizer` or
    `WordPieceTokenizer`: its `in_graph()`), or the bytes of a SentencePiece model."""
    if isinstance(source, (bytes, bytearray)):
        return InGraphTokenizer(bytes(source), do_lower_case)
    return source.in_graph()
