"""SQuAD inputs: SentencePiece pieces aligned to the characters of the original context, answer
character spans mapped to piece spans, and windows of long contexts (document stride).

Alignment. The context is split on whitespace into words (SentencePiece never joins pieces
across whitespace, so a word's pieces are the same alone as in the whole text). Inside a word,
the pieces' surface strings (the `▁` removed) concatenated equal the preprocessed word whenever
preprocessing keeps its length (lowercasing ASCII and most scripts, quote replacement of
`` and '' aside); then each piece gets its exact character span in the original. Otherwise
(accents removed by NFKD, an unknown piece, SentencePiece's own normalisation) every piece of
the word spans the whole word, so an answer maps to whole words there. A predicted piece span is
turned back into text by slicing the original context between the first piece's start and the
last piece's end, so the answer text is the context's own characters.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import tensorflow as tf

from albert_tf import squad_eval
from albert_tf.task_models import span_model
from albert_tf.tasks import Task
from albert_tf.tokenization import CLS_ID, SEP_ID, SPIECE_UNDERLINE, _ranges_class
from albert_tf.checkpoints import initialize_backbone
from albert_tf.classification import files_for, to_example, write_records
from albert_tf.packing import join_in_graph

_WHITESPACE = frozenset(" \t\r\n\u00a0\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
                        "\u2009\u200a\u202f\u205f\u3000\u200b\ufeff")


@dataclasses.dataclass
class AlignedContext:
    """A context's piece ids with each piece's [start, end) character span in `text`."""

    text: str
    ids: list
    pieces: list
    starts: list
    ends: list
    exact: int  # pieces aligned to their own characters (not to a whole word)

    def piece_span(self, char_start: int, char_end: int) -> tuple[int, int] | None:
        """(first, last) piece index covering characters [char_start, char_end), or None when
        the span holds no piece (whitespace only)."""
        first = next((i for i, e in enumerate(self.ends) if e > char_start), None)
        last = next((i for i in range(len(self.starts) - 1, -1, -1)
                     if self.starts[i] < char_end), None)
        if first is None or last is None or last < first:
            return None
        return first, last

    def text_of(self, first: int, last: int) -> str:
        """The context's characters from piece `first` to piece `last` (inclusive)."""
        return self.text[self.starts[first]:self.ends[last]]


def _words(text: str):
    start = None
    for i, ch in enumerate(text):
        if ch in _WHITESPACE or ch.isspace():
            if start is not None:
                yield start, i
                start = None
        elif start is None:
            start = i
    if start is not None:
        yield start, len(text)


def align_context(text: str, tokenizer) -> AlignedContext:
    ids, pieces, starts, ends, exact = [], [], [], [], 0
    for word_start, word_end in _words(text):
        word = text[word_start:word_end]
        word_pieces = tokenizer.tokenize(word)
        surfaces = [p.replace(SPIECE_UNDERLINE, "") for p in word_pieces]
        preprocessed = tokenizer.preprocess(word)
        aligned = "".join(surfaces) == preprocessed and len(preprocessed) == len(word)
        offset = word_start
        for piece, surface in zip(word_pieces, surfaces):
            if aligned:
                starts.append(offset)
                offset += len(surface)
                ends.append(offset)
                exact += 1
            else:
                starts.append(word_start)
                ends.append(word_end)
            pieces.append(piece)
        ids.extend(tokenizer.pieces_to_ids(word_pieces))
    # A piece that is only "▁" has no characters: give it the next piece's start (empty span).
    for i, (s, e) in enumerate(zip(starts, ends)):
        if s == e and i + 1 < len(starts):
            starts[i] = ends[i] = starts[i + 1]
    return AlignedContext(text, ids, pieces, starts, ends, exact)


def windows(num_pieces: int, max_pieces: int, doc_stride: int) -> list[tuple[int, int]]:
    """(start, length) windows over the context's pieces: each at most `max_pieces` long, each
    starting `doc_stride` after the previous, the last reaching the end (official rule)."""
    if max_pieces < 1 or doc_stride < 1:
        raise ValueError(f"max_pieces ({max_pieces}) and doc_stride ({doc_stride}) must be "
                         "positive; raise --max_seq_length or lower --max_query_length.")
    spans, start = [], 0
    while True:
        length = min(max_pieces, num_pieces - start)
        spans.append((start, length))
        if start + length >= num_pieces:
            return spans
        start += min(length, doc_stride)


