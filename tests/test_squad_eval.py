"""The SQuAD evaluators against the official scripts' definitions: the real dev sets with gold
answers as predictions, and hand-worked cases."""

import os

import pytest

from albert_tf.tasks.squad import evaluation as S
from conftest import SHARED_DIR

SQUAD_DIR = os.path.join(SHARED_DIR, "data", "squad")


@pytest.fixture(scope="module")
def dev_v1():
    return S.load_dataset(os.path.join(SQUAD_DIR, "dev-v1.1.json.zip"))


@pytest.fixture(scope="module")
def dev_v2():
    return S.load_dataset(os.path.join(SQUAD_DIR, "dev-v2.0.json.zip"))


@pytest.mark.needs_shared("data/squad")
def test_gold_answers_score_100_on_the_real_dev_sets(dev_v1, dev_v2):
    q1 = S.questions(dev_v1)
    assert len(q1) == 10570
    assert S.evaluate_v1(dev_v1, {q["id"]: q["answers"][0] for q in q1}) == {
        "exact_match": 100.0, "f1": 100.0}
    # Three dev questions list "." among their golds; as a prediction it normalises to "" and
    # v1.1's F1 gives 0 for an empty answer even against itself (the other golds lift it), so
    # the last gold of each question scores EM 100 but F1 just below.
    last = S.evaluate_v1(dev_v1, {q["id"]: q["answers"][-1] for q in q1})
    assert last["exact_match"] == 100.0
    assert last["f1"] == pytest.approx(100.0 * (10570 - 1) / 10570)
    q2 = S.questions(dev_v2)
    unanswerable = [q for q in q2 if not q["answers"]]
    assert (len(q2), len(unanswerable)) == (11873, 5945)
    gold = {q["id"]: q["answers"][0] if q["answers"] else "" for q in q2}
    result = S.evaluate_v2(dev_v2, gold)
    assert (result["exact"], result["f1"], result["total"]) == (100.0, 100.0, 11873)
    assert (result["HasAns_total"], result["NoAns_total"]) == (5928, 5945)
    # Answering nothing: exactly the unanswerable share.
    empty = S.evaluate_v2(dev_v2, {qid: "" for qid in gold})
    assert empty["exact"] == pytest.approx(100.0 * 5945 / 11873)
    assert (empty["HasAns_exact"], empty["NoAns_exact"]) == (0.0, 100.0)


def _dataset(qas):
    return [{"title": "t", "paragraphs": [{"context": "c", "qas": [
        {"id": qid, "question": "?", "answers": [{"text": a, "answer_start": 0}
                                                for a in answers]}
        for qid, answers in qas]}]}]


def test_hand_worked_scores():
    assert S.normalize_answer("  The Quick, brown FOX! an apple ") == "quick brown fox apple"
    # ASCII punctuation only; "a" after the dash is a word, and an article
    assert S.normalize_answer("Théâtre—a l'été") == "théâtre— lété"
    data = _dataset([("q1", ["the Eiffel Tower", "Eiffel tower in Paris"]),
                     ("q2", ["1,000 people"]), ("q3", ["cat"])])
    predictions = {"q1": "Eiffel Tower, Paris", "q2": "1000 people", "q3": "a cat"}
    # q1: EM 0; F1 max(2/3 . 2/2 -> 0.8, 3/3 . 3/4 -> 6/7) = 6/7. q2: "1000 people" vs
    # "1000 people" after punctuation removal: EM 1. q3: article dropped: EM 1.
    result = S.evaluate_v1(data, predictions)
    assert result["exact_match"] == pytest.approx(100 * 2 / 3)
    assert result["f1"] == pytest.approx(100 * (6 / 7 + 1 + 1) / 3)
    assert S.f1_v1("", "") == 0.0 and S.f1_v2("", "") == 1.0 and S.f1_v2("x", "") == 0.0


