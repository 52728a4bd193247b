"""SavedModels of fine-tuned SQuAD and RACE models that take raw text: the exported graph answers
exactly as the Python prediction path (`run_squad_v*` / `run_race`) does, on real SQuAD 2.0 dev
questions; bad input; warmup requests; the op list of TF Serving 2.20; loading from C++ the way
the server does."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401 - registers the SentencePiece ops the SavedModels use

from albert_tf.tasks import race
from albert_tf.tasks.squad import evaluation as S
from albert_tf.tasks.squad import (align_context, align_context_in_graph, predict_answers,
                                   question_features, AlbertSpanModel)
from albert_tf.tokenization import Tokenizer
from conftest import SHARED_DIR, export_config
from albert_tf.export.saved_model import WARMUP_FILE, ExportError, export_saved_model

TOL = 1e-5
MAX_SEQ, STRIDE, MAX_QUERY, N_BEST, MAX_ANSWER = 48, 12, 10, 5, 6
RACE_SEQ, MAX_QA = 40, 12
SQUAD_V2 = os.path.join(SHARED_DIR, "data", "squad", "dev-v2.0.json.zip")


def spread(model, seed):
    """Weights redrawn around the identity of LayerNorm, small enough that the deep tiny model
    does not collapse: logits spread over about 0.15 with gaps of 1e-3 or more between
    positions, so the best span is never a tie within float error."""
    rng = np.random.default_rng(seed)
    for v in model.weights:
        v.assign(rng.normal(0, 0.05, v.shape).astype(np.float32) + ("gamma" in v.path))


def _features(questions, tokenizer):
    """`run_squad_v2 --do_predict`'s features of `questions`: ({id: aligned context}, the
    features of every window, their model inputs padded to MAX_SEQ)."""
    contexts, features = {}, []
    for q in questions:
        contexts[q["id"]] = align_context(q["context"], tokenizer)
        features += question_features(q, contexts[q["id"]], tokenizer, MAX_SEQ, STRIDE,
                                      MAX_QUERY, 1000 + len(features), False)
    inputs = {k: np.array([f[k] for f in features], np.int32)
              for k in ("input_ids", "input_mask", "segment_ids")}
    return contexts, features, inputs


def _python_prediction(model, tokenizer, questions, threshold, rank_padding=False):
    """`run_squad_v2 --do_predict`'s path: features padded to MAX_SEQ, the Keras model,
    `predict_answers`; the n-best among the real positions, as the export ranks them (the
    official rank over the padding too: `rank_padding`)."""
    contexts, features, inputs = _features(questions, tokenizer)
    out = model(inputs)
    answers, null_odds = predict_answers(features, out["start_logits"].numpy(),
                                         out["end_logits"].numpy(), contexts, N_BEST,
                                         MAX_ANSWER, null_threshold=threshold,
                                         rank_padding=rank_padding)
    return answers, null_odds, features, inputs, out


@pytest.fixture(scope="module")
def squad_export(tmp_path_factory, sample_vocab):
    """A span model with random weights exported with the median null odds of 60 real SQuAD 2.0
    dev questions as its threshold (so some questions are answered and some are not)."""
    tokenizer = Tokenizer(sample_vocab)
    model = AlbertSpanModel(export_config())
    spread(model, seed=11)
    questions = S.questions(S.load_dataset(SQUAD_V2))[:60]
    _, null_odds, *_ = _python_prediction(model, tokenizer, questions, None)
    threshold = float(np.median(list(null_odds.values())))
    path = export_saved_model(
        model, str(tmp_path_factory.mktemp("exports") / "squad"), sample_vocab,
        max_seq_length=MAX_SEQ,
        options={"doc_stride": STRIDE, "max_query_length": MAX_QUERY, "n_best_size": N_BEST,
                 "max_answer_length": MAX_ANSWER, "null_score_diff_threshold": threshold})
    return model, path, tf.saved_model.load(path), questions, threshold


def _served_answers(loaded, questions, answers, null_odds):
    """serving_default on `questions`: each answer is the one in `answers` and its null odds
    the one in `null_odds` (to 1e-4). Returns the signature's outputs and how many it
    answered."""
    got = loaded.signatures["serving_default"](
        question=tf.constant([q["question"] for q in questions]),
        context=tf.constant([q["context"] for q in questions]))
    answered = 0
    for i, q in enumerate(questions):
        answer = got["answer"][i].numpy().decode()
        assert answer == answers[q["id"]], (i, answer, answers[q["id"]])
        assert got["null_odds"][i].numpy() == pytest.approx(null_odds[q["id"]], abs=1e-4)
        answered += bool(answer)
    return got, answered


@pytest.mark.needs_shared("data/squad")
@pytest.mark.slow
def test_squad_export_answers_as_the_python_prediction_path(squad_export, sample_vocab):
    """60 real SQuAD 2.0 dev questions (each context cut into several windows): the exported
    serving_default gives the answers of `predict_answers` (with the exported threshold), the
    same null odds, and character offsets of the answer in the context; serve_tokens gives the
    Keras model's logits."""
    model, _, loaded, questions, threshold = squad_export
    tokenizer = Tokenizer(sample_vocab)
    answers, null_odds, features, inputs, out = _python_prediction(model, tokenizer, questions,
                                                                   threshold)
    got, answered = _served_answers(loaded, questions, answers, null_odds)
    for i, q in enumerate(questions):
        start, end = int(got["answer_start"][i]), int(got["answer_end"][i])
        if answers[q["id"]]:
            assert q["context"][start:end] == answers[q["id"]]
        else:
            assert (start, end) == (-1, -1)
    windows = {}
    for f in features:
        windows[f["id"]] = windows.get(f["id"], 0) + 1
    np.testing.assert_array_equal(got["num_windows"].numpy(),
                                  [windows[q["id"]] for q in questions])
    assert min(windows.values()) >= 2
    assert 10 <= answered <= 50  # the median threshold answers about half
    tokens = loaded.signatures["serve_tokens"](**{k: tf.constant(v) for k, v in inputs.items()})
    real = np.asarray(inputs["input_mask"]).astype(bool)  # padding: remove_padding's, not used
    assert (~real).any()
    for name in ("start_logits", "end_logits"):
        np.testing.assert_allclose(tokens[name].numpy()[real], out[name].numpy()[real], atol=TOL,
                                   rtol=0)
    with open(os.path.join(squad_export[1], "assets.extra", "albert_export.json")) as f:
        record = json.load(f)
    assert record["model"] == "span" and record["options"] == {
        "doc_stride": STRIDE, "max_query_length": MAX_QUERY, "n_best_size": N_BEST,
        "max_answer_length": MAX_ANSWER, "null_score_diff_threshold": threshold}


