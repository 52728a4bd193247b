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
- `official_v2`: the headline of the official ALBERT `run_squad_v2.py` (the threshold search,
  then the answers at its best F1 threshold scored again).

`load_dataset` reads a SQuAD JSON file or a zip holding one (a `__MACOSX/` entry is ignored) and
refuses, naming the file and where (`data[3].paragraphs[1].qas[0]`, the question's id), what the
official readers would stop on with a KeyError or read wrong: a file that is not JSON, no `data`
list, a paragraph without `context` or `qas`, a question without `id` or `question`, an answer
without `text`, and an id given twice (predictions are keyed by id: one would be lost).
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


class SquadDataError(ValueError):
    """A SQuAD file cannot be read; the message names the file and where (JSON path, id)."""


def _read_json(path: str):
    """The parsed JSON of a SQuAD file, or of the one .json inside a zip."""
    where = path
    try:
        if path.endswith(".zip"):
            with zipfile.ZipFile(path) as archive:
                names = [n for n in archive.namelist()
                         if n.endswith(".json") and not n.startswith("__MACOSX/")]
                if len(names) != 1:
                    raise SquadDataError(f"{path}: expected one SQuAD .json inside, found "
                                         f"{names}")
                where = f"{path}:{names[0]}"
                raw = archive.read(names[0])
        else:
            with open(path, "rb") as f:
                raw = f.read()
        return json.loads(raw.decode("utf-8-sig"))
    except zipfile.BadZipFile as e:
        raise SquadDataError(f"{path}: not a zip file ({e}).") from None
    except UnicodeDecodeError as e:
        raise SquadDataError(f"{where}: not UTF-8 ({e}); a SQuAD file is UTF-8 JSON.") from None
    except json.JSONDecodeError as e:
        raise SquadDataError(f"{where}: not JSON (line {e.lineno}, column {e.colno}: "
                             f"{e.msg}).") from None


def _field(parent: dict, key: str, kind, where: str, source: str, qid=None):
    """`parent[key]`, refused (naming the file, the JSON path and the question id) when it is
    missing or not of `kind`."""
    of = f" (question id {qid!r})" if qid is not None else ""
    if key not in parent:
        raise SquadDataError(f"{source}: {where} has no {key!r}{of}.")
    value, kinds = parent[key], kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or isinstance(value, bool) and bool not in kinds:
        raise SquadDataError(f"{source}: {where}.{key} is {type(value).__name__}, not "
                             f"{' or '.join(k.__name__ for k in kinds)}{of}.")
    return value


def _check_question(qa, where: str, source: str, seen: dict) -> None:
    if not isinstance(qa, dict):
        raise SquadDataError(f"{source}: {where} is {type(qa).__name__}, not an object.")
    qid = _field(qa, "id", (str, int), where, source)
    _field(qa, "question", str, where, source, qid)
    if str(qid) in seen:
        raise SquadDataError(f"{source}: question id {qid!r} is given twice ({seen[str(qid)]} "
                             f"and {where}); predictions are keyed by id, so one would be lost.")
    seen[str(qid)] = where
    if "is_impossible" in qa:
        _field(qa, "is_impossible", bool, where, source, qid)
    for j, answer in enumerate(_field(qa, "answers", list, where, source, qid)
                               if "answers" in qa else []):
        if not isinstance(answer, dict):
            raise SquadDataError(f"{source}: {where}.answers[{j}] is {type(answer).__name__}, "
                                 f"not an object (question id {qid!r}).")
        _field(answer, "text", str, f"{where}.answers[{j}]", source, qid)
        if "answer_start" in answer:
            _field(answer, "answer_start", int, f"{where}.answers[{j}]", source, qid)


def check_dataset(parsed, source: str) -> list:
    """The `data` list of a parsed SQuAD file, refused (`SquadDataError` naming `source`, the
    JSON path and the question id) where it is not SQuAD's layout or gives an id twice."""
    if not isinstance(parsed, dict) or not isinstance(parsed.get("data"), list):
        raise SquadDataError(f"{source}: no \"data\" list at the top level; a SQuAD file is "
                             "{\"version\": ..., \"data\": [articles]}.")
    seen = {}
    for a, article in enumerate(parsed["data"]):
        where = f"data[{a}]"
        if not isinstance(article, dict):
            raise SquadDataError(f"{source}: {where} is {type(article).__name__}, not an "
                                 "object.")
        for p, paragraph in enumerate(_field(article, "paragraphs", list, where, source)):
            here = f"{where}.paragraphs[{p}]"
            if not isinstance(paragraph, dict):
                raise SquadDataError(f"{source}: {here} is {type(paragraph).__name__}, not "
                                     "an object.")
            _field(paragraph, "context", str, here, source)
            for q, qa in enumerate(_field(paragraph, "qas", list, here, source)):
                _check_question(qa, f"{here}.qas[{q}]", source, seen)
    return parsed["data"]


def load_dataset(path: str) -> list:
    """The `data` list (articles) of a SQuAD JSON file, or of the JSON inside a zip, checked by
    `check_dataset`."""
    return check_dataset(_read_json(path), path)


def questions(dataset) -> list[dict]:
    """[{"id", "question", "context", "answers": [texts], "answer_starts": [...] (None where an
    answer gives none), "title", "is_impossible"}]."""
    found = []
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                found.append({"id": qa["id"], "question": qa["question"],
                              "context": paragraph["context"], "title": article.get("title"),
                              "answers": [a["text"] for a in qa.get("answers", [])],
                              "answer_starts": [a.get("answer_start")
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


SEARCH_KEYS = ("best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh")


def answers_at(texts: dict, null_odds: dict, threshold: float) -> dict:
    """Each question's best non-null answer, or "" where its null odds are at or above
    `threshold`: the official ALBERT `write_predictions_v2` decision (`score_diff <
    null_score_diff_threshold` answers)."""
    return {qid: "" if null_odds[qid] >= threshold else text for qid, text in texts.items()}


def official_v2(dataset, texts: dict, null_odds: dict) -> tuple[dict, dict]:
    """The scores the official ALBERT `run_squad_v2.py` reports for one checkpoint
    (`squad_utils.evaluate_v2`), and the predictions it writes: `texts` {id: the best non-null
    answer}, `null_odds` {id: the null score}. First the v2.0 evaluator's threshold search over
    the null odds on `texts` (no-answer threshold 1.0, as the official script sets it); then
    the answers at its `best_f1_thresh` (`answers_at`) scored again with threshold 1.0: the
    headline `exact`, `f1`, `total`, `HasAns_*`, `NoAns_*` and `null_score_diff_threshold`,
    under the official names. Ours beside them: `threshold_search`, the first pass's
    `best_exact`/`best_f1` with their thresholds. Returns (scores, answers)."""
    first = evaluate_v2(dataset, texts, null_odds, 1.0)
    threshold = first["best_f1_thresh"]
    answers = answers_at(texts, null_odds, threshold)
    scores = {k: v for k, v in evaluate_v2(dataset, answers, null_odds, 1.0).items()
              if k not in SEARCH_KEYS}
    scores["null_score_diff_threshold"] = threshold
    scores["threshold_search"] = {k: first[k] for k in SEARCH_KEYS}
    return scores, answers
