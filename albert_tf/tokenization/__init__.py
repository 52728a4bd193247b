"""The one ALBERT tokenizer: official text preprocessing + SentencePiece, in Python and in-graph.

Official pipeline (google-research/albert `tokenization.py`):

1. `preprocess_text`: collapse whitespace (Python `str.split()`), strip accents (NFKD, then drop
   every character with a non-zero canonical combining class), lowercase when `do_lower_case`.
   The LaTeX-style quotes `` and '' are left as they are: the official ALBERT `preprocess_text`
   never maps them to " (XLNet's and Hugging Face's do; ALBERT's does not).
2. SentencePiece pieces; then every piece that ends in a digit followed by "," is re-split: the
   part before the comma is encoded again on its own and the comma becomes its own piece (so
   "1,000" style numbers tokenize consistently). The re-encoded part keeps the "▁" SentencePiece
   puts before it ("3,500," is ▁3 , ▁500 ,): the official `encode_pieces` compares a `str` piece
   with a `bytes` "▁", so its strip of that "▁" never happens. XLNet's and Hugging Face's
   `AlbertTokenizer` do strip it (▁3 , 500 ,); that form is opt-in, recorded in the vocabulary
   file itself (`DIGIT_COMMA_FORMS`, `with_digit_comma_form`), so a model is always tokenized
   as it was trained, by every tokenizer here (Python, in-graph, on-device).

`Tokenizer` does this in Python (data generation, fine-tuning preprocessing); `InGraphTokenizer`
does the same with TensorFlow and tensorflow-text ops, for SavedModels that take raw text. Tests
compare the two on the shipped corpora; the remaining divergence classes are documented on
`InGraphTokenizer`.

The package's modules, each one job (the names below are all importable from
`albert_tf.tokenization` itself):

    common                   the official special pieces and ids, `preprocess_text`,
                             `is_start_piece`, the vocabulary file's digest
    model_file               the SentencePiece model file as data: the digit-comma form it records
    sentencepiece_tokenizer  `Tokenizer`, in Python
    in_graph                 `InGraphTokenizer` (tensorflow-text) and `OnDeviceTokenizer`
                             (TensorFlow Lite)
    wordpiece_tokenizer      the official WordPiece tokenizer (`FullTokenizer` without a
                             SentencePiece model), in Python and in-graph

`make_tokenizer` is the tokenizer of the official flags (--spm_model_file, --vocab_file).
"""


from __future__ import annotations

from albert_tf.tokenization.common import (SPIECE_UNDERLINE, PAD_PIECE, UNK_PIECE, CLS_PIECE,
                                           SEP_PIECE, MASK_PIECE, PAD_ID, UNK_ID, CLS_ID, SEP_ID,
                                           MASK_ID, SPECIAL_IDS, FEATURES_REVISION,
                                           preprocess_text, file_sha256, check_vocabulary_digest,
                                           START_PIECE_PUNCTUATION, is_start_piece)
from albert_tf.tokenization.model_file import (DIGIT_COMMA_FORMS, DIGIT_COMMA_FIELD,
                                               digit_comma_form, with_digit_comma_form)
from albert_tf.tokenization.sentencepiece_tokenizer import Tokenizer, check_special_ids
from albert_tf.tokenization.in_graph import (InGraphTokenizer, OnDeviceTokenizer,
                                             in_graph_tokenizer)
from albert_tf.tokenization.wordpiece_tokenizer import (CJK_RANGES, WORDPIECE_MAX_CHARS,
                                                        WORDPIECE_SPECIALS,
                                                        InGraphWordPieceTokenizer,
                                                        WordPieceTokenizer, basic_tokenize,
                                                        is_cjk, is_dropped, is_punctuation,
                                                        load_wordpiece_vocab, strip_accents,
                                                        wordpiece)

__all__ = ['SPIECE_UNDERLINE', 'PAD_PIECE', 'UNK_PIECE', 'CLS_PIECE', 'SEP_PIECE', 'MASK_PIECE',
           'PAD_ID', 'UNK_ID', 'CLS_ID', 'SEP_ID', 'MASK_ID', 'SPECIAL_IDS', 'FEATURES_REVISION',
           'preprocess_text', 'file_sha256', 'check_vocabulary_digest', 'START_PIECE_PUNCTUATION',
           'is_start_piece', 'DIGIT_COMMA_FORMS', 'DIGIT_COMMA_FIELD', 'digit_comma_form',
           'with_digit_comma_form', 'Tokenizer', 'check_special_ids', 'InGraphTokenizer',
           'OnDeviceTokenizer', 'in_graph_tokenizer', 'WORDPIECE_SPECIALS', 'WORDPIECE_MAX_CHARS',
           'CJK_RANGES', 'is_cjk', 'is_dropped', 'is_punctuation', 'strip_accents',
           'basic_tokenize', 'load_wordpiece_vocab', 'wordpiece', 'WordPieceTokenizer',
           'InGraphWordPieceTokenizer', 'make_tokenizer']


def make_tokenizer(spm_model_file: str | None = None, vocab_file: str | None = None,
                   do_lower_case: bool = True):
    """The tokenizer of the official flags (`FullTokenizer(vocab_file, do_lower_case,
    spm_model_file)`): SentencePiece when `spm_model_file` is given (`vocab_file`, if given too,
    must list its pieces), else WordPiece from `vocab_file`."""
    if spm_model_file:
        tokenizer = Tokenizer(spm_model_file, do_lower_case)
        if vocab_file:
            tokenizer.check_vocab_file(vocab_file)
        return tokenizer
    if vocab_file:
        return WordPieceTokenizer(vocab_file, do_lower_case)
    raise ValueError("No vocabulary: pass --spm_model_file (a SentencePiece model) or "
                     "--vocab_file alone (a WordPiece vocabulary, e.g. vocab_chinese.txt).")
