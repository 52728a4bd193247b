"""SQuAD inputs: pieces aligned to the original characters, answer spans, document windows."""

import json
import logging
import os
import zipfile

import numpy as np
import pytest

from albert_tf import AlbertConfig
from albert_tf.tasks.squad import evaluation as S
from albert_tf.tasks.squad import align_context, build_features, windows
from albert_tf.tasks.squad.features import answer_found
from albert_tf.tokenization import Tokenizer
from conftest import SHARED_DIR, run_command

SQUAD_DIR = os.path.join(SHARED_DIR, "data", "squad")
# The command lines' document windows.
WINDOW_FLAGS = ["--max_seq_length", "128", "--doc_stride", "64", "--max_query_length", "24"]


def _command_line_slice(tmp_path, archive, version):
    """The first two paragraphs of the bundled dev set `archive` written as tmp_path/slice.json
    (SQuAD `version`), and as tmp_path/train.json with the first answer of each question only
    (a training file: the official reader trains on exactly one), and a tiny model's
    tmp_path/albert_config.json: (paragraphs, config path)."""
    paragraphs = S.load_dataset(os.path.join(SQUAD_DIR, archive))[0]["paragraphs"][:2]
    (tmp_path / "slice.json").write_text(json.dumps(
        {"version": version, "data": [{"title": "slice", "paragraphs": paragraphs}]}))
    training = [dict(p, qas=[dict(qa, answers=qa["answers"][:1]) for qa in p["qas"]])
                for p in paragraphs]
    (tmp_path / "train.json").write_text(json.dumps(
        {"version": version, "data": [{"title": "slice", "paragraphs": training}]}))
    config = tmp_path / "albert_config.json"
    AlbertConfig(vocab_size=8000, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                 num_attention_heads=4, intermediate_size=48,
                 max_position_embeddings=128).to_json_file(config)
    return paragraphs, config


def _assert_export_answers(export_dir, questions, predictions):
    """The SavedModel in `export_dir` answers the raw `questions` as `predictions` (a
    predictions.json) does."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 - the SentencePiece ops of the SavedModel

    loaded = tf.saved_model.load(str(export_dir))
    got = loaded.signatures["serving_default"](
        question=tf.constant([q["question"] for q in questions]),
        context=tf.constant([q["context"] for q in questions]))
    assert [a.decode() for a in got["answer"].numpy()] == [predictions[q["id"]]
                                                          for q in questions]


def _train_and_predict_flags(tmp_path, config, sample_vocab, epochs, export):
    """A run that trains `epochs` on train.json and predicts slice.json (output_dir
    tmp_path/out), exporting to tmp_path/exports/`export`."""
    slice_file = str(tmp_path / "slice.json")
    return ["--train_file", str(tmp_path / "train.json"), "--predict_file", slice_file, "--albert_config_file",
            str(config), "--spm_model_file", sample_vocab, "--output_dir", str(tmp_path / "out"),
            "--do_train", "--do_predict", *WINDOW_FLAGS, "--train_batch_size", "8",
            "--num_train_epochs", str(epochs), "--learning_rate", "1e-3",
            "--iterations_per_loop", "10", "--export_dir", str(tmp_path / "exports" / export)]


@pytest.mark.needs_shared("data/squad")
@pytest.mark.slow
@pytest.mark.parametrize("version", ["v1.1", "v2.0"])
def test_answer_spans_map_to_pieces_that_decode_to_the_answer(version, sample_vocab):
    """For every answerable dev question (its first gold answer), the piece span that covers
    the answer's characters, sliced back from the context, normalises to the answer."""
    tokenizer = Tokenizer(sample_vocab)
    data = S.load_dataset(os.path.join(SQUAD_DIR, f"dev-{version}.json.zip"))
    contexts, mapped, total, exact, pieces = {}, 0, 0, 0, 0
    for q in S.questions(data):
        if not q["answers"]:
            continue
        if q["context"] not in contexts:
            contexts[q["context"]] = context = align_context(q["context"], tokenizer)
            exact += context.exact
            pieces += len(context.ids)
            # The pieces are the tokenizer's pieces of the whole context.
            assert context.ids == tokenizer.encode(q["context"]) or len(contexts) > 50
        context = contexts[q["context"]]
        answer, start = q["answers"][0], q["answer_starts"][0]
        assert q["context"][start:start + len(answer)] == answer
        span = context.piece_span(start, start + len(answer))
        total += 1
        if span and S.normalize_answer(context.text_of(*span)) == S.normalize_answer(answer):
            mapped += 1
    print(f"\nSQuAD {version} dev: {mapped}/{total} answers ({mapped / total:.2%}) map to a piece "
          f"span that decodes to the answer; {exact / pieces:.4%} of {pieces} context pieces "
          "aligned to their own characters")
    assert total == {"v1.1": 10570, "v2.0": 5928}[version]
    assert mapped / total >= 0.99