# ---------------------------------------------------------------------------------------------
# Features: [CLS] question [SEP] window of the context [SEP].
START_POSITIONS, END_POSITIONS, UNIQUE_IDS = "start_positions", "end_positions", "unique_ids"


def squad_schema(max_seq_length: int) -> dict:
    return {"input_ids": (max_seq_length, "int64"), "input_mask": (max_seq_length, "int64"),
            "segment_ids": (max_seq_length, "int64"), START_POSITIONS: (1, "int64"),
            END_POSITIONS: (1, "int64"), UNIQUE_IDS: (1, "int64"),
            "is_real_example": (1, "int64")}


def question_features(question: dict, context: AlignedContext, tokenizer, max_seq_length: int,
                      doc_stride: int, max_query_length: int, unique_id: int,
                      is_training: bool) -> list[dict]:
    """The features of one question (one per context window). Each carries `offset` (index of
    the window's first piece in the sequence), `window` (start, length) in the context's pieces,
    and, when training, the answer's piece positions in the sequence (0, 0 = [CLS] when the
    window does not hold the whole answer, or the question has none)."""
    query = tokenizer.encode(question["question"])[:max_query_length]
    budget = max_seq_length - len(query) - 3
    answer = None
    if question["answers"]:
        text, start = question["answers"][0], question["answer_starts"][0]
        answer = context.piece_span(start, start + len(text))
    features = []
    for i, (start, length) in enumerate(windows(len(context.ids), budget, doc_stride)):
        ids = [CLS_ID, *query, SEP_ID, *context.ids[start:start + length], SEP_ID]
        segments = [0] * (len(query) + 2) + [1] * (length + 1)
        offset = len(query) + 2
        pad = max_seq_length - len(ids)
        start_position = end_position = 0
        if answer is not None and start <= answer[0] and answer[1] < start + length:
            start_position, end_position = answer[0] - start + offset, answer[1] - start + offset
        features.append({
            "input_ids": ids + [0] * pad, "input_mask": [1] * len(ids) + [0] * pad,
            "segment_ids": segments + [0] * pad, START_POSITIONS: [start_position],
            END_POSITIONS: [end_position], UNIQUE_IDS: [unique_id + i], "is_real_example": [1],
            "offset": offset, "window": (start, length), "id": question["id"]})
    return features


def best_spans(start_logits, end_logits, feature: dict, n_best: int = 20,
               max_answer_length: int = 30):
    """[(score, first piece, last piece)] of the best context spans of one feature (pieces
    indexed in the context), best first: start and end inside the window, end not before
    start, at most `max_answer_length` pieces (official n-best rule over the top starts and
    ends). The top `n_best` starts and ends are taken among the sequence's real positions
    ([CLS], question, window, [SEP]s); the official code ranks the padding positions too,
    which can only push real candidates out. `decode_in_graph` applies the same rule."""
    offset, (window_start, length) = feature["offset"], feature["window"]
    real = offset + length + 1  # through the final [SEP]
    # Highest first; equal logits in position order (as tf.math.top_k).
    starts = np.argsort(-np.asarray(start_logits[:real]), kind="stable")[:n_best]
    ends = np.argsort(-np.asarray(end_logits[:real]), kind="stable")[:n_best]
    spans = []
    for s in starts.tolist():
        for e in ends.tolist():
            if not (offset <= s < offset + length and offset <= e < offset + length):
                continue
            if e < s or e - s + 1 > max_answer_length:
                continue
            spans.append((float(start_logits[s] + end_logits[e]),
                          s - offset + window_start, e - offset + window_start))
    spans.sort(key=lambda t: -t[0])
    return spans[:n_best]


