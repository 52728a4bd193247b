"""The official WordPiece tokenizer (google-research/albert `FullTokenizer` without a
SentencePiece model: `BasicTokenizer` + `WordpieceTokenizer`, e.g. the Chinese models'
vocab_chinese.txt), in Python (`WordPieceTokenizer`) and as TensorFlow ops
(`InGraphWordPieceTokenizer`)."""

from __future__ import annotations

import functools
import os
import unicodedata

from albert_tf.tokenization.common import (CLS_PIECE, MASK_PIECE, PAD_ID, SEP_PIECE,
                                           _VocabularyFileTokenizer, _encode_with_masks)
from albert_tf.tokenization.in_graph import (_encode_with_masks_in_graph, _ranges_class,
                                             _whitespace_class)


# ---------------------------------------------------------------------------------------------
# WordPiece: the official tokenizer without --spm_model_file (the Chinese models ship a
# WordPiece `vocab_chinese.txt` and no SentencePiece model).
WORDPIECE_SPECIALS = ("[UNK]", CLS_PIECE, SEP_PIECE, MASK_PIECE)
WORDPIECE_MAX_CHARS = 200  # a longer word is one [UNK] (official `max_input_chars_per_word`)
# CJK Unified Ideographs blocks (with extensions and compatibility ideographs): each character
# is a word of its own (official `BasicTokenizer._is_chinese_char`).
CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
              (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def is_cjk(c: str) -> bool:
    cp = ord(c)
    return any(a <= cp <= b for a, b in CJK_RANGES)


def is_dropped(c: str) -> bool:
    """Removed before anything else: NUL, U+FFFD and control/format characters (Cc, Cf), tab
    and newlines excepted (official `_clean_text`)."""
    return c in "\x00\ufffd" or (unicodedata.category(c) in ("Cc", "Cf") and c not in "\t\n\r")


def is_punctuation(c: str) -> bool:
    """Its own word: every ASCII character that is not a letter, digit, space or control, and
    every Unicode punctuation (P*) character (official `_is_punctuation`)."""
    cp = ord(c)
    return (33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126
            or unicodedata.category(c).startswith("P"))


def strip_accents(text: str) -> str:
    """NFD, then every nonspacing mark (Mn) dropped (official `_run_strip_accents`)."""
    return "".join(c for c in unicodedata.normalize("NFD", text)
                   if unicodedata.category(c) != "Mn")


def basic_tokenize(text: str, do_lower_case: bool = True) -> list[str]:
    """The words of the official `BasicTokenizer`: dropped characters removed, whitespace
    (str.split's) separating words, each CJK character and each punctuation character a word,
    and, with `do_lower_case`, every word lowercased and its accents stripped."""
    cleaned = []
    for c in text:
        if is_dropped(c):
            continue
        cleaned.append(f" {c} " if is_cjk(c) else " " if c.isspace() else c)
    words = []
    for token in "".join(cleaned).split():
        if do_lower_case:
            token = strip_accents(token.lower())
        word = ""
        for c in token:
            if is_punctuation(c):
                words += [word, c] if word else [c]
                word = ""
            else:
                word += c
        if word:
            words.append(word)
    return " ".join(words).split()


def load_wordpiece_vocab(vocab_file: str) -> dict:
    """{token: id} as the official `load_vocab` reads a vocabulary: one token per line (its
    first whitespace-separated field; a blank line is the token " "); a token listed again
    keeps its first id, and ids number the distinct tokens in order."""
    vocab = {}
    with open(vocab_file, encoding="utf-8", newline="\n") as f:
        for line in f:
            token = line.strip().split()[0] if line.strip() else " "
            vocab.setdefault(token, len(vocab))
    return vocab


def wordpiece(word: str, vocab, unk: str = "[UNK]") -> list[str]:
    """Greedy longest-match-first pieces of one word, continuations prefixed "##"; a word with
    a part no piece matches, or longer than `WORDPIECE_MAX_CHARS` characters, is `[unk]`."""
    if len(word) > WORDPIECE_MAX_CHARS:
        return [unk]
    pieces, start = [], 0
    while start < len(word):
        for end in range(len(word), start, -1):
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in vocab:
                break
        else:
            return [unk]
        pieces.append(piece)
        start = end
    return pieces


class WordPieceTokenizer(_VocabularyFileTokenizer):
    """The official WordPiece tokenizer (`FullTokenizer(vocab_file, do_lower_case)` without a
    SentencePiece model): `basic_tokenize`, then `wordpiece` on each word. The interface is
    `Tokenizer`'s, so callers do not ask which one they hold; `make_tokenizer` picks.

    Args:
        vocab_file: a WordPiece vocabulary, one token per line (the Chinese models'
            `vocab_chinese.txt`), holding [UNK], [CLS], [SEP] and, for pretraining data and
            fill-mask, [MASK].
        do_lower_case: lowercase and strip accents (the Chinese models: True).

    Special ids are the vocabulary's (`vocab_chinese.txt`: [UNK] 100, [CLS] 101, [SEP] 102,
    [MASK] 103); padding is 0, as the official data and features pad.
    """

    kind = "wordpiece"
    pad_id = PAD_ID

    def __init__(self, vocab_file: str, do_lower_case: bool = True):
        if not os.path.exists(vocab_file):
            raise FileNotFoundError(f"WordPiece vocabulary not found: {vocab_file}")
        try:
            self.vocab = load_wordpiece_vocab(vocab_file)
        except UnicodeDecodeError:
            raise ValueError(f"{vocab_file} is not UTF-8 text: a WordPiece vocabulary lists one "
                             "token per line (was a SentencePiece .model passed as "
                             "--vocab_file? Pass it as --spm_model_file).") from None
        missing = [t for t in WORDPIECE_SPECIALS[:3] if t not in self.vocab]
        if missing:
            raise ValueError(f"WordPiece vocabulary {vocab_file} lacks {missing}: the official "
                             "tokenizer and features need [UNK], [CLS] and [SEP] in it.")
        self.vocab_file = vocab_file
        self.do_lower_case = do_lower_case
        self.inv_vocab = list(self.vocab)  # ids are 0..n-1, in order
        self.vocab_size = len(self.inv_vocab)
        # [MASK] is optional, as the official `load_vocab` reads a vocabulary (the official
        # tests' own has none): without it, mask_id is None, a literal "[MASK]" in text is
        # text, and pretraining data (which masks with it) is refused.
        self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
            self.vocab.get(t) for t in WORDPIECE_SPECIALS)

    @property
    def vocabulary_file(self) -> str:
        return self.vocab_file

    @functools.cached_property
    def start_piece_mask(self):
        """numpy bool [V]: the piece starts a word: it is not a "##" continuation (official
        `_is_start_piece_bert`)."""
        import numpy as np

        return np.array([not t.startswith("##") for t in self.inv_vocab])

    @functools.cached_property
    def replacement_ids(self):
        """numpy int32: ids a random MLM replacement may draw: not padding and not a reserved
        "[...]" token ([PAD], [UNK], [CLS], [SEP], [MASK], [unusedN]); "[" and "]" are kept."""
        import numpy as np

        return np.array([i for i, t in enumerate(self.inv_vocab)
                         if i != PAD_ID and not (len(t) > 2 and t[0] == "[" and t[-1] == "]")],
                        np.int32)

    def tokenize(self, text: str) -> list[str]:
        return [p for word in basic_tokenize(text, self.do_lower_case)
                for p in wordpiece(word, self.vocab)]

    def encode(self, text: str) -> list[int]:
        return [self.vocab[p] for p in self.tokenize(text)]

    def encode_with_masks(self, text) -> list[int]:
        """`Tokenizer.encode_with_masks`: each literal "[MASK]" is the [MASK] id."""
        return _encode_with_masks(self, text)

    def pieces_to_ids(self, pieces):
        return [self.vocab[p] for p in pieces]

    def ids_to_pieces(self, ids):
        return [self.inv_vocab[int(i)] for i in ids]

    def in_graph(self) -> "InGraphWordPieceTokenizer":
        return InGraphWordPieceTokenizer(self.inv_vocab, self.do_lower_case)

    def on_device(self):
        raise ValueError(f"{self.vocab_file}: TensorFlow Lite export takes a SentencePiece "
                         "vocabulary; a WordPiece one exports as a SavedModel only.")