def test_alignment_by_hand(sample_vocab):
    tokenizer = Tokenizer(sample_vocab)
    text = "The  Café ``quoted'' 1,000\tmiles."
    context = align_context(text, tokenizer)
    assert context.ids == tokenizer.encode(text)
    for i, piece in enumerate(context.pieces):
        surface = text[context.starts[i]:context.ends[i]]
        if context.starts[i] < context.ends[i] and "é" not in surface and "`" not in surface \
                and "'" not in surface:
            assert surface.lower() == piece.replace("\u2581", "")
    start = text.index("1,000")
    span = context.piece_span(start, start + 5)
    assert context.text_of(*span) == "1,000"
    start = text.index("Café")
    assert context.text_of(*context.piece_span(start, start + 4)) == "Café"  # whole word


CONTEXT = "The quick brown fox jumps over the lazy dog."


def _qa(qid, text=None, start=None, **extra):
    answers = [] if text is None else [{"text": text, "answer_start": start}]
    return dict({"id": qid, "question": f"question {qid}?", "answers": answers}, **extra)


# (id, answer text, answer_start, is_impossible, its text found at answer_start)
TRAINING_CASES = [
    ("right", "brown fox", 10, False, True),
    ("wrong_text", "cat", 16, False, False),          # the context says "fox" there
    ("off_by_one", "quick", 5, False, True),          # found in the words touched
    ("spaces", " lazy  dog", 34, False, True),        # whitespace collapsed
    ("impossible", "fox", 16, True, True),            # official: [CLS], answers ignored
    ("whitespace", "q", 19, False, False),            # a space: the next piece, never [CLS]
]


def test_training_trains_every_question_as_the_official_albert_reader(tmp_path, sample_vocab,
                                                                      caplog):
    """Training (the official ALBERT `read_squad_examples`): every question is trained, one
    whose answer text is not at answer_start on the span there (BERT's reader skipped it,
    "Could not find answer"; so did we), counted in one warning; the dataset keeps them all.
    Evaluation files are not filtered."""
    for qid, text, start, _, found in TRAINING_CASES:
        assert answer_found(CONTEXT, text, start)[0] == (found or qid == "impossible"), qid
    assert answer_found(CONTEXT, "cat", 16) == (False, "fox")
    path = tmp_path / "train.json"
    path.write_text(json.dumps({"data": [{"title": "t", "paragraphs": [{
        "context": CONTEXT, "qas": [_qa(qid, text, start, is_impossible=impossible)
                                    for qid, text, start, impossible, _ in TRAINING_CASES]}]}]}))
    tokenizer = Tokenizer(sample_vocab)
    with caplog.at_level(logging.WARNING):
        dataset, features, contexts = build_features(str(path), tokenizer, 64, 32, 16, True, 0)
    expected = [qid for qid, *_ in TRAINING_CASES]
    assert [q["id"] for q in S.questions(dataset)] == expected
    assert sorted({f["id"] for f in features}) == sorted(expected) == sorted(contexts)
    warnings = [r.getMessage() for r in caplog.records if "training questions" in r.getMessage()]
    assert warnings == [
        f"{path}: 2 of 6 training questions have an answer text that is not in the context at "
        "answer_start; each is trained on the span there, as the official ALBERT reader does "
        "(BERT's reader skips them: \"Could not find answer\"): wrong_text ('fox' vs. 'cat'); "
        "whitespace ('fox' vs. 'q')"]
    assert len(features) == len(expected)  # one window each
    for f in features:
        if f["id"] == "impossible":
            assert f["start_positions"] == f["end_positions"] == [0]
            continue
        first, last = (f["window"][0] + f[k][0] - f["offset"]
                       for k in ("start_positions", "end_positions"))
        assert contexts[f["id"]].text_of(first, last) == {
            "right": "brown fox", "wrong_text": "fox", "off_by_one": "quick",
            "spaces": "lazy dog.", "whitespace": "jump"}[f["id"]]
    # Evaluation: every question, whatever its answer_start.
    dataset, features, _ = build_features(str(path), tokenizer, 64, 32, 16, False)
    assert len(S.questions(dataset)) == len({f["id"] for f in features}) == len(TRAINING_CASES)


@pytest.mark.parametrize("qa, message", [
    (_qa("q9"), r"training question 'q9' has no answer and is not marked \"is_impossible\": "
                r"true"),
    (dict(_qa("q9", "fox", 16), answers=[{"text": "fox", "answer_start": 16}] * 3),
     r"1 training question\(s\) have several answers \('q9'\); the official reader trains on "
     r"exactly one"),
    (_qa("q9", "The", -3), r"training question 'q9': its answer 'The' at answer_start -3 is "
                           r"outside its context \(44 characters\)"),
    (_qa("q9", "dog.", 100), r"answer 'dog.' at answer_start 100 is outside its context"),
    (_qa("q9", "dog. And more", 40), r"at answer_start 40 is outside its context"),
    (_qa("q9", "", 4), r"its answer '' at answer_start 4 is empty"),
    ({"id": "q9", "question": "?", "answers": [{"text": "fox"}]},
     r"training question 'q9': its answer has no \"answer_start\""),
])
def test_training_questions_without_a_usable_answer_are_refused(tmp_path, qa, message):
    path = tmp_path / "train.json"
    path.write_text(json.dumps({"data": [{"paragraphs": [{"context": CONTEXT, "qas": [qa]}]}]}))
    with pytest.raises(S.SquadDataError, match=message) as error:
        build_features(str(path), None, 64, 32, 16, True)
    assert str(error.value).startswith(f"{path}: ")
    assert [q["id"] for q in S.questions(S.load_dataset(str(path)))] == ["q9"]  # evaluation