def predict_answers(features, start_logits, end_logits, contexts: dict, n_best: int = 20,
                    max_answer_length: int = 30, null_threshold: float | None = None):
    """({question id: answer text}, {question id: null score - best span score}) from the
    logits of every feature (rows in `features` order). With `null_threshold` (SQuAD v2), a
    question whose null score ([CLS] start + end, minimum over its windows) exceeds its best
    span's score by more than the threshold is answered "" (no answer)."""
    best, null = {}, {}
    for feature, start, end in zip(features, start_logits, end_logits):
        qid = feature["id"]
        null[qid] = min(null.get(qid, float("inf")), float(start[0] + end[0]))
        for score, first, last in best_spans(start, end, feature, n_best, max_answer_length):
            if qid not in best or score > best[qid][0]:
                best[qid] = (score, contexts[qid].text_of(first, last))
            break
    answers, null_odds = {}, {}
    for qid in null:
        score, text = best.get(qid, (float("-inf"), ""))
        null_odds[qid] = null[qid] - score
        answers[qid] = text
        if null_threshold is not None and null_odds[qid] > null_threshold:
            answers[qid] = ""
    return answers, null_odds


# ---------------------------------------------------------------------------------------------
# The span model and the task the training loop runs.
def write_features(features, path: str, max_seq_length: int, num_files: int = 1) -> dict:
    """The features as TFRecords with sidecars (counts), atomically, in `num_files` files
    (`classification.write_records`); returns the sidecar with `files`."""
    schema = squad_schema(max_seq_length)
    meta = {"format": "albert_squad_tfrecord", "num_examples": len(features),
            "max_seq_length": max_seq_length}
    files = write_records([to_example(feature, schema) for feature in features], path, meta,
                          files_for(len(features), num_files))
    return dict(meta, files=files)


def build_features(path: str, tokenizer, max_seq_length: int, doc_stride: int,
                   max_query_length: int, is_training: bool, seed: int | None = None):
    """(dataset, features, {question id: AlignedContext}) of a SQuAD file; training features in
    a seeded order."""
    dataset = squad_eval.load_dataset(path)
    contexts, aligned, features = {}, {}, []
    for q in squad_eval.questions(dataset):
        if q["context"] not in aligned:
            aligned[q["context"]] = align_context(q["context"], tokenizer)
        contexts[q["id"]] = aligned[q["context"]]
        features += question_features(q, contexts[q["id"]], tokenizer, max_seq_length,
                                      doc_stride, max_query_length, 1000000 + len(features),
                                      is_training)
    if is_training and seed is not None:
        order = np.random.default_rng([seed, 0x5A0AD]).permutation(len(features))
        features = [features[i] for i in order]
    return dataset, features, contexts