def test_v2_threshold_and_best_threshold_search():
    data = _dataset([("a", ["red"]), ("b", []), ("c", ["blue sky"]), ("d", [])])
    predictions = {"a": "red", "b": "green", "c": "sky", "d": ""}
    na_probs = {"a": 0.1, "b": 0.7, "c": 0.4, "d": 0.9}
    result = S.evaluate_v2(data, predictions, na_probs, na_prob_threshold=0.5)
    # threshold 0.5: a answered right (1), b -> no answer, right (1), c answered F1 2/3,
    # EM 0, d -> no answer, right (1).
    assert result["exact"] == pytest.approx(100 * 3 / 4)
    assert result["f1"] == pytest.approx(100 * (3 + 2 / 3) / 4)
    assert (result["HasAns_total"], result["NoAns_total"]) == (2, 2)
    assert result["NoAns_exact"] == 100.0
    # Search over sorted probabilities: start 2 (answer nothing), a +1 -> 3 (thresh 0.1),
    # c +0 (EM) -> 3, b -1 -> 2, d 0 -> 2. Best 3/4 at 0.1. F1: a +1 -> 3, c +2/3 -> 3.667
    # (thresh 0.4), b -1, d 0.
    assert (result["best_exact"], result["best_exact_thresh"]) == (75.0, 0.1)
    assert result["best_f1"] == pytest.approx(100 * (2 + 1 + 2 / 3) / 4)
    assert result["best_f1_thresh"] == 0.4
    assert "best_exact" not in S.evaluate_v2(data, predictions)


def test_official_v2_headline_is_the_official_runners():
    """The official ALBERT run_squad_v2.py headline (`squad_utils.evaluate_v2`), worked by hand:
    the threshold search over the null odds of the best non-null texts (no-answer threshold
    1.0), then the texts whose null odds are >= its best F1 threshold answered "" (the official
    `score_diff < threshold` keeps an answer: the question at the threshold itself becomes "",
    so the headline can be below the search's best_f1), scored again with threshold 1.0."""
    data = _dataset([("q1", ["a b"]), ("q2", ["c"]), ("q3", []), ("q4", [])])
    texts = {"q1": "a b", "q2": "x", "q3": "y", "q4": "z"}
    odds = {"q1": -2.0, "q2": 0.5, "q3": 0.8, "q4": 1.5}
    scores, answers = S.official_v2(data, texts, odds)
    # Search: start at 2 (both unanswerable right if nothing is answered); q1 +1 -> 3 at -2.0;
    # q2 +0; q3 -1; q4 -1. Best F1 75 at -2.0. Then every odds >= -2.0 -> "": q1 and q2 score
    # 0, q3 and q4 1: 50.
    assert scores["threshold_search"]["best_f1"] == pytest.approx(75.0)
    assert scores["threshold_search"]["best_f1_thresh"] == -2.0
    assert scores["null_score_diff_threshold"] == -2.0
    assert answers == {"q1": "", "q2": "", "q3": "", "q4": ""}
    assert (scores["exact"], scores["f1"], scores["total"]) == (50.0, 50.0, 4)
    assert (scores["HasAns_f1"], scores["NoAns_f1"]) == (0.0, 100.0)
    assert not set(S.SEARCH_KEYS) & set(scores)  # ours under threshold_search only
    # The no-answer threshold 1.0 applies on top, as the official apply_no_ans_threshold: with
    # q2 answered right, odds q4 1.1, q1 1.2, q2 1.6, q3 3.0 the search gives 3 at 1.6 (q4 -1,
    # q1 +1, q2 +1, q3 -1 from 2); q4 and q1 keep their texts, q2 and q3 get "", and then every
    # odds above 1.0 scores as "no answer": q1 0 though right, q4 1 though answered.
    scores, answers = S.official_v2(data, dict(texts, q2="c"),
                                    {"q1": 1.2, "q2": 1.6, "q3": 3.0, "q4": 1.1})
    assert scores["null_score_diff_threshold"] == 1.6
    assert answers == {"q1": "a b", "q2": "", "q3": "", "q4": "z"}
    assert (scores["HasAns_f1"], scores["NoAns_f1"], scores["f1"]) == (0.0, 100.0, 50.0)