def _file(qas_of_paragraphs, **top):
    return dict({"version": "1.1", "data": [
        {"title": f"t{a}", "paragraphs": [{"context": CONTEXT, "qas": qas} for qas in article]}
        for a, article in enumerate(qas_of_paragraphs)]}, **top)


def _drop(value, *keys):
    """`value` with the dict at the path `keys[:-1]` missing `keys[-1]`."""
    for key in keys[:-1]:
        value = value[key]
    del value[keys[-1]]


GOOD = [[[_qa("a", "fox", 16)], [_qa("b", "dog", 40), _qa("c", "cat", 0)]], [[_qa("d")]]]
BAD_SQUAD_FILES = [
    # (what is done to a good file, the error after "<file>: ")
    (lambda d: _drop(d, "data"), r'no "data" list at the top level'),
    (lambda d: d.update(data={"paragraphs": []}), r'no "data" list at the top level'),
    (lambda d: _drop(d, "data", 0, "paragraphs", 1, "qas", 0, "id"),
     r"data\[0\]\.paragraphs\[1\]\.qas\[0\] has no 'id'\.$"),
    (lambda d: _drop(d, "data", 0, "paragraphs", 1, "qas", 1, "question"),
     r"data\[0\]\.paragraphs\[1\]\.qas\[1\] has no 'question' \(question id 'c'\)\.$"),
    (lambda d: _drop(d, "data", 1, "paragraphs", 0, "context"),
     r"data\[1\]\.paragraphs\[0\] has no 'context'\.$"),
    (lambda d: _drop(d, "data", 1, "paragraphs"), r"data\[1\] has no 'paragraphs'\.$"),
    (lambda d: d["data"][1]["paragraphs"][0]["qas"][0].update(id="b"),
     r"question id 'b' is given twice \(data\[0\]\.paragraphs\[1\]\.qas\[0\] and "
     r"data\[1\]\.paragraphs\[0\]\.qas\[0\]\); predictions are keyed by id"),
    (lambda d: (d["data"][0]["paragraphs"][0]["qas"][0].update(id=7),
                d["data"][1]["paragraphs"][0]["qas"][0].update(id="7")),
     r"question id '7' is given twice"),  # one key "7" in predictions.json
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][0].update(id=None),
     r"data\[0\]\.paragraphs\[0\]\.qas\[0\]\.id is NoneType, not str or int\.$"),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][0].update(answers="fox"),
     r"qas\[0\]\.answers is str, not list \(question id 'a'\)"),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][0]["answers"][0].pop("text"),
     r"qas\[0\]\.answers\[0\] has no 'text' \(question id 'a'\)"),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][0]["answers"][0].update(answer_start="16"),
     r"answers\[0\]\.answer_start is str, not int \(question id 'a'\)"),
    (lambda d: d["data"][0]["paragraphs"][1]["qas"][0].update(is_impossible="false"),
     r"qas\[0\]\.is_impossible is str, not bool \(question id 'b'\)"),
    (lambda d: d["data"][0]["paragraphs"].__setitem__(0, "text"),
     r"data\[0\]\.paragraphs\[0\] is str, not an object"),
]


@pytest.mark.parametrize("damage, message", BAD_SQUAD_FILES)
def test_a_malformed_squad_file_is_named_with_where(tmp_path, damage, message):
    """One `SquadDataError` (a ValueError: the commands print it as one line) naming the file,
    the JSON path and the question id, not a KeyError; the same from inside a zip."""
    data = _file(json.loads(json.dumps(GOOD)))
    assert len(S.questions(S.check_dataset(json.loads(json.dumps(data)), "x"))) == 4
    damage(data)
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(data))
    with pytest.raises(S.SquadDataError, match=message) as error:
        S.load_dataset(str(path))
    assert str(error.value).startswith(f"{path}: ")
    with zipfile.ZipFile(tmp_path / "dev.zip", "w") as archive:
        archive.writestr("dev.json", json.dumps(data))
    with pytest.raises(S.SquadDataError, match=message) as error:
        S.load_dataset(str(tmp_path / "dev.zip"))
    assert str(error.value).startswith(f"{tmp_path / 'dev.zip'}: ")


def test_unreadable_squad_files_are_named(tmp_path):
    path = tmp_path / "train-v1.1.json"
    path.write_text('{"data": [')
    with pytest.raises(S.SquadDataError) as error:
        S.load_dataset(str(path))
    assert str(error.value) == (f"{path}: not JSON (line 1, column 11: Expecting value).")
    path.write_bytes(b'{"data": ["\xff"]}')
    with pytest.raises(S.SquadDataError, match=r"train-v1.1.json: not UTF-8"):
        S.load_dataset(str(path))
    archive_path = tmp_path / "squad.zip"
    with zipfile.ZipFile(archive_path, "w") as archive:
        archive.writestr("README.txt", "no json here")
        archive.writestr("__MACOSX/._train.json", "resource fork")
    with pytest.raises(S.SquadDataError) as error:
        S.load_dataset(str(archive_path))
    assert str(error.value) == f"{archive_path}: expected one SQuAD .json inside, found []"
    with zipfile.ZipFile(archive_path, "w") as archive:
        archive.writestr("train.json", '{"data": [}')
    with pytest.raises(S.SquadDataError) as error:
        S.load_dataset(str(archive_path))
    assert str(error.value).startswith(f"{archive_path}:train.json: not JSON (line 1")
    (tmp_path / "text.zip").write_text("not a zip")
    with pytest.raises(S.SquadDataError, match=r"text.zip: not a zip file"):
        S.load_dataset(str(tmp_path / "text.zip"))
    assert issubclass(S.SquadDataError, ValueError)


