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
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import unicodedata

SPIECE_UNDERLINE = "\u2581"

# Official special pieces and ids (pad 0, unk 1, control symbols [CLS] 2, [SEP] 3, [MASK] 4).
PAD_PIECE, UNK_PIECE = "<pad>", "<unk>"
CLS_PIECE, SEP_PIECE, MASK_PIECE = "[CLS]", "[SEP]", "[MASK]"
PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = 0, 1, 2, 3, 4
SPECIAL_IDS = {CLS_PIECE: CLS_ID, SEP_PIECE: SEP_ID, MASK_PIECE: MASK_ID}

# Part of the digest of cached fine-tuning features (GLUE, RACE): raised whenever the ids a text
# or text pair gets change, so features written by an earlier version are written again.
# 2: `` and '' kept (official); an empty text_b packs as one segment (official).
# 3: the re-encoded part of a digit-comma piece keeps its "▁" (official).
FEATURES_REVISION = 3

# How the part before the comma of a piece ending in digit + comma is re-encoded:
# "official": google-research/albert's `encode_pieces` (the "▁" SentencePiece puts before the
# part is kept); "huggingface": XLNet's and Hugging Face's `AlbertTokenizer` (that "▁" dropped
# where the piece did not start with one). The form is part of the vocabulary: a SentencePiece
# model file records a form other than the official one in a field of its own (an extension
# number of `ModelProto`, which SentencePiece, tensorflow-text and transformers ignore).
DIGIT_COMMA_FORMS = ("official", "huggingface")
DIGIT_COMMA_FIELD = 20561


def preprocess_text(text: str, do_lower_case: bool = True) -> str:
    """Official ALBERT text normalization (see module docstring)."""
    out = " ".join(text.strip().split())
    out = unicodedata.normalize("NFKD", out)
    out = "".join(c for c in out if not unicodedata.combining(c))
    if do_lower_case:
        out = out.lower()
    return out


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_vocabulary_digest(path: str, recorded: str | None, saved: str) -> None:
    """ValueError where the vocabulary file at `path` is not the one `saved` (a `.keras`
    model, ...) recorded by its SHA-256 (`recorded`; None: recorded none, nothing checked),
    naming the file, both digests and the fix."""
    if not recorded:
        return
    actual = file_sha256(path)
    if actual != recorded:
        raise ValueError(
            f"{path} is not the vocabulary {saved} was saved with: its sha256 is {actual}, "
            f"the model records {recorded}. Its ids would be another vocabulary's: put the "
            f"file it was saved with back at {path}.")


class _VocabularyFileTokenizer:
    """What a host tokenizer derives from the file that defines its vocabulary
    (`vocabulary_file`, each subclass's own)."""

    @functools.cached_property
    def sha256(self) -> str:
        """The vocabulary file's SHA-256: feature caches and data sidecars record it."""
        return file_sha256(self.vocabulary_file)


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
        `START_PIECE_PUNCTUATION` (ASCII punctuation without the apostrophe); or any of its characters, lowercased,
        is outside a-z and that set (digits, "'s", accented and non-Latin pieces, € and £).
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


def _is_digit_comma(piece: str) -> bool:
    # The official test: len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit().
    return len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit()


_USER_DEFINED = 4  # sentencepiece's ModelProto.SentencePiece.Type.USER_DEFINED


def digit_comma_form(model_proto: bytes, source: str = "the SentencePiece model") -> str:
    """The digit-comma form (`DIGIT_COMMA_FORMS`) the serialized SentencePiece model records:
    "official" where it records none."""
    from google.protobuf.message import DecodeError

    proto = _model_proto_messages()["ModelProto"]()
    try:
        proto.ParseFromString(model_proto)
    except DecodeError as e:
        raise ValueError(f"{source} is not a valid SentencePiece model ({e}): pass the .model "
                         "file the vocabulary was trained as.") from None
    if not proto.HasField("albert_tf_digit_comma"):
        return "official"
    form = proto.albert_tf_digit_comma
    if form not in DIGIT_COMMA_FORMS:
        raise ValueError(f"{source} records the digit-comma form {form!r}, which this version "
                         f"does not know (it knows {', '.join(DIGIT_COMMA_FORMS)}): upgrade "
                         "albert_tf, or use the vocabulary file the model was trained with.")
    return form


def with_digit_comma_form(model_proto: bytes, form: str) -> bytes:
    """The serialized SentencePiece model `model_proto` recording the digit-comma form `form`
    (pieces, scores and normalization unchanged; "official" records nothing, so an official
    model stays byte for byte the file it was)."""
    if form not in DIGIT_COMMA_FORMS:
        raise ValueError(f"unknown digit-comma form {form!r}: one of "
                         f"{', '.join(DIGIT_COMMA_FORMS)}.")
    if digit_comma_form(model_proto) == form:
        return model_proto
    model_proto = _without_field(model_proto, DIGIT_COMMA_FIELD)  # the other form's record
    if form == "official":
        return model_proto
    marker = _model_proto_messages()["ModelProto"](albert_tf_digit_comma=form)
    return model_proto + marker.SerializeToString()  # a field appended is a field set


