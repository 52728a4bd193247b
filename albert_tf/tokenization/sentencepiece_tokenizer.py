"""`Tokenizer`: the official ALBERT tokenizer in Python, the official preprocessing +
SentencePiece + the digit-comma re-split (see `albert_tf.tokenization`); data generation and
fine-tuning preprocessing use it, and it makes its in-graph and on-device forms."""

from __future__ import annotations

import functools
import os

from albert_tf.tokenization.common import (CLS_ID, MASK_ID, MASK_PIECE, PAD_ID, SEP_ID,
                                           SPECIAL_IDS, SPIECE_UNDERLINE, UNK_ID,
                                           _VocabularyFileTokenizer, _preprocessed_code_points,
                                           is_start_piece, preprocess_text)
from albert_tf.tokenization.model_file import (_USER_DEFINED, _is_digit_comma,
                                               _model_proto_messages, digit_comma_form)
from albert_tf.tokenization.in_graph import InGraphTokenizer, OnDeviceTokenizer


class Tokenizer(_VocabularyFileTokenizer):
    """SentencePiece tokenizer with the official preprocessing and digit-comma re-split.

    Args:
        spm_model_file: path of a SentencePiece `.model` with the official special ids.
        do_lower_case: lowercase in preprocessing (the released v2 models: True).

    Raises:
        FileNotFoundError: no such model file.
        ValueError: the model lacks the official special pieces/ids.

    Example:
        >>> tok = Tokenizer("30k-clean.model")           # doctest: +SKIP
        >>> tok.encode("Hello, World! 1,000")            # doctest: +SKIP
    """

    kind = "sentencepiece"
    # The official special ids, checked at load (`check_special_ids`); a WordPiece vocabulary
    # has its own (`WordPieceTokenizer`): callers take them from the tokenizer.
    pad_id, unk_id, cls_id, sep_id, mask_id = PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID

    def __init__(self, spm_model_file: str, do_lower_case: bool = True):
        import sentencepiece as spm

        if not os.path.exists(spm_model_file):
            raise FileNotFoundError(f"SentencePiece model not found: {spm_model_file}")
        self.spm_model_file = spm_model_file
        self.do_lower_case = do_lower_case
        self.sp = spm.SentencePieceProcessor()
        try:
            self.sp.Load(spm_model_file)
        except (OSError, RuntimeError) as e:
            raise ValueError(f"{spm_model_file} is not a valid SentencePiece model: {e}") from None
        check_special_ids(self.sp, spm_model_file)
        self.vocab_size = self.sp.GetPieceSize()
        self.digit_comma = digit_comma_form(self.model_proto, spm_model_file)

    @property
    def vocabulary_file(self) -> str:
        """The file that defines the vocabulary (here the SentencePiece model)."""
        return self.spm_model_file

    @functools.cached_property
    def model_proto(self) -> bytes:
        with open(self.spm_model_file, "rb") as f:
            return f.read()

    @functools.cached_property
    def start_piece_mask(self):
        """numpy bool [V]: the piece starts a word, by the official `_is_start_piece_sp`:

        it starts with "▁" or "<"; or it is one of the punctuation characters in
        `START_PIECE_PUNCTUATION` (ASCII punctuation without the apostrophe); or any of its
        characters, lowercased, is outside a-z and that set (digits, "'s", accented and
        non-Latin pieces, € and £).
        Every other piece continues the word before it."""
        import numpy as np

        return np.array([is_start_piece(self.sp.IdToPiece(i)) for i in range(self.vocab_size)])

    @functools.cached_property
    def replacement_ids(self):
        """numpy int32: ids a random MLM replacement may draw (not pad, unknown or control)."""
        import numpy as np

        return np.array([i for i in range(self.vocab_size)
                         if not (self.sp.IsControl(i) or self.sp.IsUnknown(i)
                                 or self.sp.IsUnused(i) or i == PAD_ID)], np.int32)

    def check_vocab_file(self, vocab_file: str) -> None:
        """Raises ValueError unless `vocab_file` (SentencePiece's `.vocab`: a piece, a tab and
        its score per line, as the official `30k-clean.vocab`) lists this model's pieces in id
        order: the official `--vocab_file` must describe the `--spm_model_file` in use."""
        try:
            with open(vocab_file, encoding="utf-8") as f:
                pieces = [line.rstrip("\n").split("\t")[0] for line in f if line.strip("\n")]
        except FileNotFoundError:
            raise ValueError(f"--vocab_file {vocab_file} does not exist.") from None
        except UnicodeDecodeError:
            raise ValueError(f"--vocab_file {vocab_file} is not UTF-8 text (a SentencePiece "
                             ".vocab file is; was the .model passed?).") from None
        if len(pieces) != self.vocab_size:
            raise ValueError(f"--vocab_file {vocab_file} lists {len(pieces)} pieces but "
                             f"--spm_model_file {self.spm_model_file} has {self.vocab_size}: "
                             "pass the .vocab written with that model, or leave --vocab_file "
                             "out.")
        for i, piece in enumerate(pieces):
            if piece != self.sp.IdToPiece(i):
                raise ValueError(f"--vocab_file {vocab_file} line {i + 1} is {piece!r} but "
                                 f"piece {i} of --spm_model_file {self.spm_model_file} is "
                                 f"{self.sp.IdToPiece(i)!r}: the two files are of different "
                                 "vocabularies.")

    def preprocess(self, text: str) -> str:
        return preprocess_text(text, self.do_lower_case)

    def tokenize(self, text: str) -> list[str]:
        """Pieces of `text` after preprocessing, with the official digit-comma re-split."""
        out = []
        for piece in self.sp.EncodeAsPieces(self.preprocess(text)):
            out.extend(self._resplit(piece) if _is_digit_comma(piece) else [piece])
        return out

    def _resplit(self, piece: str) -> list[str]:
        """The re-split of a piece ending in digit + comma, in the vocabulary's form
        (`digit_comma`; depends on the piece alone, so it is also a table over the vocabulary:
        `resplit_table`)."""
        sub = self.sp.EncodeAsPieces(piece[:-1].replace(SPIECE_UNDERLINE, ""))
        if (self.digit_comma == "huggingface" and piece[0] != SPIECE_UNDERLINE and sub
                and sub[0][0] == SPIECE_UNDERLINE):
            if len(sub[0]) == 1:
                sub = sub[1:]
            else:
                sub[0] = sub[0][1:]
        return sub + [piece[-1]]

    def encode(self, text: str) -> list[int]:
        """Token ids of `text` (no [CLS]/[SEP])."""
        return [self.sp.PieceToId(p) for p in self.tokenize(text)]

    def encode_with_masks(self, text) -> list[int]:
        """Token ids of text in which each literal "[MASK]" is the [MASK] id (serving and
        fill-mask input). The text between the markers is encoded on its own, so
        "capital of [MASK]." gives the pieces of "capital of", [MASK], then those of ".".
        `bytes` are decoded as UTF-8 with invalid sequences replaced by U+FFFD, as in-graph."""
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        ids = []
        for i, part in enumerate(text.split(MASK_PIECE)):
            if i:
                ids.append(MASK_ID)
            ids.extend(self.encode(part))
        return ids

    def pieces_to_ids(self, pieces):
        return [self.sp.PieceToId(p) for p in pieces]

    def ids_to_pieces(self, ids):
        return [self.sp.IdToPiece(int(i)) for i in ids]

    def in_graph(self) -> "InGraphTokenizer":
        return InGraphTokenizer(self.model_proto, self.do_lower_case)

    # -- on device (TensorFlow Lite) ----------------------------------------------------------
    @functools.cached_property
    def on_device_model_proto(self) -> bytes:
        """This SentencePiece model with the official preprocessing compiled into its normalizer,
        for tensorflow-text's `FastSentencepieceTokenizer` (the tokenizer TensorFlow Lite runs).

        SentencePiece normalizes with a character map (longest match of a source string,
        replaced by a target). The map written here sends each source `s` to
        `model_normalizer(preprocess(s))`, over every source of the model's own map and every
        code point the preprocessing changes (whitespace to " ", NFKD, combining marks dropped,
        lowercasing). SentencePiece's own whitespace handling then
        collapses and strips spaces as `str.split()` did. Two further changes: "[MASK]" maps to
        " [MASK] " and the [MASK] piece becomes a user-defined symbol, so a literal "[MASK]" in
        the text is the [MASK] id (`OnDeviceTokenizer` drops the "▁" piece this puts before
        it); ids, pieces and scores are unchanged. The digit-comma re-split is
        `resplit_table`."""
        import sentencepiece as spm

        messages = _model_proto_messages()
        model_normalizer = spm.SentencePieceNormalizer(
            model_proto=self.model_proto, add_dummy_prefix=False, remove_extra_whitespaces=False,
            escape_whitespaces=False)
        preprocessed = dict(_preprocessed_code_points(self.do_lower_case))
        sources = {source for source, _ in model_normalizer.Decompile()} | set(preprocessed)

        def preprocess(source):
            if len(source) == 1:
                return preprocessed.get(source, source)
            return "".join(preprocessed.get(c, c) for c in source)

        rules = []
        for source in sorted(sources):
            target = model_normalizer.Normalize(preprocess(source))
            if target != source:
                rules.append((source, target))
        rules.append((MASK_PIECE, f" {MASK_PIECE} "))
        spec = messages["NormalizerSpec"]()
        spec.ParseFromString(spm.SentencePieceNormalizer(
            norm_map=rules).serialized_normalizer_spec())
        proto = messages["ModelProto"]()
        proto.ParseFromString(self.model_proto)
        proto.normalizer_spec.name = "albert_tf_official_preprocessing"
        proto.normalizer_spec.precompiled_charsmap = spec.precompiled_charsmap
        proto.pieces[MASK_ID].type = _USER_DEFINED
        return proto.SerializeToString()

    @functools.cached_property
    def resplit_table(self):
        """numpy int32 [vocab_size, K]: row i is the ids piece i becomes after the official
        digit-comma re-split (itself for every other piece), padded with -1; None when no piece
        of the vocabulary ends in digit + comma."""
        import numpy as np

        rows = {i: self.pieces_to_ids(self._resplit(self.sp.IdToPiece(i)))
                for i in range(self.vocab_size) if _is_digit_comma(self.sp.IdToPiece(i))}
        if not rows:
            return None
        table = np.full((self.vocab_size, max(map(len, rows.values()))), -1, np.int32)
        table[:, 0] = np.arange(self.vocab_size)
        for i, ids in rows.items():
            table[i, :len(ids)] = ids
        return table

    def on_device(self) -> "OnDeviceTokenizer":
        return OnDeviceTokenizer(self)


def check_special_ids(sp, source: str) -> None:
    """Raises ValueError unless `sp` has pad 0, unk 1, [CLS] 2, [SEP] 3, [MASK] 4."""
    problems = []
    if sp.GetPieceSize() <= MASK_ID:
        problems.append(f"only {sp.GetPieceSize()} pieces")
    else:
        if sp.pad_id() != PAD_ID:
            problems.append(f"pad id is {sp.pad_id()}, expected {PAD_ID}")
        if sp.unk_id() != UNK_ID:
            problems.append(f"unk id is {sp.unk_id()}, expected {UNK_ID}")
        for piece, expected in SPECIAL_IDS.items():
            got = sp.PieceToId(piece)
            if got != expected or not sp.IsControl(expected):
                problems.append(f"{piece} is id {got} (control: {sp.IsControl(got)}), "
                                f"expected control id {expected}")
    if problems:
        raise ValueError(
            f"{source} lacks the official ALBERT special ids ({'; '.join(problems)}). Train the "
            "vocabulary with `python -m albert_tf.data.train_vocab`, which sets pad=0, unk=1 and "
            "control symbols [CLS]=2, [SEP]=3, [MASK]=4.")