def test_windows_follow_the_official_stride():
    assert windows(10, 4, 3) == [(0, 4), (3, 4), (6, 4)]
    assert windows(10, 4, 2) == [(0, 4), (2, 4), (4, 4), (6, 4)]
    assert windows(3, 8, 2) == [(0, 3)]
    assert windows(9, 4, 8) == [(0, 4), (4, 4), (8, 1)]  # stride beyond the window: contiguous
    with pytest.raises(ValueError, match=r"raise --max_seq_length"):
        windows(5, 0, 2)
    with pytest.raises(ValueError, match=r"--doc_stride must be a positive integer"):
        windows(5, 4, 0)


def test_bad_windowing_flags_are_named(sample_vocab):
    """A negative --max_query_length (which would silently drop the question's last pieces), a
    zero --doc_stride and a question that fills --max_seq_length each name the flag to change
    (and the question)."""
    from albert_tf.tasks.squad import question_features

    tokenizer = Tokenizer(sample_vocab)
    context = align_context("Tom worked while Ben watched the river all day.", tokenizer)
    question = {"id": "q1", "question": "Who watched the river while Tom worked all day?",
                "answers": ["Ben"], "answer_starts": [17], "is_impossible": False}
    (feature,) = question_features(question, context, tokenizer, 64, 8, 64, 1, True)
    assert feature["input_ids"][feature["start_positions"][0]] == \
        context.ids[context.piece_span(17, 20)[0]]
    with pytest.raises(ValueError, match=r"--max_query_length must be a non-negative integer"):
        question_features(question, context, tokenizer, 64, 8, -1, 1, True)
    with pytest.raises(ValueError, match=r"--doc_stride must be a positive integer"):
        question_features(question, context, tokenizer, 64, 0, 64, 1, True)
    with pytest.raises(ValueError, match=r"question 'q1' \(\d+ pieces\) leaves no context piece "
                                         r"in --max_seq_length"):
        question_features(question, context, tokenizer, 8, 8, 64, 1, True)


def _official_is_max_context(doc_spans, cur_span_index, position):
    """google-research/albert squad_utils `_check_is_max_context`, as written there."""
    best_score, best_span_index = None, None
    for span_index, (start, length) in enumerate(doc_spans):
        end = start + length - 1
        if position < start or position > end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score, best_span_index = score, span_index
    return cur_span_index == best_span_index


@pytest.mark.parametrize("pieces,budget,stride", [(10, 4, 3), (10, 4, 2), (37, 8, 3),
                                                  (300, 61, 17), (5, 8, 2), (64, 16, 16)])
def test_max_context_is_the_official_rule(pieces, budget, stride):
    """The windows' `max_context` flags (`windows_in_graph`: the records' and the SavedModel's
    one definition) are the official `_check_is_max_context` for every piece of every window,
    for two questions of a batch at once."""
    import tensorflow as tf

    from albert_tf.tasks.squad import windows_in_graph

    spans = windows(pieces, budget, stride)
    official = [[_official_is_max_context(spans, i, start + j) for j in range(length)]
                for i, (start, length) in enumerate(spans)]
    assert sum(map(sum, official)) == pieces  # each piece has exactly one window
    query = tf.ragged.constant([[7] * (64 - budget - 3), [9] * (64 - budget - 3)])
    context = tf.ragged.constant([list(range(10, 10 + pieces)), list(range(10, 13))])
    got = windows_in_graph(query, context, 64, stride)["max_context"].numpy()
    first = [row[:length].tolist() for row, (_, length) in zip(got, spans)]
    assert first == official and got[len(spans)][:3].tolist() == [True] * 3


def test_an_answer_starts_where_its_window_has_the_most_context():
    """`best_spans` skips starts outside their window of maximum context (the official
    `token_is_max_context` rule), however high their logits."""
    from albert_tf.tasks.squad.decoding import best_spans

    offset, length = 3, 6
    start_logits = np.zeros(12, np.float32)
    end_logits = np.zeros(12, np.float32)
    start_logits[offset + 1], end_logits[offset + 2] = 5.0, 5.0  # the best span: pieces 1..2
    start_logits[offset + 4] = 3.0
    end_logits[offset + 4] = 3.0
    feature = {"offset": offset, "window": (0, length), "max_context": [True] * length}
    assert best_spans(start_logits, end_logits, feature, 4, 5)[0][1:] == (1, 2)
    feature["max_context"] = [True, False, True, True, True, True]
    assert best_spans(start_logits, end_logits, feature, 4, 5)[0][1:] == (4, 4)