@pytest.mark.needs_shared("data/squad")
@pytest.mark.slow
def test_in_graph_alignment_equals_python_on_squad_contexts(sample_vocab):
    """Every SQuAD 2.0 dev context: the in-graph piece ids and character spans equal
    `align_context`'s, except where SentencePiece breaks a tie between equal-score
    segmentations of a word differently (tf-text's and pip's builds): there, the spans of the
    in-graph pieces still cover the same word."""
    tokenizer = Tokenizer(sample_vocab)
    in_graph = tokenizer.in_graph()
    contexts = list(dict.fromkeys(q["context"] for q in S.questions(S.load_dataset(SQUAD_V2))))
    text, ids, starts, ends = tf.function(
        lambda c: align_context_in_graph(c, in_graph))(tf.constant(contexts))
    same, ties = 0, 0
    for i, context in enumerate(contexts):
        aligned = align_context(context, tokenizer)
        to_bytes = np.cumsum([0] + [len(ch.encode()) for ch in context])
        want = (aligned.ids, to_bytes[aligned.starts].tolist(), to_bytes[aligned.ends].tolist())
        got = (ids[i].numpy().tolist(), starts[i].numpy().tolist(), ends[i].numpy().tolist())
        if got == want:
            same += 1
            continue
        ties += 1  # the same pieces in another order inside a word: same count, same ends
        assert sorted(got[0]) == sorted(want[0])
        assert (got[1][0], got[2][-1]) == (want[1][0], want[2][-1])
    print(f"\nin-graph alignment: {same}/{len(contexts)} SQuAD 2.0 dev contexts identical, "
          f"{ties} with segmentation ties")
    assert len(contexts) == 1204
    # 1,139 identical with the sample vocabulary trained by sentencepiece 0.2.2 (its trainer
    # keeps fewer digit-run pieces than 0.2.3's: more "000"-like ties; 0.97 held with 0.2.3's)
    assert same / len(contexts) >= 0.94


