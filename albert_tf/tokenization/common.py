"""What every tokenizer of ALBERT shares: the official special pieces and ids, the official
text preprocessing (`preprocess_text`), the official whole-word rule of a piece
(`is_start_piece`), the vocabulary file's digest, and the [MASK] marker's encoding."""

from __future__ import annotations

import functools
import hashlib
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
