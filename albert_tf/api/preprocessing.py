"""`AlbertTextPreprocessor`: raw text, one segment or a pair, to the backbone's inputs, in the
graph (so it runs inside `tf.data`, under any strategy, and is what a SavedModel serves).

It is the tokenizer of the commands' flags (`albert_tf.tokenization.make_tokenizer`: the
official normalization, SentencePiece and the digit-comma re-split, or a WordPiece vocabulary)
as TensorFlow ops (`InGraphTokenizer`), then the official packing (`albert_tf.packing`:
`[CLS] A [SEP] (B [SEP])`, longest-first truncation, an empty B packs as one segment), padded
to `sequence_length`: the features `run_classifier` writes for the same text
(`albert_tf.tasks.classification.example_features`).

Text comes in as Python values (`text_columns`: a string, a list of strings, a list of
`(text_a, text_b)` pairs, or a tuple of the two columns `(text_a, text_b)`) or as string
tensors (a tensor [batch], or a tuple of two for pairs).
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from albert_tf import features as F
from albert_tf.packing import pack_in_graph
from albert_tf.tokenization import check_vocabulary_digest, make_tokenizer


def text_columns(x) -> tuple[np.ndarray, np.ndarray | None]:
    """(text_a, text_b or None): object arrays [n] of the Python text `x`.

    One rule, whatever the number of rows (`(["a1", "a2"], ["b1", "b2"])` is two pairs, as
    `(["a1", "a2", "a3"], ["b1", "b2", "b3"])` is three):

    - a string: one text;
    - a tuple of two sequences (lists, tuples, arrays or tensors of strings, of one length):
      the two columns `(text_a, text_b)` of pairs, always; a tuple of other sequences (more or
      fewer than two, e.g. `tuple(zip(a, b))` of 3 pairs) is refused with the fix;
    - a list, a tuple of strings, or a 1-D array: rows, each a string (one segment) or a
      `(text_a, text_b)` pair (a list of pairs, e.g. `list(zip(a, b))`); an array [n, 2]:
      rows of pairs.

    Raises ValueError for anything else, or a mix of strings and pairs.
    """
    if isinstance(x, tuple) and x and not any(isinstance(c, (str, bytes)) for c in x):
        if len(x) != 2:
            raise ValueError(
                f"A tuple of text is the two columns (text_a, text_b) of pairs; this one has "
                f"{len(x)} sequences. Give rows of pairs as a list, e.g. list(zip(text_a, "
                "text_b)), or the columns as (text_a, text_b).")
        text_a, text_b = _strings(x[0], "text_a"), _strings(x[1], "text_b")
        if len(text_a) != len(text_b):
            raise ValueError(f"The columns (text_a, text_b) have {len(text_a)} and "
                             f"{len(text_b)} texts: give one text_b per text_a (\"\" for "
                             "none).")
        return text_a, text_b
    if isinstance(x, (str, bytes)):
        x = [x]
    if isinstance(x, tf.Tensor):
        x = x.numpy()
    if isinstance(x, np.ndarray) and x.ndim == 2 and x.shape[1] == 2:
        return _strings(x[:, 0], "text_a"), _strings(x[:, 1], "text_b")
    rows = list(x) if isinstance(x, (list, tuple, np.ndarray)) else None
    if not rows:
        raise ValueError("Text must be a non-empty list of strings or of (text_a, text_b) "
                         f"pairs. Received: {type(x).__name__} {str(x)[:80]!r}")
    single = [isinstance(r, (str, bytes)) for r in rows]
    if all(single):
        return _strings(rows, "text"), None
    pairs = [isinstance(r, (tuple, list)) and len(r) == 2 for r in rows]
    if all(pairs):
        return (_strings([r[0] for r in rows], "text_a"),
                _strings([r[1] for r in rows], "text_b"))
    kinds = [s or p for s, p in zip(single, pairs)]
    bad = kinds.index(False) if not all(kinds) else single.index(not single[0])
    columns = (" (the columns of pairs are a tuple: (text_a, text_b))"
               if len(rows) == 2 and not any(single) else "")
    raise ValueError("Text must be all strings (one segment) or all (text_a, text_b) pairs"
                     f"{columns}. Received at row {bad}: {rows[bad]!r}")


def _strings(values, what: str) -> np.ndarray:
    values = values.numpy() if isinstance(values, tf.Tensor) else values
    if not isinstance(values, (list, tuple, np.ndarray)) or (
            isinstance(values, np.ndarray) and values.ndim != 1):
        raise ValueError(f"The column {what} must be a list (or 1-D array) of strings. "
                         f"Received: {type(values).__name__} {str(values)[:80]!r}")
    array = np.asarray(list(values), dtype=object)
    for i, value in enumerate(array):
        if not isinstance(value, (str, bytes)):
            raise ValueError(f"Every {what} must be a string. Received at row {i}: {value!r}")
    return array


def _string_tensors(x):
    """A string tensor [batch], or a tuple of two (pairs), from tensors or Python text."""
    if isinstance(x, (tuple, list)) and len(x) == 2 and all(
            isinstance(c, tf.Tensor) and c.dtype == tf.string for c in x):
        return tuple(x)
    if isinstance(x, (tuple, list)) and any(isinstance(c, tf.Tensor) for c in x):
        raise ValueError("Pairs come as a tuple of two string tensors (text_a, text_b). "
                         f"Received {len(x)} values.")
    if isinstance(x, tf.Tensor) and x.dtype == tf.string:
        return x
    text_a, text_b = text_columns(x)
    if text_b is None:
        return tf.constant(text_a, tf.string)
    return tf.constant(text_a, tf.string), tf.constant(text_b, tf.string)


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertTextPreprocessor(keras.layers.Layer):
    """Raw text in, `input_ids`, `input_mask`, `segment_ids` (int32 [batch, sequence_length])
    out, as `run_classifier`'s features of the same text.

    Args:
        spm_model_file: the model's SentencePiece model (None with `vocab_file` alone).
        sequence_length: the packed length (the commands' `--max_seq_length`).
        do_lower_case: lowercase first (the released v2 models: True).
        vocab_file: with `spm_model_file`, the official `.vocab` checked against it; alone, a
            WordPiece vocabulary (`make_tokenizer`).
        vocabulary_sha256: the SHA-256 the vocabulary file must have (the saved config
            records it, so a `.keras` model refuses another file at its vocabulary's path);
            None: not checked (a `.keras` file saved before it was recorded).

    Call: `preprocessor(x, y=None, sample_weight=None)` with `x` a string tensor [batch] (one
    segment), a tuple of two (pairs), or Python text (`text_columns`). Returns the features
    dict, or `(features, y[, sample_weight])` when `y` is given (a `tf.data` map function).

    Example:
        >>> pre = AlbertTextPreprocessor("30k-clean.model", sequence_length=16)  # doctest: +SKIP
        >>> pre([("a gripping film", "is it?")])["segment_ids"]                  # doctest: +SKIP
    """

    def __init__(self, spm_model_file=None, sequence_length=128, do_lower_case=True,
                 vocab_file=None, vocabulary_sha256=None, **kwargs):
        kwargs.setdefault("trainable", False)
        super().__init__(**kwargs)
        if isinstance(sequence_length, bool) or not isinstance(sequence_length, int) \
                or sequence_length < 3:
            raise ValueError("`sequence_length` must be an integer of at least 3 ([CLS] A "
                             f"[SEP] B [SEP]). Received: sequence_length={sequence_length!r}")
        self.spm_model_file = spm_model_file
        self.vocab_file = vocab_file
        self.sequence_length = sequence_length
        self.do_lower_case = do_lower_case
        self.tokenizer = make_tokenizer(spm_model_file, vocab_file, do_lower_case)
        check_vocabulary_digest(self.tokenizer.vocabulary_file, vocabulary_sha256,
                                f"this {type(self).__name__}")
        self._in_graph = self.tokenizer.in_graph()
        # The tensorflow-text resource, tracked so a SavedModel of this layer carries it.
        self.tokenizer_resource = self._in_graph.trackable

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def __call__(self, x, y=None, sample_weight=None, **kwargs):
        # Keras passes only tensors positionally: Python text becomes string tensors first.
        return super().__call__(_string_tensors(x), y=y, sample_weight=sample_weight, **kwargs)

    def call(self, x, y=None, sample_weight=None):
        text_a, text_b = x if isinstance(x, (tuple, list)) else (x, None)
        ids_b = None if text_b is None else self._in_graph(text_b)
        packed = pack_in_graph(self._in_graph(text_a), ids_b, self.sequence_length,
                               special=self._in_graph)
        features = {}
        for name in F.BACKBONE_INPUTS:
            value = packed[name]
            value = tf.pad(value, [[0, 0], [0, self.sequence_length - tf.shape(value)[1]]])
            value.set_shape([None, self.sequence_length])
            features[name] = value
        return keras.utils.pack_x_y_sample_weight(features, y, sample_weight)

    def get_config(self):
        config = super().get_config()
        config.update(spm_model_file=self.spm_model_file, sequence_length=self.sequence_length,
                      do_lower_case=self.do_lower_case, vocab_file=self.vocab_file,
                      vocabulary_sha256=self.tokenizer.sha256)
        return config