class SquadTask(Task):
    """SQuAD span extraction for the one loop: loss = mean of the start and end cross entropies
    over the real features of the global batch; evaluation decodes every question's best span
    over its windows and scores it with the official evaluator (`evaluation` must be set:
    (dataset, features in file order, {question id: AlignedContext})).

    `version=2` (SQuAD v2.0): unanswerable questions train toward [CLS]; evaluation answers ""
    where the null odds exceed `null_threshold` and reports the official v2.0 scores (`exact`
    and `f1` of those answers, HasAns/NoAns, and `best_exact`/`best_f1` with their thresholds
    from the official search over the null odds); the best checkpoint by `best_f1`."""

    model_inputs = ("input_ids", "input_mask", "segment_ids")
    term_names = ("loss_sum", "count", "start_correct", "end_correct")
    metric_names = ("span_loss", "start_accuracy", "end_accuracy", "exact_match", "f1")
    best_metric = "f1"
    examples_term = "count"
    name = "squad_v1"

    def __init__(self, albert_config, max_seq_length: int, n_best: int = 20,
                 max_answer_length: int = 30, version: int = 1,
                 null_threshold: float | None = None):
        if version not in (1, 2):
            raise ValueError(f"SQuAD version must be 1 or 2, not {version!r}.")
        self.version = version
        self.null_threshold = (0.0 if null_threshold is None else null_threshold) \
            if version == 2 else None
        if version == 2:
            self.name = "squad_v2"
            self.metric_names = ("span_loss", "start_accuracy", "end_accuracy", "exact", "f1",
                                 "best_exact", "best_f1")
            self.best_metric = "best_f1"
        self.albert_config = albert_config
        self.max_seq_length = max_seq_length
        self.n_best = n_best
        self.max_answer_length = max_answer_length
        self.evaluation = None
        self.last_predictions = None

    def build_model(self, dtype=None):
        return span_model(self.albert_config, dtype)

    def schema(self):
        return squad_schema(self.max_seq_length)

    def check_files(self, files):
        return {path: None for path in files}

    def initialize(self, model, path, init_from_group0=False):
        return initialize_backbone(model.backbone, path, init_from_group0=init_from_group0)

    def normalizers(self, features, global_batch_size):
        ctx = tf.distribute.get_replica_context()
        real = tf.reduce_sum(tf.cast(features["is_real_example"], tf.float32))
        return {"count": ctx.all_reduce(tf.distribute.ReduceOp.SUM, real)}

    def loss_terms(self, outputs, features):
        real = tf.reshape(tf.cast(features["is_real_example"], tf.float32), [-1])
        terms = {"loss_sum": 0.0, "count": tf.reduce_sum(real)}
        for name, key in (("start", START_POSITIONS), ("end", END_POSITIONS)):
            logits = tf.cast(outputs[f"{name}_logits"], tf.float32)
            labels = tf.reshape(tf.cast(features[key], tf.int32), [-1])
            loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
            terms["loss_sum"] += 0.5 * tf.reduce_sum(real * loss)
            correct = tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels)
            terms[f"{name}_correct"] = tf.reduce_sum(real * tf.cast(correct, tf.float32))
        return terms

    def loss(self, terms, normalizers):
        return terms["loss_sum"] / tf.maximum(normalizers["count"], 1.0)

    def eval_outputs(self, outputs, features):
        return {"start_logits": tf.cast(outputs["start_logits"], tf.float32),
                "end_logits": tf.cast(outputs["end_logits"], tf.float32),
                "unique_ids": tf.reshape(features[UNIQUE_IDS], [-1]),
                "real": tf.reshape(tf.cast(features["is_real_example"], tf.float32), [-1])}

    def metrics(self, sums, collected=None):
        count = max(float(sums["count"]), 1.0)
        metrics = {"span_loss": float(sums["loss_sum"]) / count,
                   "start_accuracy": float(sums["start_correct"]) / count,
                   "end_accuracy": float(sums["end_correct"]) / count}
        if collected and self.evaluation is not None:
            dataset, features, contexts = self.evaluation
            row = {int(u): i for i, (u, r) in enumerate(zip(collected["unique_ids"],
                                                            collected["real"])) if r > 0.5}
            rows = [row[f[UNIQUE_IDS][0]] for f in features]
            answers, null_odds = predict_answers(
                features, collected["start_logits"][rows], collected["end_logits"][rows],
                contexts, self.n_best, self.max_answer_length, self.null_threshold)
            if self.version == 1:
                metrics.update(squad_eval.evaluate_v1(dataset, answers))
            else:
                metrics.update(squad_eval.evaluate_v2(dataset, answers, null_odds,
                                                      float("inf")))
            self.last_predictions = answers
        return metrics

    def progress(self, metrics):
        return (f"span loss {metrics['span_loss']:.4f} | start acc "
                f"{metrics['start_accuracy']:.3f} | end acc {metrics['end_accuracy']:.3f}")


# ---------------------------------------------------------------------------------------------
# In-graph: the same alignment, windows and decoding as TensorFlow ops, for SavedModels that
# take a question and a context as text (`export.serving`). Tests compare them with the Python
# functions above.
@functools.lru_cache(maxsize=None)  # also keeps autograph from converting the loop
def _word_delimiters() -> str:
    return _ranges_class(lambda c: c in _WHITESPACE or c.isspace()) + "+"


def _flat_index(ragged, rows, columns):
    """Flat-value index of element (rows[i], columns[i]) of a 2-D ragged tensor."""
    return tf.gather(ragged.row_splits, rows) + tf.cast(columns, ragged.row_splits.dtype)


