"""Tokenized corpus on disk, memory-mapped: the document store of data generation.

Each input file (official format: one sentence per line, blank line between documents) is
tokenized once into three arrays under a cache directory:

    <key>.tokens.npy     int32, every token of the file
    <key>.sentences.npy  int64, sentence start offsets into tokens (+ end)
    <key>.documents.npy  int64, document start offsets into sentences (+ end)
    <key>.done.json      written last: counts; its presence marks the file finished

`TokenStore` maps these read-only, so example generation streams from disk (pages in what it
reads) instead of holding the corpus in memory, and several worker processes share the pages.
Sentences that tokenize to nothing are dropped; so are documents left empty.
"""

from __future__ import annotations

import json
import os
from array import array

import numpy as np

from albert_tf.data.pretraining import Documents
from albert_tf.data.text_io import InputError, read_documents

from albert_tf.paths import atomic_write

_ARRAYS = ("tokens", "sentences", "documents")


def _save_npy_atomic(path: str, values: np.ndarray) -> None:
    with atomic_write(path, "wb") as f:
        np.save(f, values)


def tokenize_document(lines, tokenizer) -> tuple[list, list]:
    """(token ids, sentence end offsets) of one document; sentences that tokenize to nothing
    are dropped (an empty result: the document is dropped). `albert_tf.data.beam_pipeline` uses it
    too."""
    ids, ends = [], []
    for line in lines:
        sentence = tokenizer.encode(line)
        if sentence:
            ids.extend(sentence)
            ends.append(len(ids))
    return ids, ends


def no_documents_error(path: str) -> InputError:
    return InputError(
        f"{path} holds no documents (no line with text). Inputs must be in the official "
        "format: one sentence per line, a blank line between documents; "
        "`python -m albert_tf.data.prepare_corpus` converts raw text.")


def tokenize_file(path: str, tokenizer, cache_prefix: str, part: tuple | None = None) -> dict:
    """Tokenizes `path` into `cache_prefix.*.npy`; returns its counts. Raises `InputError` when
    the file holds no document (nothing is written then). With `part` (a byte range of
    `albert_tf.data.text_io.document_parts`) only that range, which may hold no document."""
    tokens = array("i")
    sentence_ends = array("q")
    document_ends = array("q")
    for document in read_documents(path, part or (0, None)):
        ids, ends = tokenize_document(document, tokenizer)
        if ids:
            sentence_ends.extend(len(tokens) + end for end in ends)
            tokens.extend(ids)
            document_ends.append(len(sentence_ends))
    if not document_ends and part is None:
        raise no_documents_error(path)
    arrays = {
        "tokens": np.frombuffer(tokens, np.int32),
        "sentences": np.concatenate([[0], np.frombuffer(sentence_ends, np.int64)]),
        "documents": np.concatenate([[0], np.frombuffer(document_ends, np.int64)]),
    }
    for name in _ARRAYS:
        _save_npy_atomic(f"{cache_prefix}.{name}.npy", arrays[name])
    counts = {"path": os.path.abspath(path), "tokens": len(tokens),
              "sentences": len(sentence_ends), "documents": len(document_ends)}
    with atomic_write(f"{cache_prefix}.done.json") as f:
        json.dump(counts, f)
    return counts


def is_tokenized(cache_prefix: str) -> bool:
    return os.path.exists(f"{cache_prefix}.done.json")


def tokenized_counts(cache_prefix: str) -> dict:
    """The counts `tokenize_file` recorded (tokens, sentences, documents)."""
    with open(f"{cache_prefix}.done.json", encoding="utf-8") as f:
        return json.load(f)


class TokenStore(Documents):
    """Read-only, memory-mapped documents of several tokenized files, numbered globally in
    input-file order."""

    def __init__(self, cache_prefixes):
        self._files = []
        doc_counts = []
        for prefix in cache_prefixes:
            # Plain arrays over the mapped pages: slicing a `np.memmap` costs microseconds.
            arrays = {name: np.load(f"{prefix}.{name}.npy", mmap_mode="r").view(np.ndarray)
                      for name in _ARRAYS}
            self._files.append(arrays)
            doc_counts.append(len(arrays["documents"]) - 1)
        self._doc_starts = np.concatenate([[0], np.cumsum(doc_counts)]).astype(np.int64)
        self._last = (-1, None, 0)

    def __len__(self):
        return int(self._doc_starts[-1])

    def _locate(self, doc):
        if self._last[0] == doc:
            return self._last[1], self._last[2]
        k = int(np.searchsorted(self._doc_starts, doc, side="right")) - 1
        arrays = self._files[k]
        first_sentence = int(arrays["documents"][doc - self._doc_starts[k]])
        self._last = (doc, arrays, first_sentence)
        return arrays, first_sentence

    def num_sentences(self, doc):
        k = int(np.searchsorted(self._doc_starts, doc, side="right")) - 1
        local = doc - self._doc_starts[k]
        documents = self._files[k]["documents"]
        return int(documents[local + 1] - documents[local])

    def sentence(self, doc, index):
        arrays, first = self._locate(doc)
        s = first + index
        sentences = arrays["sentences"]
        return arrays["tokens"][int(sentences[s]):int(sentences[s + 1])]

    def document_tokens(self) -> np.ndarray:
        """int64 [num_documents]: tokens per document (for splitting work into units)."""
        out = []
        for arrays in self._files:
            sentences, documents = arrays["sentences"], arrays["documents"]
            out.append(np.asarray(sentences[documents[1:]] - sentences[documents[:-1]]))
        return np.concatenate(out).astype(np.int64)