@pytest.mark.needs_shared("data/squad")
def test_squad_export_bad_and_unusual_input(squad_export):
    _, _, loaded, _, _ = squad_export
    answer = loaded.signatures["serving_default"]
    contexts = ["", "   ", "Café naïve résumé ``quoted'' text of 1,000 words.",
                b"Invalid \xff bytes are replaced here.", "word " * 200]
    questions = ["What?", "", "Which café?", "What are replaced?", "How many words?"]
    got = answer(question=tf.constant(questions), context=tf.constant(contexts))
    texts = [c.decode("utf-8", "replace") if isinstance(c, bytes) else c for c in contexts]
    for i, text in enumerate(texts):
        value = got["answer"][i].numpy().decode()
        if value:
            assert text[int(got["answer_start"][i]):int(got["answer_end"][i])] == value
    assert got["answer"][0].numpy() == b"" and got["answer"][1].numpy() == b""
    assert int(got["num_windows"][4]) > 10  # a long context is windowed, not truncated
    with pytest.raises(tf.errors.InvalidArgumentError, match="same batch size"):
        answer(question=tf.constant(["a", "b"]), context=tf.constant(["a"]))


def test_squad_export_refuses_options_that_cannot_work(sample_vocab, tmp_path):
    model = AlbertSpanModel(export_config())
    with pytest.raises(ExportError, match="max_query_length=45 must be between 1 and"):
        export_saved_model(model, str(tmp_path / "squad"), sample_vocab, max_seq_length=48,
                           options={"max_query_length": 45})
    assert not os.path.exists(tmp_path / "squad")  # no empty BASE/NAME left behind


# ---------------------------------------------------------------------------------------------
RACE_EXAMPLES = [
    race.RaceExample("p-0", "high", "Alice was beginning to get very tired of sitting by her "
                     "sister on the bank, and of having nothing to do. " * 3,
                     "Alice sat by her _ on the _ .", ("sister", "mother", "", "Café naïve"),
                     None),
    race.RaceExample("p-1", "middle", "Short text.", "Why?", ("a", "b", "c", "d"), None),
    race.RaceExample("p-2", "high", "Tom Sawyer whitewashed the fence while Ben watched.",
                     "Who watched Tom while he whitewashed the long wooden fence of the house "
                     "near the river?", ("Ben", "Aunt Polly", "Huck", "Becky"), None),
]


@pytest.fixture(scope="module")
def race_export(tmp_path_factory, sample_vocab):
    model = race.AlbertMultipleChoice(export_config())
    spread(model, seed=5)
    path = export_saved_model(model, str(tmp_path_factory.mktemp("exports") / "race"),
                              sample_vocab, max_seq_length=RACE_SEQ,
                              options={"max_qa_length": MAX_QA})
    return model, path, tf.saved_model.load(path)