def align_context_in_graph(contexts, tokenizer):
    """`align_context` for a batch, with byte offsets.

    Args:
        contexts: string [batch]; bytes that are not UTF-8 are replaced by U+FFFD first.
        tokenizer: `albert_tf.tokenization.InGraphTokenizer`.

    Returns:
        (text, ids, starts, ends): `text` string [batch], the contexts after the replacement;
        `ids` int32 and `starts`, `ends` int64 RaggedTensors [batch, (pieces)]: the pieces'
        ids and [start, end) byte offsets in `text` (the characters of `align_context`'s
        spans).
    """
    import tensorflow_text as tf_text

    text = tf.strings.unicode_transcode(contexts, "UTF-8", "UTF-8", errors="replace",
                                        replacement_char=0xFFFD)
    words, word_begin, word_end = tf_text.regex_split_with_offsets(text, _word_delimiters())
    flat_words = words.flat_values
    preprocessed = tokenizer.preprocess(flat_words)
    pieces = tokenizer.tokenize_pieces(preprocessed, preprocessed=True)  # [words, (pieces)]
    surfaces = pieces.with_flat_values(
        tf.strings.regex_replace(pieces.flat_values, SPIECE_UNDERLINE, ""))
    word_chars = tf.strings.length(flat_words, unit="UTF8_CHAR")
    aligned = (tf.equal(tf.strings.reduce_join(surfaces, axis=1), preprocessed)
               & tf.equal(tf.strings.length(preprocessed, unit="UTF8_CHAR"), word_chars))
    # Character span of each piece inside its word: running sum of surface lengths per word.
    lengths = tf.strings.length(surfaces.flat_values, unit="UTF8_CHAR")
    lengths = tf.cast(lengths, tf.int64)
    running = tf.cumsum(lengths)
    before = tf.gather(tf.concat([[0], running], 0), pieces.row_starts())  # per word
    word_of = pieces.value_rowids()
    char_end = running - tf.gather(before, word_of)
    char_start = char_end - lengths
    # Byte offset of each character of each word, plus the word's byte length at the end.
    _, char_bytes = tf.strings.unicode_decode_with_offsets(flat_words, "UTF-8")
    word_bytes = tf.cast(tf.strings.length(flat_words), tf.int64)
    char_bytes = tf.concat([char_bytes, tf.RaggedTensor.from_tensor(word_bytes[:, None])],
                           axis=1)
    aligned_piece = tf.gather(aligned, word_of)
    begin = tf.gather(word_begin.flat_values, word_of)
    end = tf.gather(word_end.flat_values, word_of)
    starts = tf.where(aligned_piece, begin + tf.gather(
        char_bytes.flat_values, _flat_index(char_bytes, word_of, char_start)), begin)
    ends = tf.where(aligned_piece, begin + tf.gather(
        char_bytes.flat_values, _flat_index(char_bytes, word_of, char_end)), end)
    # [batch, (words), (pieces)] -> [batch, (pieces)].
    nested = tf.RaggedTensor.from_nested_row_splits(
        pieces.flat_values, [words.row_splits, pieces.row_splits]).merge_dims(1, 2)
    # A piece that is only "▁" (empty span) takes the next piece's start, as `align_context`.
    n = tf.size(starts, out_type=tf.int64)
    index = tf.range(n)
    limit = tf.gather(nested.row_limits(), nested.value_rowids())
    has_next = index + 1 < limit
    next_start = tf.gather(tf.concat([starts, [0]], 0), index + 1)
    empty = tf.equal(starts, ends) & has_next
    starts = tf.where(empty, next_start, starts)
    ends = tf.where(empty, next_start, ends)
    ids = nested.with_flat_values(tokenizer.pieces_to_ids(nested.flat_values))
    return (text, ids, nested.with_flat_values(starts), nested.with_flat_values(ends))


def windows_in_graph(query_ids, context_ids, max_seq_length: int, doc_stride: int):
    """`question_features` for a batch, without labels: one row per context window.

    Args:
        query_ids: int32 RaggedTensor [batch, (pieces)], already cut to `max_query_length`
            (at most `max_seq_length - 4`, so every window holds a piece).
        context_ids: int32 RaggedTensor [batch, (pieces)].

    Returns:
        dict: `input_ids`, `input_mask`, `segment_ids` int32 [windows, length] (padded to the
        longest window), `example` (the batch row of each window), `offset` (index of the
        window's first context piece in the sequence), `window_start`, `window_length` (in
        the context's pieces); int64 [windows], except the features.
    """
    query_length = query_ids.row_lengths()
    pieces = context_ids.row_lengths()
    budget = max_seq_length - query_length - 3
    step = tf.minimum(budget, doc_stride)
    count = 1 + (tf.maximum(pieces - budget, 0) + step - 1) // step  # as `windows`
    example = tf.repeat(tf.range(tf.size(count, out_type=tf.int64)), count)
    start = tf.ragged.range(count).flat_values * tf.gather(step, example)
    length = tf.minimum(tf.gather(budget, example), tf.gather(pieces, example) - start)
    first = tf.gather(context_ids.row_starts(), example) + start
    window = tf.gather(context_ids.flat_values, tf.ragged.range(first, first + length))
    features = join_in_graph(tf.gather(query_ids, example), window)
    return {**features, "example": example,
            "offset": tf.gather(query_length, example) + 2, "window_start": start,
            "window_length": length}


