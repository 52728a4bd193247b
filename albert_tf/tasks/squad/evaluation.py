"""SQuAD evaluation equal to the official v1.1 and v2.0 scripts, and the dataset reader.

Both versions normalise an answer the same way: lowercase, drop ASCII punctuation, drop the
articles a/an/the as words, collapse whitespace. A prediction scores the maximum over the gold
answers of exact match (normalised strings equal) and token F1 (bag-of-tokens overlap).

- v1.1 (`evaluate_v1`): every gold answer counts as given; {"exact_match", "f1"} in percent.
- v2.0 (`evaluate_v2`): gold answers that normalise to "" are dropped and a question without
  one is unanswerable (gold [""]: only the empty prediction scores); with no-answer
  probabilities a threshold turns a prediction into "no answer"; reports the totals, the
  `HasAns_` / `NoAns_` breakdown, and the best threshold for exact and F1 (the official search
  over the sorted probabilities).

`load_dataset` reads a SQuAD JSON file or a zip holding one (a `__MACOSX/` entry is ignored).
"""

from __future__ import annotations

import collections
import json
import re
import string
import zipfile

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _tokens(text: str) -> list[str]:
    return normalize_answer(text).split() if text else []


def exact_match(gold: str, prediction: str) -> int:
    return int(normalize_answer(gold) == normalize_answer(prediction))


def f1_v1(gold: str, prediction: str) -> float:
    """v1.1's token F1 (no special case for empty answers)."""
    gold_tokens, predicted = _tokens(gold), _tokens(prediction)
    same = sum((collections.Counter(gold_tokens) & collections.Counter(predicted)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(predicted), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def f1_v2(gold: str, prediction: str) -> float:
    """v2.0's token F1: when either side is empty, 1 if both are, else 0."""
    gold_tokens, predicted = _tokens(gold), _tokens(prediction)
    if not gold_tokens or not predicted:
        return float(gold_tokens == predicted)
    return f1_v1(gold, prediction)


def load_dataset(path: str) -> list:
    """The `data` list (articles) of a SQuAD JSON file, or of the JSON inside a zip."""
    if path.endswith(".zip"):
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist()
                     if n.endswith(".json") and not n.startswith("__MACOSX/")]
            if len(names) != 1:
                raise ValueError(f"{path}: expected one SQuAD .json inside, found {names}")
            return json.loads(archive.read(names[0]).decode("utf-8"))["data"]
    with open(path, encoding="utf-8") as f:
        return json.load(f)["data"]


def questions(dataset) -> list[dict]:
    """[{"id", "question", "context", "answers": [texts], "answer_starts": [...], "title"}]."""
    found = []
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                found.append({"id": qa["id"], "question": qa["question"],
                              "context": paragraph["context"], "title": article.get("title"),
                              "answers": [a["text"] for a in qa.get("answers", [])],
                              "answer_starts": [a["answer_start"]
                                                for a in qa.get("answers", [])],
                              "is_impossible": bool(qa.get("is_impossible", False))})
    return found


def evaluate_v1(dataset, predictions: dict) -> dict:
    """Official v1.1 scores over every question of `dataset` (a missing prediction scores 0)."""
    exact = f1 = total = 0.0
    for q in questions(dataset):
        total += 1
        if q["id"] not in predictions:
            continue
        prediction = predictions[q["id"]]
        exact += max(exact_match(g, prediction) for g in q["answers"])
        f1 += max(f1_v1(g, prediction) for g in q["answers"])
    return {"exact_match": 100.0 * exact / total, "f1": 100.0 * f1 / total}


def _raw_scores_v2(dataset, predictions):
    exact, f1, has_answer = {}, {}, {}
    for q in questions(dataset):
        golds = [a for a in q["answers"] if normalize_answer(a)] or [""]
        has_answer[q["id"]] = golds != [""]
        if q["id"] not in predictions:
            continue
        prediction = predictions[q["id"]]
        exact[q["id"]] = max(exact_match(g, prediction) for g in golds)
        f1[q["id"]] = max(f1_v2(g, prediction) for g in golds)
    return exact, f1, has_answer


def _apply_threshold(scores, na_probs, has_answer, threshold):
    return {qid: float(not has_answer[qid]) if na_probs[qid] > threshold else score
            for qid, score in scores.items()}


def _totals(exact, f1, qids=None):
    qids = list(exact) if qids is None else qids
    n = len(qids)
    return {"exact": 100.0 * sum(exact.get(q, 0.0) for q in qids) / n if n else 0.0,
            "f1": 100.0 * sum(f1.get(q, 0.0) for q in qids) / n if n else 0.0, "total": n}


def _best_threshold(predictions, scores, na_probs, has_answer):
    score = best = sum(1 for q in has_answer if not has_answer[q])
    best_threshold = 0.0
    for qid in sorted(na_probs, key=lambda q: na_probs[q]):
        if qid not in scores:
            continue
        if has_answer[qid]:
            score += scores[qid]
        elif predictions[qid]:
            score -= 1
        if score > best:
            best, best_threshold = score, na_probs[qid]
    return 100.0 * best / len(scores), best_threshold


def evaluate_v2(dataset, predictions: dict, na_probs: dict | None = None,
                na_prob_threshold: float = 1.0) -> dict:
    """Official v2.0 scores: `predictions` {id: text ("" = no answer)}, `na_probs` {id:
    probability of no answer} (without them: 0 for every question, and no threshold search). A
    question without a prediction scores 0 (the official script stops on it)."""
    exact, f1, has_answer = _raw_scores_v2(dataset, predictions)
    search = na_probs is not None
    na_probs = na_probs if search else {qid: 0.0 for qid in has_answer}
    exact_t = _apply_threshold(exact, na_probs, has_answer, na_prob_threshold)
    f1_t = _apply_threshold(f1, na_probs, has_answer, na_prob_threshold)
    result = _totals(exact_t, f1_t, list(has_answer))
    for name, want in (("HasAns", True), ("NoAns", False)):
        qids = [q for q in has_answer if has_answer[q] == want]
        if qids:
            part = _totals(exact_t, f1_t, qids)
            result.update({f"{name}_{k}": v for k, v in part.items()})
    if search:
        result["best_exact"], result["best_exact_thresh"] = _best_threshold(
            predictions, exact, na_probs, has_answer)
        result["best_f1"], result["best_f1_thresh"] = _best_threshold(
            predictions, f1, na_probs, has_answer)
    return result