@pytest.mark.needs_shared("data/squad")
@pytest.mark.slow
def test_a_tiny_model_learns_a_squad_slice(tmp_path, sample_vocab):
    """Heads, labels, windows and decoding connect: 22 questions of two dev articles, contexts
    cut into windows (stride 24), learned to a high official F1 on the same questions. The
    bound is the spread over seeds and CPUs, not one run's luck: seeds 1-6 on an Intel Xeon
    gave F1 95.5, 86.4, 95.5, 81.8, 90.9, 95.5 (each question is 4.5 points of it); seed 2
    gave 90 or more on an AMD EPYC. A wrong label, window or decoding join learns nothing."""
    from albert_tf import AlbertConfig
    from albert_tf.tasks.squad import SquadTask, question_features, write_features
    from albert_tf.training.train_lib import TrainingConfig, TrainingRun

    tokenizer = Tokenizer(sample_vocab)
    data = S.load_dataset(os.path.join(SQUAD_DIR, "dev-v1.1.json.zip"))
    paragraphs = [p for article in data[:2] for p in article["paragraphs"][:2]]
    for p in paragraphs:
        p["qas"] = p["qas"][:6]
    dataset = [{"title": "slice", "paragraphs": paragraphs}]
    contexts, features = {}, []
    for q in S.questions(dataset):
        context = align_context(q["context"], tokenizer)
        contexts[q["id"]] = context
        features += question_features(q, context, tokenizer, 128, 64, 24,
                                      1000 * len(features), is_training=True)
    assert len(S.questions(dataset)) == 22 and len(features) > 44  # several windows each
    write_features(features, str(tmp_path / "train.tfrecord"), 128)
    config = AlbertConfig(vocab_size=8000, embedding_size=16, hidden_size=32,
                          num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
                          max_position_embeddings=128)
    task = SquadTask(config, 128)
    task.evaluation = (dataset, features, contexts)
    cfg = TrainingConfig(albert_config=config, input_file=str(tmp_path / "train.tfrecord"),
                         output_dir=str(tmp_path / "run"), max_seq_length=128,
                         train_batch_size=16, eval_batch_size=len(features),
                         optimizer="adamw", learning_rate=3e-3, num_train_steps=300,
                         num_warmup_steps=20, save_checkpoints_steps=300,
                         iterations_per_loop=100, seed=2, shuffle_window=256, verbose=False,
                         do_eval=True, max_eval_steps=10)
    metrics = TrainingRun(task, cfg).run()["eval"]
    print(f"\nSQuAD slice (22 questions, {len(features)} windows) after 300 steps: "
          f"EM {metrics['exact_match']:.1f}, F1 {metrics['f1']:.1f}")
    assert metrics["examples"] == len(features)
    assert metrics["f1"] >= 75.0