def decode_in_graph(start_logits, end_logits, windows, batch_size, n_best: int = 20,
                    max_answer_length: int = 30):
    """`predict_answers`' choice for a batch: each question's best span over its windows.

    Args:
        start_logits, end_logits: float32 [windows, length].
        windows: `windows_in_graph`'s dict.
        batch_size: number of questions (scalar tensor).

    Returns:
        dict of [batch] tensors: `score` (best span's start + end logit, -inf when no window
        has a valid span), `first`, `last` (its pieces in the context, int64; 0 when none),
        `null_score` ([CLS] start + end, minimum over the windows), `null_odds`
        (`null_score - score`, as `null_odds.json`).
    """
    length = tf.shape(start_logits)[1]
    offset = tf.cast(windows["offset"], tf.int32)[:, None]
    window_end = offset + tf.cast(windows["window_length"], tf.int32)[:, None]  # exclusive
    positions = tf.range(length)[None, :]
    real = positions <= window_end  # through the final [SEP]
    neg_inf = tf.constant(float("-inf"), start_logits.dtype)
    k = tf.minimum(n_best, length)

    def in_top(logits):
        top = tf.math.top_k(tf.where(real, logits, neg_inf), k=k).indices  # [windows, k]
        return tf.reduce_any(tf.equal(positions[:, :, None], top[:, None, :]), axis=-1) & real

    top_start, top_end = in_top(start_logits), in_top(end_logits)
    # Candidate (s, e = s + d) for d < max_answer_length: [windows, length, max_answer_length].
    d = tf.range(max_answer_length)[None, None, :]
    s = tf.broadcast_to(positions[:, :, None],
                        tf.stack([tf.shape(start_logits)[0], length, max_answer_length]))
    e = s + d
    e_clipped = tf.minimum(e, length - 1)
    valid = (top_start[:, :, None] & tf.gather(top_end, e_clipped, axis=1, batch_dims=1)
             & (s >= offset[:, :, None]) & (e < window_end[:, :, None]))
    score = (start_logits[:, :, None]
             + tf.gather(end_logits, e_clipped, axis=1, batch_dims=1))
    score = tf.reshape(tf.where(valid, score, neg_inf), [tf.shape(score)[0], -1])
    best = tf.argmax(score, axis=1, output_type=tf.int32)
    window_score = tf.reduce_max(score, axis=1)
    window_first = best // max_answer_length - offset[:, 0]
    window_last = window_first + best % max_answer_length
    # The best window of each question (the first of equal scores, as `predict_answers`).
    per_question = tf.RaggedTensor.from_value_rowids(window_score, windows["example"],
                                                     nrows=tf.cast(batch_size, tf.int64))
    chosen = tf.argmax(per_question.to_tensor(neg_inf), axis=1)
    chosen = tf.gather(per_question.row_starts(), tf.range(tf.cast(batch_size, tf.int64))) \
        + chosen
    score = tf.gather(window_score, chosen)
    found = score > neg_inf
    start = windows["window_start"]
    first = tf.where(found, tf.cast(tf.gather(window_first, chosen), tf.int64)
                     + tf.gather(start, chosen), 0)
    last = tf.where(found, tf.cast(tf.gather(window_last, chosen), tf.int64)
                    + tf.gather(start, chosen), 0)
    null = tf.RaggedTensor.from_value_rowids(start_logits[:, 0] + end_logits[:, 0],
                                             windows["example"],
                                             nrows=tf.cast(batch_size, tf.int64))
    null_score = tf.reduce_min(null, axis=1)
    return {"score": score, "first": first, "last": last, "null_score": null_score,
            "null_odds": null_score - score}