@pytest.mark.slow
def test_race_export_equals_the_python_features_and_model(race_export, sample_vocab):
    """Raw article, question and options through serving_default: the tokens of
    `race.example_features` (blanks filled, the last max_qa_length pieces, the article cut)
    and the Keras model's logits."""
    model, _, loaded = race_export
    tokenizer = Tokenizer(sample_vocab)
    rows = [race.example_features(e, tokenizer, RACE_SEQ, MAX_QA)[0] for e in RACE_EXAMPLES]
    inputs = {k: np.array([r[k] for r in rows], np.int32).reshape(len(rows), 4, RACE_SEQ)
              for k in ("input_ids", "input_mask", "segment_ids")}
    want = model(inputs)["logits"].numpy()
    got = loaded.signatures["serving_default"](
        article=tf.constant([e.article for e in RACE_EXAMPLES]),
        question=tf.constant([e.question for e in RACE_EXAMPLES]),
        options=tf.constant([list(e.options) for e in RACE_EXAMPLES]))
    np.testing.assert_allclose(got["logits"].numpy(), want, atol=TOL, rtol=0)
    np.testing.assert_allclose(got["probabilities"].numpy().sum(-1), 1.0, atol=1e-6)
    np.testing.assert_array_equal(got["label"].numpy(), want.argmax(-1))
    assert [a.decode() for a in got["answer"].numpy()] == ["ABCD"[i] for i in want.argmax(-1)]
    tokens = loaded.signatures["serve_tokens"](**{k: tf.constant(v) for k, v in inputs.items()})
    np.testing.assert_allclose(tokens["logits"].numpy(), want, atol=TOL, rtol=0)
    with pytest.raises(tf.errors.InvalidArgumentError, match="options must be"):
        loaded.signatures["serving_default"](article=tf.constant(["a"]),
                                             question=tf.constant(["b"]),
                                             options=tf.constant([["x", "y", "z"]]))


@pytest.mark.needs_shared("data/squad")
@pytest.mark.slow
def test_task_warmup_requests_replay(squad_export, race_export):
    from tensorflow_serving.apis import prediction_log_pb2

    for _, path, loaded in (squad_export[:3], race_export):
        seen = set()
        for record in tf.data.TFRecordDataset(os.path.join(path, WARMUP_FILE)):
            request = prediction_log_pb2.PredictionLog.FromString(
                record.numpy()).predict_log.request
            inputs = {k: tf.constant(tf.make_ndarray(v)) for k, v in request.inputs.items()}
            out = loaded.signatures[request.model_spec.signature_name](**inputs)
            assert all(np.isfinite(v.numpy()).all() for k, v in out.items()
                       if v.dtype.is_floating and k not in ("score", "null_odds"))
            seen.add(request.model_spec.signature_name)
        assert seen == set(loaded.signatures) == {"serving_default", "serve_tokens"}


@pytest.mark.needs_shared("data/squad")
@pytest.mark.slow
def test_task_exports_load_from_cpp_the_way_tf_serving_does(squad_export, race_export,
                                                              tmp_path, serving_loader):
    from albert_tf.export.cc_loader import run_loader
    from albert_tf.export.ops_check import check_saved_model_ops

    binary, info = serving_loader
    _, path, loaded, questions, _ = squad_export
    assert "RegexSplitWithOffsets" in check_saved_model_ops(path)
    inputs = {"question": np.array([q["question"].encode() for q in questions[:8]], object),
              "context": np.array([q["context"].encode() for q in questions[:8]], object)}
    result = run_loader(binary, path, info["op_libraries"], "serving_default", inputs,
                        str(tmp_path))
    expected = loaded.signatures["serving_default"](**{k: tf.constant(v)
                                                       for k, v in inputs.items()})
    assert set(result["outputs"]) == set(expected)
    for name, value in expected.items():
        if value.dtype == tf.string:
            np.testing.assert_array_equal(result["outputs"][name], value.numpy())
        else:
            np.testing.assert_allclose(result["outputs"][name], value.numpy(), atol=1e-4,
                                       rtol=0)
    _, path, loaded = race_export
    inputs = {"article": np.array([e.article.encode() for e in RACE_EXAMPLES], object),
              "question": np.array([e.question.encode() for e in RACE_EXAMPLES], object),
              "options": np.array([[o.encode() for o in e.options] for e in RACE_EXAMPLES],
                                  object)}
    result = run_loader(binary, path, info["op_libraries"], "serving_default", inputs,
                        str(tmp_path))
    expected = loaded.signatures["serving_default"](**{k: tf.constant(v)
                                                       for k, v in inputs.items()})
    np.testing.assert_allclose(result["outputs"]["logits"], expected["logits"].numpy(),
                               atol=TOL, rtol=0)