@pytest.mark.needs_shared("data/squad")
@pytest.mark.slow
def test_run_squad_v1_command_line(tmp_path, sample_vocab):
    """The official command line on a SQuAD slice: predictions.json in the official format for
    every question, eval_results.json from the official evaluator."""
    paragraphs, config = _command_line_slice(tmp_path, "dev-v1.1.json.zip", "1.1")
    args = _train_and_predict_flags(tmp_path, config, sample_vocab, 2, "squad")
    proc = run_command("albert_tf.run_squad_v1", *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    questions = S.questions([{"paragraphs": paragraphs}])
    # Steps counted in questions, as official: int(questions / batch 8 * 2 epochs).
    assert f"train: {len(questions)} questions in " in proc.stdout
    assert f"; {int(len(questions) / 8 * 2)} steps" in proc.stdout, proc.stdout[:500]
    predictions = json.load(open(tmp_path / "out" / "predictions.json"))
    assert set(predictions) == {q["id"] for q in questions}
    for q in questions:  # every answer is a span of its own context
        assert predictions[q["id"]] in q["context"]
    results = json.load(open(tmp_path / "out" / "eval_results.json"))
    assert results["questions"] == len(questions)
    # The official runner's procedure: the checkpoint evaluated (here the last, step 13), the
    # best by f1 predicts; its step beside the official evaluator's scores.
    assert results == dict(S.evaluate_v1([{"paragraphs": paragraphs}], predictions),
                           questions=len(questions), features=results["features"],
                           global_step=int(len(questions) / 8 * 2))
    # --export_dir: the SavedModel answers raw text as predictions.json does.
    _assert_export_answers(tmp_path / "exports" / "squad" / "1", questions, predictions)
    # --export_dir alone (the official run_squad_v1.py's action): the run's model, exported
    # again, answers the same.
    proc = run_command("albert_tf.run_squad_v1", *args[4:10], *WINDOW_FLAGS, "--export_dir",
                       str(tmp_path / "exports" / "alone"), process=True)  # `python -m`, once
    assert proc.returncode == 0, proc.stderr[-3000:]
    _assert_export_answers(tmp_path / "exports" / "alone" / "1", questions, predictions)


@pytest.mark.needs_shared("data/squad")
@pytest.mark.slow
def test_run_squad_v2_command_line_null_odds_and_best_threshold(tmp_path, sample_vocab):
    """SQuAD v2.0 through the official command line (BERT's null-score head, --v2_head
    null_score) on a slice with unanswerable questions, as the official runner: every saved
    checkpoint evaluated on --predict_file, the best by f1 predicts; eval_results.json holds the
    official headline (the threshold search, then the answers at its best F1 threshold scored
    again) and predictions.json those answers ("" exactly where the null odds reach the
    threshold); rerun with --null_score_diff_threshold, predictions.json is at that threshold;
    the feature files are reused."""
    paragraphs, config = _command_line_slice(tmp_path, "dev-v2.0.json.zip", "v2.0")
    dataset = [{"paragraphs": paragraphs}]
    questions = S.questions(dataset)
    assert 0 < sum(not q["answers"] for q in questions) < len(questions)
    out = tmp_path / "out"
    args = ["--predict_file", str(tmp_path / "slice.json"), "--albert_config_file", str(config),
            "--spm_model_file", sample_vocab, "--output_dir", str(out), "--do_predict",
            *WINDOW_FLAGS, "--v2_head", "null_score"]

    def run(*extra):
        proc = run_command("albert_tf.run_squad_v2", *args, *extra)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return (json.load(open(out / "predictions.json")),
                json.load(open(out / "null_odds.json")),
                json.load(open(out / "eval_results.json")))

    predictions, odds, results = run("--do_train", "--train_file", str(tmp_path / "train.json"),
                                     "--train_batch_size", "8", "--num_train_epochs", "3",
                                     "--learning_rate", "1e-3", "--iterations_per_loop", "10",
                                     "--save_checkpoints_steps", "3")
    assert set(predictions) == set(odds) == {q["id"] for q in questions}
    threshold = results["null_score_diff_threshold"]
    for q in questions:
        assert (predictions[q["id"]] == "") == (odds[q["id"]] >= threshold) or \
            odds[q["id"]] == float("inf")  # "" also where no span fits
        assert predictions[q["id"]] in q["context"]
    # The official headline: the answers at the threshold, scored with threshold 1.0.
    rescored = S.evaluate_v2(dataset, predictions, odds, 1.0)
    for key in ("exact", "f1", "total", "HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1"):
        assert results[key] == pytest.approx(rescored[key], abs=1e-9), key
    assert results["HasAns_total"] + results["NoAns_total"] == len(questions)
    assert set(results["threshold_search"]) == set(S.SEARCH_KEYS)
    assert results["threshold_search"]["best_f1_thresh"] == threshold
    # Every saved checkpoint evaluated (every third step and the last); the best by f1
    # predicted.
    steps = sorted(int(p.name[len("eval_results_step_"):-5])
                   for p in out.glob("eval_results_step_*.json"))
    assert len(steps) >= 2 and steps == sorted({*range(3, steps[-1] + 1, 3), steps[-1]})
    f1 = {s: json.load(open(out / f"eval_results_step_{s}.json"))["f1"] for s in steps}
    assert results["global_step"] == max(steps, key=lambda s: (f1[s], -s))
    assert results["f1"] == pytest.approx(f1[results["global_step"]], abs=1e-4)
    stamp = os.stat(out / "predict.tfrecord").st_mtime_ns
    again, odds_again, at = run("--null_score_diff_threshold", "0.5")
    assert odds_again == odds and os.stat(out / "predict.tfrecord").st_mtime_ns == stamp
    assert all((again[q] == "") == (odds[q] >= 0.5) for q in again if odds[q] != float("inf"))
    assert at["at_null_score_diff_threshold"]["threshold"] == 0.5
    assert at["at_null_score_diff_threshold"]["f1"] == pytest.approx(
        S.evaluate_v2(dataset, again, odds, 1.0)["f1"], abs=1e-9)
    assert at["f1"] == pytest.approx(results["f1"], abs=1e-9)  # the headline is the official
    # A file at a shard name the named --train_feature_file would be written as is someone
    # else's: refused, untouched.
    (tmp_path / "ff").mkdir()
    stray = tmp_path / "ff" / "feat-00003-of-00008.tfrecord"
    stray.write_text("not ours")
    proc = run_command("albert_tf.run_squad_v2", *args, "--do_train", "--train_file",
                       str(tmp_path / "train.json"), "--learning_rate", "1e-3",
                       "--train_feature_file", str(tmp_path / "ff" / "feat.tfrecord"),
                       process=True)  # `python -m` itself, once
    assert proc.returncode != 0 and stray.read_text() == "not ours"
    assert f"{stray} exists and was not made from this run's inputs" in proc.stderr, \
        proc.stderr[-2000:]


def test_answer_class_model_beam_is_its_conditioned_end_and_masks_the_question():
    """`AlbertSquadV2` (official v2 model): starts and ends only in the context or at [CLS]
    (question, [SEP] and padding get probability 0); the beam's end log-probabilities for a
    start are exactly the end distribution conditioned on that start (the training path);
    every weight has its official name."""
    import tensorflow as tf

    from albert_tf.models.task_models import AlbertSquadV2
    from conftest import assert_spread, randomize, tiny_config

    model = AlbertSquadV2(tiny_config(initializer_range=0.2), start_n_top=3, end_n_top=4)
    randomize(model, seed=5)
    ids = np.array([[2, 10, 11, 3, 20, 21, 22, 23, 3, 0, 0],
                    [2, 12, 3, 30, 31, 32, 3, 0, 0, 0, 0]], np.int32)
    segments = np.zeros_like(ids)
    segments[0, 4:9], segments[1, 3:7] = 1, 1
    inputs = {"input_ids": ids, "input_mask": (ids > 0).astype(np.int32),
              "segment_ids": segments}
    beam = model(inputs)
    allowed = [{0, 4, 5, 6, 7}, {0, 3, 4, 5}]
    for row in range(2):
        starts = beam["start_top_index"].numpy()[row]
        assert set(starts.tolist()) <= allowed[row]
    assert_spread(beam["cls_logits"].numpy()[:1], beam["cls_logits"].numpy()[1:], 1e-6)
    for i in range(3):
        conditioned = model(dict(inputs, start_positions=beam["start_top_index"][:, i]),
                            training=True)
        probs = np.exp(conditioned["end_log_probs"].numpy())
        for row in range(2):
            np.testing.assert_allclose(probs[row, sorted(allowed[row])].sum(), 1.0, atol=1e-5)
            ends = beam["end_top_index"].numpy()[row, 4 * i:4 * i + 4]
            np.testing.assert_allclose(
                conditioned["end_log_probs"].numpy()[row, ends],
                beam["end_top_log_probs"].numpy()[row, 4 * i:4 * i + 4], atol=1e-5)
            start_probs = np.exp(conditioned["start_log_probs"].numpy()[row])
            assert start_probs[sorted(set(range(11)) - allowed[row])].max() == 0.0
    names = [w.official_name for w in model.official_weights()]
    assert len(names) == len(set(names)) == len(model.weights)
    assert {"start_logits/dense/kernel", "end_logits/dense_0/kernel",
            "end_logits/LayerNorm/gamma", "end_logits/dense_1/bias",
            "answer_class/dense_0/kernel", "answer_class/dense_1/kernel"} <= set(names)
    assert not tf.math.reduce_any(tf.math.is_nan(beam["end_top_log_probs"]))


def test_beam_decoding_keeps_the_official_valid_spans():
    """`best_beam_spans`: of the start x end beam, spans inside the window's context, starting
    at a max-context piece, end not before start, at most max_answer_length pieces, ranked by
    start + end log-probability; `predict_answers_v2` answers "" when the smallest
    cls_logits of a question's windows exceeds the threshold."""
    from albert_tf.tasks.squad.decoding import best_beam_spans, predict_answers_v2

    feature = {"offset": 4, "window": (10, 5), "max_context": [True, True, False, True, True],
               "id": "q"}
    # Three starts, two ends each: start 5 (piece 11) ends 7 and 3 (in the question); start 0
    # ([CLS]) is no span; start 6 (piece 12) is not its window of maximum context.
    outputs = {"start_top_index": [5, 0, 6], "start_top_log_probs": [-0.1, -0.5, -1.0],
               "end_top_index": [7, 3, 5, 5, 6, 8],
               "end_top_log_probs": [-0.2, -0.1, -0.3, -0.1, -0.4, -0.1], "cls_logits": 0.3}
    assert best_beam_spans(outputs, feature, max_answer_length=3) == [
        (pytest.approx(-0.3), 11, 13)]
    assert best_beam_spans(outputs, feature, max_answer_length=2) == []
    feature["max_context"][2] = True  # now start 6 counts: ends 6 and 8
    assert best_beam_spans(outputs, feature, max_answer_length=3) == [
        (pytest.approx(-0.3), 11, 13), (pytest.approx(-1.1), 12, 14),
        (pytest.approx(-1.4), 12, 12)]
    feature["max_context"][2] = False

    class Context:
        @staticmethod
        def text_of(first, last):
            return f"pieces {first}-{last}"

    rows = {k: np.array([v, v]) for k, v in outputs.items()}
    rows["cls_logits"] = np.array([0.3, -0.2])
    features = [feature, dict(feature, id="q")]
    answers, odds = predict_answers_v2(features, rows, {"q": Context}, 3, null_threshold=0.0)
    assert odds == {"q": pytest.approx(-0.2)} and answers == {"q": "pieces 11-13"}
    answers, _ = predict_answers_v2(features, rows, {"q": Context}, 3, null_threshold=-0.5)
    assert answers == {"q": ""}


@pytest.mark.needs_shared("data/squad")
@pytest.mark.slow
def test_run_squad_v2_with_the_official_answer_class_head(tmp_path, sample_vocab):
    """`run_squad_v2` (the official model by default, beam 3 x 3): trains on a
    slice of the bundled v2.0 dev set with unanswerable questions, predicts every question,
    writes the official evaluator's scores of predictions.json and null_odds.json, and exports
    a SavedModel that answers the raw questions as predictions.json does."""
    paragraphs, config = _command_line_slice(tmp_path, "dev-v2.0.json.zip", "v2.0")
    dataset = [{"paragraphs": paragraphs}]
    questions = S.questions(dataset)
    out = tmp_path / "out"
    proc = run_command("albert_tf.run_squad_v2",
                       *_train_and_predict_flags(tmp_path, config, sample_vocab, 3, "v2"),
                       "--start_n_top", "3", "--end_n_top", "3", "--dropout_prob", "0.1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    predictions = json.load(open(out / "predictions.json"))
    odds = json.load(open(out / "null_odds.json"))
    results = json.load(open(out / "eval_results.json"))
    assert set(predictions) == set(odds) == {q["id"] for q in questions}
    for q in questions:
        assert predictions[q["id"]] in q["context"]
    threshold = results["null_score_diff_threshold"]
    for q in questions:
        assert (predictions[q["id"]] == "") == (odds[q["id"]] >= threshold)
    rescored = S.evaluate_v2(dataset, predictions, odds, 1.0)
    for key in ("exact", "f1", "HasAns_f1", "NoAns_f1"):
        assert results[key] == pytest.approx(rescored[key], abs=1e-9), key
    print(f"\nanswer-class head on the slice: {results}")
    # The export answers raw-text questions as predictions.json (the beam decoded in-graph).
    _assert_export_answers(tmp_path / "exports" / "v2" / "1", questions, predictions)


def _official_answer(features, logits, contexts, n_best, max_answer_length):
    """The official ALBERT v1 decoding (`accumulate_predictions_v1` + `write_predictions_v1`,
    squad_utils.py), written out as the judge: per window, `_get_best_indexes` over every
    position of the logits (padding included: a stable sort, highest first), the start and end
    index pairs kept where the start is in a window of maximum context, the end not before it,
    neither past the window, at most `max_answer_length` pieces; over all windows the highest
    start + end logit wins, its text `.strip()`ped. Returns ({id: text}, {id: null score})."""
    def best_indexes(values):
        ranked = sorted(enumerate(values), key=lambda x: x[1], reverse=True)
        return [i for i, _ in ranked[:n_best]]

    prelim, null = {}, {}
    for feature, (start, end) in zip(features, logits):
        qid, doc_offset = feature["id"], feature["offset"]
        window_start, length = feature["window"]
        null[qid] = min(null.get(qid, float("inf")), float(start[0] + end[0]))
        for s in best_indexes(start):
            for e in best_indexes(end):
                if s - doc_offset >= length or e - doc_offset >= length:
                    continue
                if not (s >= doc_offset and feature["max_context"][s - doc_offset]):
                    continue  # token_is_max_context holds the window's pieces only
                if e < s or e - s + 1 > max_answer_length:
                    continue
                prelim.setdefault(qid, []).append(
                    (float(start[s] + end[e]), s - doc_offset + window_start,
                     e - doc_offset + window_start))
    # A question left without a valid span (the padding took the top places): the official v1
    # answers the nonce "empty"; we answer "" (both score 0 against a real answer).
    answers = {qid: "" for qid in null}
    for qid, candidates in prelim.items():
        score, first, last = sorted(candidates, key=lambda c: c[0], reverse=True)[0]
        answers[qid] = contexts[qid].text_of(first, last).strip()
    return answers, null


@pytest.mark.needs_shared("data/squad")
@pytest.mark.parametrize("archive", ["dev-v1.1.json.zip", "dev-v2.0.json.zip"])
def test_decoding_is_the_official_n_best_over_every_position(archive, sample_vocab):
    """Every dev question (10,570 of v1.1, 11,873 of v2.0; their windows at the official
    max_seq_length 384, stride 128: most paragraphs fit one window, padded), logits drawn at
    random at every position as an untrained model's: `predict_answers` gives the official
    decoding's answer to every question and its null score (the null-score v2 path ranks as
    v1). Ranking only the real positions, as before, gives other answers (`rank_padding=False`,
    the export's rule), and so does leaving the surrounding whitespace on."""
    from albert_tf.tasks.squad import predict_answers
    from albert_tf.tasks.squad.decoding import best_spans
    from albert_tf.tasks.squad.features import questions_features

    tok = Tokenizer(sample_vocab)
    questions = S.questions(S.load_dataset(os.path.join(SQUAD_DIR, archive)))
    aligned, contexts = {}, {}
    for q in questions:
        if q["context"] not in aligned:
            aligned[q["context"]] = align_context(q["context"], tok)
        contexts[q["id"]] = aligned[q["context"]]
    features = questions_features(questions, [contexts[q["id"]] for q in questions], tok, 384,
                                  128, 64, 1000, False)
    rng = np.random.default_rng(7)
    logits = rng.normal(size=(len(features), 2, 384)).astype(np.float32)
    start, end = logits[:, 0], logits[:, 1]
    expected, expected_null = _official_answer(features, zip(start, end), contexts, 20, 30)
    answers, null_odds = predict_answers(features, start, end, contexts, 20, 30)
    assert answers == expected
    best = {}  # each question's best span over its windows, as `predict_answers` finds it
    for f, s, e in zip(features, start, end):
        spans = best_spans(s, e, f, 20, 30)
        if spans and (f["id"] not in best or spans[0][0] > best[f["id"]][0]):
            best[f["id"]] = spans[0]
    for qid, odds in null_odds.items():
        score = best[qid][0] if qid in best else float("-inf")
        assert odds == pytest.approx(expected_null[qid] - score, abs=1e-5) or not expected[qid]
    real_only, _ = predict_answers(features, start, end, contexts, 20, 30, rank_padding=False)
    counts = (len(questions), len(features), sum(real_only[q] != answers[q] for q in answers),
              sum(contexts[q].text_of(*best[q][1:]) != answers[q] for q in best),
              sum(not a for a in answers.values()))
    # (questions, windows, answers that differ ranking real positions only, answers stripped,
    # questions without a valid span)
    assert counts == {"dev-v1.1.json.zip": (10570, 11534, 542, 257, 104),
                      "dev-v2.0.json.zip": (11873, 13113, 580, 320, 67)}[archive]
