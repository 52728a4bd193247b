"""Token classification (named entities, part of speech): words and tags to windows of
features (`TaggingPreprocessor`: one window rule in TensorFlow ops, run for the training files
after the Python tokenizer and in the exported graph after the in-graph one), TFRecords, and
the task the training loop runs (`TaggingTask`).

Alignment (as Hugging Face's `is_split_into_words` and Model Garden's `tagging.py`): each word
is tokenized on its own (SentencePiece pieces of the official tokenizer; a word of no pieces
becomes one [UNK]); its tag labels its FIRST piece; its other pieces, [CLS], [SEP] and the
padding carry `IGNORE` (-100) and count in no loss or metric. A prediction is the tag of each
word's first piece, one tag per word.

Long sentences are split, never truncated: with B = max_seq_length - 2 pieces per window, word
i (its first piece at offset s_i among the sentence's pieces) goes to window floor(s_i / B);
a window is `[CLS]` + its words' pieces, cut to B, + `[SEP]`. Every word is tagged once, in the
window of its first piece; context does not cross windows (no overlap). Only a word longer
than B pieces loses pieces (its later ones; its first piece, the one tagged, is always kept).
The records and the export run the same ops (`_windows_of_pieces`), so an export tags a long
sentence as `--do_predict` does.

Records: `input_ids`, `input_mask`, `segment_ids`, `label_ids` [max_seq_length] (int64),
`is_real_example` [1] (0: a padding example filling an evaluation file to whole batches) and
`window_index` [1] (0 for a sentence's first window: evaluation joins windows back into
sentences before scoring entities).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

import numpy as np
import tensorflow as tf

from albert_tf import features as F
from albert_tf.packing import for_batches, pack_in_graph, ragged_rows
from albert_tf.records import (encode_examples, files_for, read_cached, to_example, write_records)
from albert_tf.tasks.base import SUM, LabelledTask
from albert_tf.tasks.entity_metrics import entity_scores, is_bio, token_accuracy
from albert_tf.models.token_classifier import AlbertTokenClassifier
from albert_tf.tokenization import FEATURES_REVISION

IGNORE = -100
WINDOW_INDEX = "window_index"
SIDECAR_FORMAT = "albert_tagging_tfrecord"
TASK_NAME = "tagging"


def tagging_schema(max_seq_length: int) -> dict:
    return {F.INPUT_IDS: (max_seq_length, "int64"), F.INPUT_MASK: (max_seq_length, "int64"),
            F.SEGMENT_IDS: (max_seq_length, "int64"), F.LABEL_IDS: (max_seq_length, "int64"),
            F.IS_REAL_EXAMPLE: (1, "int64"), WINDOW_INDEX: (1, "int64")}


@dataclasses.dataclass
class Window:
    """One window of a sentence: its features (padded lists), the words it tags
    (`first_word` .. `first_word + len(positions) - 1`) and the position of each one's first
    piece."""

    features: dict
    first_word: int
    positions: list
    index: int


class TaggingPreprocessor:
    """Words (and tags) -> windows of model features, and windows' predictions -> one tag per
    word (see the module docstring for the alignment and the window rule).

    Args:
        tokenizer: the Python tokenizer (`albert_tf.tokenization.Tokenizer`).
        labels: the tag set (index = label id).
        max_seq_length: the packed length (at least 3).
    """

    def __init__(self, tokenizer, labels, max_seq_length: int):
        if isinstance(max_seq_length, bool) or not isinstance(max_seq_length, int) \
                or max_seq_length < 3:
            raise ValueError(f"max_seq_length must be an integer of at least 3 ([CLS], one "
                             f"piece, [SEP]). Received: {max_seq_length!r}")
        self.tokenizer = tokenizer
        self.labels = list(labels)
        self.label_ids = {label: i for i, label in enumerate(self.labels)}
        self.max_seq_length = max_seq_length
        self.budget = max_seq_length - 2

    def windows(self, words, tags=None, where: str = "the sentence") -> list:
        """[Window] of one sentence; `tags` (one per word, from `labels`) fill `label_ids`.
        Raises ValueError for no words, a tag count that is not the word count, or an unknown
        tag; `where` names the sentence (file and line) in the message."""
        return self.windows_of([(words, tags, where)])[0]

    def windows_of(self, sentences, batch_size: int = 16384) -> list:
        """[[Window] per sentence] of `(words, tags or None, where)` triples (`windows`' checks
        on each): the Python tokenizer's pieces of each word (each distinct word tokenized
        once), cut into windows by the graph's rule (`_windows_of_pieces`, the one
        `windows_in_graph` runs in the SavedModel), `batch_size` sentences per run of the
        ops (a CoNLL-2003-size file in one eager run: tracing the ops for several batches
        costs more than running them)."""
        checked = [self._checked(list(words), tags, where) for words, tags, where in sentences]
        pieces_fn = for_batches(self._windows_of_pieces, len(checked), batch_size, 1,
                                tf.TensorSpec([None], tf.int64))
        encode, pieces = self.tokenizer.encode, {}
        out = []
        for begin in range(0, len(checked), batch_size):
            batch = checked[begin:begin + batch_size]
            words = [word for words, _ in batch for word in words]
            rows = np.repeat(np.arange(len(batch), dtype=np.int64), [len(w) for w, _ in batch])
            ids = [pieces[word] if word in pieces else pieces.setdefault(word, encode(word))
                   for word in words]
            got = {k: v.numpy() for k, v in pieces_fn(ragged_rows(ids), rows).items()}
            out += self._sentence_windows(batch, got)
        return out

    def _checked(self, words: list, tags, where: str) -> tuple:
        if not words:
            raise ValueError(f"{where}: an empty sentence (no words).")
        if tags is not None and len(tags) != len(words):
            raise ValueError(f"{where}: {len(words)} words but {len(tags)} tags.")
        if tags is not None:
            unknown = [t for t in tags if t not in self.label_ids]
            if unknown:
                raise ValueError(f"{where}: tag {unknown[0]!r} is not one of the "
                                 f"{len(self.labels)} training tags {self.labels}.")
        return words, tags

    def _sentence_windows(self, batch, got: dict) -> list:
        """[[Window] per sentence] of `_windows_of_pieces`' numpy output for `batch` (the
        windows of a sentence are consecutive, numbered in word order)."""
        window, position = got["window"].astype(np.int64), got["position"].astype(np.int64)
        num_windows, length = got[F.INPUT_MASK].shape
        padded = {name: np.pad(got[name], ((0, 0), (0, self.max_seq_length - length))).tolist()
                  for name in F.BACKBONE_INPUTS}  # the ops pad with 0 to the longest window
        tag_ids = []
        for words, tags in batch:
            tag_ids += ([IGNORE] * len(words) if tags is None
                        else [self.label_ids[tag] for tag in tags])
        labels = np.full((num_windows, self.max_seq_length), IGNORE, np.int64)
        labels[window, position] = tag_ids
        labels = labels.tolist()
        lengths = [len(words) for words, _ in batch]
        starts = np.cumsum([0] + lengths[:-1])  # each sentence's first word
        first = np.searchsorted(window, np.arange(num_windows))  # each window's first word
        sentence = np.repeat(np.arange(len(batch)), lengths)[first]  # each window's sentence
        index = np.arange(num_windows) - np.searchsorted(sentence, sentence)
        first_word = (first - starts[sentence]).tolist()
        positions = np.split(position, first[1:])
        out = [[] for _ in batch]
        for w, s in enumerate(sentence.tolist()):
            features = {name: padded[name][w] for name in F.BACKBONE_INPUTS}
            features[F.LABEL_IDS] = labels[w]
            out[s].append(Window(features, first_word[w], positions[w].tolist(), int(index[w])))
        return out

    def join(self, windows, predicted_ids) -> list:
        """One tag per word of a sentence from its windows' predicted ids ([seq] each)."""
        tags = []
        for window, ids in zip(windows, predicted_ids):
            tags.extend(self.labels[int(ids[p])] for p in window.positions)
        return tags

    def join_sentences(self, windows, predicted_ids) -> list:
        """[[tag per word] per sentence] from the sentences' windows ([[Window]]) and the
        predicted ids of all their windows, in order ([windows, seq])."""
        out, row = [], 0
        for sentence_windows in windows:
            n = len(sentence_windows)
            out.append(self.join(sentence_windows, predicted_ids[row:row + n]))
            row += n
        return out

    # -----------------------------------------------------------------------------------------
    def windows_in_graph(self, tokenizer, text) -> dict:
        """The same windows of whitespace-separated words, in TensorFlow ops.

        Args:
            tokenizer: the in-graph tokenizer (`albert_tf.tokenization.in_graph_tokenizer`).
            text: string [batch], each a sentence of words separated by whitespace.

        Returns:
            dict: `words` (string RaggedTensor [batch, (words)]); the windows' int32
            `input_ids`, `input_mask`, `segment_ids` [windows, length] (padded to the longest);
            per word (flat, in order) `window` (int32, its window) and `position` (int32, its
            first piece in the window).
        """
        words = tf.strings.split(text)
        out = self._windows_of_pieces(tokenizer(words.flat_values), words.value_rowids(),
                                      special=tokenizer)
        out["words"] = words
        return out

    def _windows_of_pieces(self, ids, row, special=None) -> dict:
        """The window rule (module docstring) in TensorFlow ops, for both paths.

        Args:
            ids: int32 RaggedTensor [words, (pieces)], the words of all sentences in order (a
                word of no pieces becomes one [UNK]).
            row: int64 [words], each word's sentence (sorted).
            special: the tokenizer of the [CLS], [SEP] and [UNK] ids (None: this one's).

        Returns:
            dict: the windows' int32 `input_ids`, `input_mask`, `segment_ids` [windows,
            length] (padded to the longest); per word `window` (int32) and `position` (int32,
            its first piece in the window).
        """
        tokenizer = special or self.tokenizer
        ids = tf.cast(ids, tf.int32)
        empty = tf.equal(ids.row_lengths(), 0)
        unk = tf.RaggedTensor.from_row_lengths(
            tf.fill([tf.reduce_sum(tf.cast(empty, tf.int32))], tf.constant(
                tokenizer.unk_id, ids.dtype)), tf.cast(empty, tf.int64))
        ids = tf.concat([ids, unk], axis=1)
        lengths = ids.row_lengths()
        offsets = tf.cumsum(lengths, exclusive=True)
        start = offsets - tf.gather(tf.math.segment_min(offsets, row), row)
        budget = tf.constant(self.budget, tf.int64)
        keys = row * (tf.int64.max // (2 * 65536)) + start // budget
        unique, window = tf.unique(keys, out_idx=tf.int32)
        num_windows = tf.size(unique)
        first = tf.math.unsorted_segment_min(start, window, num_windows)
        position = start - tf.gather(first, window)
        piece_word = ids.value_rowids()
        piece_position = tf.gather(position, piece_word) + tf.ragged.range(lengths).flat_values
        keep = piece_position < budget
        kept = tf.RaggedTensor.from_value_rowids(
            tf.boolean_mask(ids.flat_values, keep),
            tf.cast(tf.boolean_mask(tf.gather(window, piece_word), keep), tf.int64),
            nrows=tf.cast(num_windows, tf.int64))
        out = pack_in_graph(kept, None, self.max_seq_length, special=tokenizer)
        out.update(window=window, position=tf.cast(position, tf.int32) + 1)
        return out


# ---------------------------------------------------------------------------------------------
# Records.
def write_examples(sentences, preprocessor: TaggingPreprocessor, path: str, source: str,
                   shuffle_seed: int | None = None, pad_to_multiple: int = 1) -> dict:
    """Writes the windows of `sentences` (`conll.Sentence`s of file `source`) as TFRecords with
    a JSON sidecar, atomically; files made from the same sentences and settings are kept.
    Returns the sidecar with `files` and `windows` ([[Window]] per sentence, for prediction).
    `shuffle_seed` writes the windows in a seeded order (training); `pad_to_multiple` appends
    `is_real_example = 0` examples up to a multiple of it."""
    schema = tagging_schema(preprocessor.max_seq_length)
    tokenizer = preprocessor.tokenizer
    windows = preprocessor.windows_of(
        [(s.words, s.tags, f"{source}, line {s.line_numbers[0]}") for s in sentences])
    digest = hashlib.sha256(json.dumps(
        [TASK_NAME, preprocessor.max_seq_length, preprocessor.labels, shuffle_seed,
         pad_to_multiple, tokenizer.sha256, tokenizer.do_lower_case, FEATURES_REVISION,
         [(s.words, s.tags) for s in sentences]], ensure_ascii=False).encode()).hexdigest()
    flat = [w for ws in windows for w in ws]
    meta = {"format": SIDECAR_FORMAT, "task": TASK_NAME, "real_examples": len(flat),
            "sentences": len(sentences), "split_sentences": sum(len(ws) > 1 for ws in windows),
            "max_seq_length": preprocessor.max_seq_length, "labels": preprocessor.labels,
            "vocab_size": tokenizer.vocab_size, "spm_model_sha256": tokenizer.sha256,
            "digest": digest}
    cached = read_cached(path, digest, files_for(len(flat), 1))
    if cached:
        return dict(cached, windows=windows)
    order = np.arange(len(flat))
    if shuffle_seed is not None:
        order = np.random.default_rng([shuffle_seed, 0x7A6]).permutation(len(flat))
    ordered = [flat[i] for i in order.tolist()]
    columns = {name: ([w.features[name] for w in ordered], schema[name][1])
               for name in (*F.BACKBONE_INPUTS, F.LABEL_IDS)}
    columns[F.IS_REAL_EXAMPLE] = ([[1]] * len(ordered), schema[F.IS_REAL_EXAMPLE][1])
    columns[WINDOW_INDEX] = ([[w.index] for w in ordered], schema[WINDOW_INDEX][1])
    records = encode_examples(columns)  # to_example's bytes, all windows at once
    padding = (-len(records)) % pad_to_multiple
    pad = {name: [0] * length for name, (length, _) in schema.items()}
    pad[F.LABEL_IDS] = [IGNORE] * preprocessor.max_seq_length
    records.extend([to_example(pad, schema)] * padding)
    meta.update(num_examples=len(records), padding_examples=padding)
    files = write_records(records, path, meta, 1)
    return dict(meta, files=files, windows=windows)


def sentences_of_windows(values, window_index, labelled) -> list:
    """[[value of each labelled position] per sentence] from windows in file order:
    `values` [windows, seq], `window_index` [windows] (0 starts a sentence), `labelled`
    [windows, seq] (nonzero: a labelled position)."""
    sentences = []
    for row, index, mask in zip(values, window_index, labelled):
        part = row[np.asarray(mask) > 0].tolist()
        if index == 0 or not sentences:
            sentences.append(part)
        else:
            sentences[-1].extend(part)
    return sentences


# ---------------------------------------------------------------------------------------------
class TaggingTask(LabelledTask):
    """Token classification on `write_examples` files: `AlbertTokenClassifier`, cross entropy
    averaged over the labelled pieces (each word's first) of the global batch, token accuracy;
    for BIO/IOB2 tag sets also entity precision, recall and F1 (seqeval's default mode, micro
    average, over whole sentences), which then picks the best checkpoint (else token
    accuracy)."""

    model_inputs = F.BACKBONE_INPUTS
    writer = "albert_tf.tasks.tagging.write_examples"
    name = TASK_NAME
    term_names = ("loss_sum", "token_count", "correct_sum", "count")
    examples_term = "count"

    def __init__(self, albert_config, labels, max_seq_length: int, dropout_rate: float = 0.1):
        self.albert_config = albert_config
        self.labels = list(labels)
        self.max_seq_length = max_seq_length
        self.dropout_rate = dropout_rate
        self.entities = is_bio(self.labels)
        entity = ("entity_precision", "entity_recall", "entity_f1") if self.entities else ()
        self.metric_names = ("cross_entropy", "token_accuracy") + entity
        self.best_metric = "entity_f1" if self.entities else "token_accuracy"

    def build_model(self, dtype=None, performance=None):
        return AlbertTokenClassifier(self.albert_config, len(self.labels),
                                     dropout_rate=self.dropout_rate, dtype=dtype,
                                     performance=performance)

    def schema(self):
        return tagging_schema(self.max_seq_length)

    def expected_sidecar(self):
        return {"task": TASK_NAME, "max_seq_length": self.max_seq_length,
                "labels": self.labels, "vocab_size": (None, self.albert_config.vocab_size)}

    def normalizers(self, features, global_batch_size):
        ctx = tf.distribute.get_replica_context()
        tokens = tf.reduce_sum(tf.cast(self._labelled(features), tf.float32))
        return {"token_count": ctx.all_reduce(SUM, tokens)}

    @staticmethod
    def _labelled(features):
        real = tf.cast(features[F.IS_REAL_EXAMPLE], tf.int64) > 0  # [batch, 1]
        return (tf.cast(features[F.LABEL_IDS], tf.int64) >= 0) & real

    def _per_token(self, outputs, features):
        logits = tf.cast(outputs["logits"], tf.float32)
        labelled = self._labelled(features)
        label = tf.cast(tf.maximum(tf.cast(features[F.LABEL_IDS], tf.int64), 0), tf.int32)
        loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits)
        return tf.argmax(logits, -1, output_type=tf.int32), label, loss, labelled

    def loss_terms(self, outputs, features):
        prediction, label, loss, labelled = self._per_token(outputs, features)
        weight = tf.cast(labelled, tf.float32)
        return {"loss_sum": tf.reduce_sum(weight * loss), "token_count": tf.reduce_sum(weight),
                "correct_sum": tf.reduce_sum(weight * tf.cast(tf.equal(prediction, label),
                                                               tf.float32)),
                "count": tf.reduce_sum(tf.cast(features[F.IS_REAL_EXAMPLE], tf.float32))}

    def loss(self, terms, normalizers):
        return terms["loss_sum"] / tf.maximum(normalizers["token_count"], 1.0)

    def eval_outputs(self, outputs, features):
        prediction, label, _, labelled = self._per_token(outputs, features)
        return {"prediction": prediction, "label": label,
                "labelled": tf.cast(labelled, tf.int32),  # numbers gather on any device
                "window_index": tf.reshape(features[WINDOW_INDEX], [-1]),
                "real": tf.reshape(features[F.IS_REAL_EXAMPLE], [-1])}

    def metrics(self, sums, collected=None):
        tokens = max(float(sums["token_count"]), 1.0)
        metrics = {"cross_entropy": float(sums["loss_sum"]) / tokens,
                   "token_accuracy": float(sums["correct_sum"]) / tokens}
        if self.entities and collected:  # entity scores need whole sentences: evaluation only
            real = collected["real"] > 0
            names = np.array(self.labels, dtype=object)
            true, predicted = (sentences_of_windows(
                names[collected[key][real]], collected["window_index"][real],
                collected["labelled"][real]) for key in ("label", "prediction"))
            scores = entity_scores(true, predicted)
            metrics.update(entity_precision=scores["precision"],
                           entity_recall=scores["recall"], entity_f1=scores["f1"])
        return metrics

    def predict_tags(self, model, path: str, batch_size: int, preprocessor, windows) -> list:
        """[[tag per word] per sentence] of the records of `path`, written (in order, without
        shuffling) from the sentences whose windows are `windows`."""
        logits = self.predict_outputs(model, path, batch_size)["logits"]
        return preprocessor.join_sentences(windows, logits.argmax(-1))


def score_sentences(labels, true, predicted) -> dict:
    """Word-level `token_accuracy` and, for a BIO tag set, `entity_precision`,
    `entity_recall`, `entity_f1` of whole sentences ([[tag]] each)."""
    out = {"token_accuracy": token_accuracy(true, predicted)}
    if is_bio(labels):
        scores = entity_scores(true, predicted)
        out.update(entity_precision=scores["precision"], entity_recall=scores["recall"],
                   entity_f1=scores["f1"])
    return out