@pytest.mark.needs_shared("data/squad")
@pytest.mark.slow
def test_entry_point_exports_a_span_model_directory(squad_export, sample_vocab, tmp_path):
    """Our model format holds span models; `python -m albert_tf.export.export_saved_model` exports
    one with the decoding flags, and it answers as the exported original."""
    from albert_tf.checkpoints import load_pretrained, save_albert_tf
    from conftest import run_command

    model, path, loaded, questions, threshold = squad_export
    save_albert_tf(model, str(tmp_path / "squad_model"), sample_vocab)
    assert load_pretrained(str(tmp_path / "squad_model")).albert_kind == "span"
    proc = run_command(
        "albert_tf.export.export_saved_model", "--model_dir", str(tmp_path / "squad_model"),
        "--export_dir", str(tmp_path / "exports" / "qa"), "--max_seq_length", str(MAX_SEQ),
        "--doc_stride", str(STRIDE), "--max_query_length", str(MAX_QUERY), "--n_best_size",
        str(N_BEST), "--max_answer_length", str(MAX_ANSWER), "--null_score_diff_threshold",
        repr(threshold))
    assert proc.returncode == 0, proc.stderr[-3000:]
    again = tf.saved_model.load(str(tmp_path / "exports" / "qa" / "1"))
    inputs = dict(question=tf.constant([q["question"] for q in questions[:20]]),
                  context=tf.constant([q["context"] for q in questions[:20]]))
    want = loaded.signatures["serving_default"](**inputs)
    got = again.signatures["serving_default"](**inputs)
    np.testing.assert_array_equal(got["answer"].numpy(), want["answer"].numpy())
    np.testing.assert_allclose(got["null_odds"].numpy(), want["null_odds"].numpy(), atol=1e-5)


@pytest.mark.needs_shared("data/squad")
@pytest.mark.slow
def test_answer_class_model_export_answers_as_the_python_prediction_path(sample_vocab,
                                                                          tmp_path):
    """The official v2 model (`AlbertSquadV2`, beam 3 x 4) exported: on 40 real SQuAD 2.0 dev
    questions (several windows each), serving_default gives `predict_answers_v2`'s answers at
    the exported threshold (the median null score: some answered, some not), the same null
    odds, and serve_tokens the model's beam."""
    from albert_tf.models.task_models import AlbertSquadV2
    from albert_tf.tasks.squad import predict_answers_v2
    from albert_tf.tasks.squad.task import V2_BEAM_OUTPUTS

    tokenizer = Tokenizer(sample_vocab)
    model = AlbertSquadV2(export_config(), start_n_top=3, end_n_top=4)
    spread(model, seed=13)
    questions = S.questions(S.load_dataset(SQUAD_V2))[:40]
    contexts, features, inputs = _features(questions, tokenizer)
    out = {k: v.numpy() for k, v in model(inputs).items() if k in V2_BEAM_OUTPUTS}
    _, null = predict_answers_v2(features, out, contexts, MAX_ANSWER, None)
    threshold = float(np.median(list(null.values())))
    answers, null = predict_answers_v2(features, out, contexts, MAX_ANSWER, threshold)
    path = export_saved_model(model, str(tmp_path / "squad_v2"), sample_vocab,
                              max_seq_length=MAX_SEQ,
                              options={"doc_stride": STRIDE, "max_query_length": MAX_QUERY,
                                       "max_answer_length": MAX_ANSWER,
                                       "null_score_diff_threshold": threshold})
    loaded = tf.saved_model.load(path)
    _, answered = _served_answers(loaded, questions, answers, null)
    assert 5 <= answered <= 35 and len(features) > len(questions)
    tokens = loaded.signatures["serve_tokens"](**{k: tf.constant(v) for k, v in inputs.items()})
    np.testing.assert_array_equal(tokens["start_top_index"].numpy(), out["start_top_index"])
    np.testing.assert_allclose(tokens["cls_logits"].numpy(), out["cls_logits"], atol=1e-4)
    record = json.load(open(os.path.join(path, "assets.extra", "albert_export.json")))
    assert record["model"] == "squad_v2" and record["options"]["start_n_top"] == 3
