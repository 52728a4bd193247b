"""SQuAD decoding in Python: the best spans of each window (n-best starts x ends, at most
`max_answer_length` pieces, inside the context) and each question's answer over its windows,
with the null odds for SQuAD 2.0. An answer is the context's characters of its pieces with
the whitespace around them stripped, as the official `final_text = ....strip()`."""

from __future__ import annotations

import numpy as np


def _valid_span(s: int, e: int, offset: int, length: int, max_answer_length: int,
                is_max) -> bool:
    """The official rules for a candidate (start s, end e in the sequence): both in the
    window's context, end not before start, at most `max_answer_length` pieces, the start in
    its window of maximum context (`is_max`, by context piece; None: not checked)."""
    return (offset <= s < offset + length and offset <= e < offset + length and s <= e
            and e - s + 1 <= max_answer_length and (is_max is None or is_max[s - offset]))


def best_spans(start_logits, end_logits, feature: dict, n_best: int = 20,
               max_answer_length: int = 30, rank_padding: bool = True):
    """[(score, first piece, last piece)] of the best context spans of one feature (pieces
    indexed in the context), best first: start and end inside the window, end not before
    start, at most `max_answer_length` pieces (official n-best rule over the top starts and
    ends), starting at a piece whose window of maximum context this is (official
    `token_is_max_context`: `feature["max_context"]`, from `features.max_context`). The top
    `n_best` starts and ends are taken over every position of the sequence, padding included,
    then the invalid spans dropped, as the official `_get_best_indexes` ranks them (a padding
    position among the top pushes a real candidate out). `rank_padding=False` ranks the
    sequence's real positions only ([CLS], question, window, [SEP]s), as `decode_in_graph`
    does: a served batch pads its windows to its longest, not to max_seq_length, so its
    padding logits are not the official ones to rank."""
    offset, (window_start, length) = feature["offset"], feature["window"]
    ranked = len(start_logits) if rank_padding else offset + length + 1  # through the [SEP]
    # Highest first; equal logits in position order (as the official stable sort, and
    # tf.math.top_k).
    starts = np.argsort(-np.asarray(start_logits[:ranked]), kind="stable")[:n_best]
    ends = np.argsort(-np.asarray(end_logits[:ranked]), kind="stable")[:n_best]
    is_max = feature.get("max_context")
    spans = []
    for s in starts.tolist():
        for e in ends.tolist():
            if not _valid_span(s, e, offset, length, max_answer_length, is_max):
                continue
            spans.append((float(start_logits[s] + end_logits[e]),
                          s - offset + window_start, e - offset + window_start))
    spans.sort(key=lambda t: -t[0])
    return spans[:n_best]


def predict_answers(features, start_logits, end_logits, contexts: dict, n_best: int = 20,
                    max_answer_length: int = 30, null_threshold: float | None = None,
                    rank_padding: bool = True):
    """({question id: answer text}, {question id: null score - best span score}) from the
    logits of every feature (rows in `features` order). With `null_threshold` (SQuAD v2), a
    question whose null score ([CLS] start + end, minimum over its windows) minus its best
    span's score (the null odds) is at or above the threshold is answered "" (no answer: the
    official ALBERT `write_predictions_v2` rule; BERT's answers "" only above it).
    `rank_padding`: `best_spans`' (official: True)."""
    best, null = {}, {}
    for feature, start, end in zip(features, start_logits, end_logits):
        qid = feature["id"]
        null[qid] = min(null.get(qid, float("inf")), float(start[0] + end[0]))
        for score, first, last in best_spans(start, end, feature, n_best, max_answer_length,
                                             rank_padding):
            if qid not in best or score > best[qid][0]:
                best[qid] = (score, contexts[qid].text_of(first, last).strip())
            break
    answers, null_odds = {}, {}
    for qid in null:
        score, text = best.get(qid, (float("-inf"), ""))
        null_odds[qid] = null[qid] - score
        answers[qid] = text
        if null_threshold is not None and null_odds[qid] >= null_threshold:
            answers[qid] = ""
    return answers, null_odds


def best_beam_spans(outputs: dict, feature: dict, max_answer_length: int = 30):
    """[(score, first piece, last piece)] of one feature's beam (`AlbertSquadV2` outputs: the
    top starts and, for each, the top ends), best first, as the official
    `accumulate_predictions_v2` keeps them: start and end in the window's context, the start
    in its window of maximum context, end not before start, at most `max_answer_length`
    pieces; score = start log-probability + end log-probability."""
    offset, (window_start, length) = feature["offset"], feature["window"]
    is_max = feature.get("max_context")
    starts = np.asarray(outputs["start_top_index"]).astype(int)
    start_log_probs = np.asarray(outputs["start_top_log_probs"])
    ends = np.asarray(outputs["end_top_index"]).astype(int)
    end_log_probs = np.asarray(outputs["end_top_log_probs"])
    end_n_top = len(ends) // max(len(starts), 1)
    spans = []
    for i, s in enumerate(starts.tolist()):
        for j in range(end_n_top):
            e = int(ends[i * end_n_top + j])
            if not _valid_span(s, e, offset, length, max_answer_length, is_max):
                continue
            spans.append((float(start_log_probs[i] + end_log_probs[i * end_n_top + j]),
                          s - offset + window_start, e - offset + window_start))
    spans.sort(key=lambda t: -t[0])
    return spans


def predict_answers_v2(features, outputs: dict, contexts: dict, max_answer_length: int = 30,
                       null_threshold: float | None = 0.0):
    """SQuAD 2.0 answers of the official answer-class model (`AlbertSquadV2`), as the official
    `write_predictions_v2`: each question's best beam span over its windows, and its null
    score, the smallest `cls_logits` over its windows (the official `score_null`, given to the
    evaluator as the no-answer odds); a question whose null score is at or above
    `null_threshold` is answered "", as official (None: every question its best span).
    `outputs`: {name: array over features in `features` order}. Returns (answers, null odds).

    The official code averages a span's log-probabilities (and the null score) over the
    prediction passes it accumulated; with one pass, as here, the average is the value."""
    best, null = {}, {}
    for row, feature in enumerate(features):
        qid = feature["id"]
        null[qid] = min(null.get(qid, float("inf")), float(outputs["cls_logits"][row]))
        spans = best_beam_spans({k: v[row] for k, v in outputs.items()}, feature,
                                max_answer_length)
        if spans and (qid not in best or spans[0][0] > best[qid][0]):
            best[qid] = (spans[0][0],
                         contexts[qid].text_of(spans[0][1], spans[0][2]).strip())
    answers = {}
    for qid in null:
        answers[qid] = best.get(qid, (None, ""))[1]
        if null_threshold is not None and null[qid] >= null_threshold:
            answers[qid] = ""
    return answers, null