def _without_field(message: bytes, number: int) -> bytes:
    """The serialized protocol buffer `message` without its top-level field `number`, every
    other field's bytes as they were (a parse and serialize would reorder them)."""
    def varint(i):
        value, shift = 0, 0
        while True:
            byte = message[i]
            value, shift, i = value | (byte & 0x7F) << shift, shift + 7, i + 1
            if not byte & 0x80:
                return value, i

    kept, i = bytearray(), 0
    while i < len(message):
        start = i
        key, i = varint(i)
        wire = key & 7
        if wire == 0:
            i = varint(i)[1]
        elif wire == 2:
            length, i = varint(i)
            i += length
        else:  # 1: 64-bit, 5: 32-bit (ModelProto has no groups)
            i += {1: 8, 5: 4}[wire]
        if key >> 3 != number:
            kept += message[start:i]
    return bytes(kept)


@functools.lru_cache(maxsize=None)
def _model_proto_messages() -> dict:
    """Message classes for SentencePiece's ModelProto with only the fields edited here (pieces:
    piece/score/type; normalizer_spec: name/precompiled_charsmap), every other field kept as an
    unknown field through parse and serialize (also read by `checkpoints.hf.tokenizer_json`).
    Built at run time in a private descriptor pool: sentencepiece 0.2.3's generated
    `sentencepiece_model_pb2` demands protobuf >= 7.36 at import, while the optional Beam group
    (`pip install .[beam]`) needs protobuf 6; the pinned 0.2.2's imports, but a user's
    environment may hold another version."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(
        name="albert_tf/sentencepiece_model_subset.proto", package="albert_tf_spm",
        syntax="proto2")

    def message(name, fields):
        m = file.message_type.add(name=name)
        for field_name, number, kind, label, type_name in fields:
            m.field.add(name=field_name, number=number, type=kind, label=label,
                        **({"type_name": type_name} if type_name else {}))

    optional, repeated = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    message("SentencePiece", [("piece", 1, F.TYPE_STRING, optional, None),
                              ("score", 2, F.TYPE_FLOAT, optional, None),
                              ("type", 3, F.TYPE_INT32, optional, None)])  # an enum on the wire
    message("NormalizerSpec", [("name", 1, F.TYPE_STRING, optional, None),
                               ("precompiled_charsmap", 2, F.TYPE_BYTES, optional, None)])
    message("ModelProto", [
        ("pieces", 1, F.TYPE_MESSAGE, repeated, ".albert_tf_spm.SentencePiece"),
        ("normalizer_spec", 3, F.TYPE_MESSAGE, optional, ".albert_tf_spm.NormalizerSpec"),
        ("albert_tf_digit_comma", DIGIT_COMMA_FIELD, F.TYPE_STRING, optional, None)])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {name: message_factory.GetMessageClass(
        pool.FindMessageTypeByName(f"albert_tf_spm.{name}"))
        for name in ("SentencePiece", "NormalizerSpec", "ModelProto")}


@functools.lru_cache(maxsize=None)
def _preprocessed_code_points(do_lower_case: bool) -> tuple:
    """((c, preprocess(c)), ...) for every code point the official preprocessing changes, taken
    one character at a time (whitespace becomes " "; collapsing is SentencePiece's). Character
    by character equals the whole string except for context: the final-sigma rule of Python's
    lowercasing ("ς" at the end of a word)."""
    out = []
    for cp in range(sys.maxunicode + 1):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c = chr(cp)
        if c.isspace():
            target = " "
        else:
            target = "".join(d for d in unicodedata.normalize("NFKD", c)
                             if not unicodedata.combining(d))
            if do_lower_case:
                target = target.lower()
        if target != c:
            out.append((c, target))
    return tuple(out)


# Official `_is_start_piece_sp` punctuation (google-research/albert create_pretraining_data.py):
# ASCII punctuation without the apostrophe. Its € and £ entries are bytes there, so they never
# equal a piece; those pieces start words through the last clause instead, as here.
START_PIECE_PUNCTUATION = frozenset('!"#$%&()*+,-./:;?@[\\]^_`{|}~')
_WORD_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyz") | START_PIECE_PUNCTUATION


def is_start_piece(piece: str) -> bool:
    """The official whole-word rule for one SentencePiece piece (see `start_piece_mask`)."""
    return (piece.startswith(SPIECE_UNDERLINE) or piece.startswith("<")
            or piece in START_PIECE_PUNCTUATION
            or not all(c.lower() in _WORD_CHARACTERS for c in piece))


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


# ---------------------------------------------------------------------------------------------
# In-graph.
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

    def __init__(self, tokenizer: Tokenizer):
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


def _encode_with_masks(tokenizer, text) -> list[int]:
    """The ids of the text between literal "[MASK]" markers, each part encoded on its own, with
    the [MASK] id between them. `bytes` are decoded as UTF-8, invalid sequences as U+FFFD."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if tokenizer.mask_id is None:  # a vocabulary without [MASK]: the marker is text
        return tokenizer.encode(text)
    ids = []
    for i, part in enumerate(text.split(MASK_PIECE)):
        if i:
            ids.append(tokenizer.mask_id)
        ids.extend(tokenizer.encode(part))
    return ids


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