@functools.lru_cache(maxsize=None)
def _wordpiece_classes() -> dict:
    """RE2 classes of the in-graph basic tokenizer, from Python's Unicode tables."""
    cjk = "".join(f"\\x{{{a:x}}}-\\x{{{b:x}}}" for a, b in CJK_RANGES)
    return {"dropped": _ranges_class(is_dropped), "cjk": f"([{cjk}])",
            "punctuation": "(" + _ranges_class(is_punctuation) + ")",
            "nonspacing": _ranges_class(lambda c: unicodedata.category(c) == "Mn")}


class InGraphWordPieceTokenizer:
    """`WordPieceTokenizer` as TensorFlow ops: the basic tokenizer as regular expressions over
    classes built from Python's Unicode tables, then tensorflow-text's `WordpieceTokenizer`
    (greedy longest match first, "##", a word that does not match is [UNK]) on a table of the
    vocabulary. Equal to `WordPieceTokenizer.encode` except where Python's and ICU's Unicode
    tables differ (NFD, lowercasing); `tf.strings.lower` lowercases the whole string as Python
    does (a word-final capital sigma is "ς" in both). Invalid UTF-8 becomes U+FFFD, which the
    basic tokenizer drops.

    `trackable` (a `tf.Module` owning the table) must be tracked by a module that exports this.
    """

    def __init__(self, tokens, do_lower_case: bool = True):
        import tensorflow as tf
        import tensorflow_text as tf_text

        self.do_lower_case = do_lower_case
        self._classes = _wordpiece_classes()
        self._whitespace = _whitespace_class()
        self.trackable = tf.Module()
        self.trackable.table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(list(tokens)), tf.range(len(tokens), dtype=tf.int64)),
            default_value=-1)
        self.trackable.tokens = tf.constant(list(tokens))
        self._wordpiece = tf_text.WordpieceTokenizer(
            self.trackable.table, suffix_indicator="##",
            max_bytes_per_word=4 * WORDPIECE_MAX_CHARS, token_out_type=tf.int64,
            unknown_token="[UNK]")
        first = {}
        for i, token in enumerate(tokens):
            first.setdefault(token, i)
        self.pad_id = PAD_ID
        self.unk_id, self.cls_id, self.sep_id, self.mask_id = (first.get(t) for t in
                                                               WORDPIECE_SPECIALS)

    def words(self, strings):
        """The basic tokenizer's words: string RaggedTensor [batch, (words)]."""
        import tensorflow as tf
        import tensorflow_text as tf_text

        c = self._classes
        x = tf.strings.unicode_transcode(strings, "UTF-8", "UTF-8", errors="replace",
                                         replacement_char=0xFFFD)
        x = tf.strings.regex_replace(x, c["dropped"], "")
        x = tf.strings.regex_replace(x, self._whitespace, " ")
        x = tf.strings.regex_replace(x, c["cjk"], " \\1 ")
        if self.do_lower_case:
            x = tf_text.normalize_utf8(tf.strings.lower(x, encoding="utf-8"), "NFD")
            x = tf.strings.regex_replace(x, c["nonspacing"], "")
        x = tf.strings.regex_replace(x, c["punctuation"], " \\1 ")
        words = tf.strings.split(x, sep=" ")
        return tf.ragged.boolean_mask(words, tf.strings.length(words) > 0)

    def __call__(self, strings):
        """int32 RaggedTensor [batch, (ids)]."""
        import tensorflow as tf

        words = self.words(strings)
        long = tf.strings.length(words.flat_values, unit="UTF8_CHAR") > WORDPIECE_MAX_CHARS
        words = words.with_flat_values(tf.where(long, "[UNK]", words.flat_values))
        ids = self._wordpiece.tokenize(words).merge_dims(1, 2)
        return tf.cast(ids, tf.int32)

    def encode_with_masks(self, strings):
        """`WordPieceTokenizer.encode_with_masks` for a string batch."""
        return _encode_with_masks_in_graph(self, strings)

    def pieces_to_ids(self, pieces):
        import tensorflow as tf

        return tf.cast(self.trackable.table.lookup(pieces), tf.int32)

    def id_to_piece(self, ids):
        import tensorflow as tf

        return tf.gather(self.trackable.tokens, ids)
