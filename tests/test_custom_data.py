"""Your own data: the table reader (CSV, TSV, JSON Lines), its errors, and `run_classifier
--task_name custom` end to end on a three-class sentence set made here (not GLUE)."""

import json
import os
import random
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (the exports' SentencePiece ops)

from albert_tf import (AlbertClassifier, AlbertConfig, AlbertTextClassifier,
                       AlbertTextPreprocessor)
from albert_tf import run_classifier as run_classifier_module
from albert_tf.commands.experiment import ExperimentConfig
from albert_tf.models.pretrainer import AlbertPretrainer
from albert_tf.records import example_of
from albert_tf.tasks import glue
from albert_tf.tasks.tables import TableError, read_table
from conftest import run_cli

TINY = dict(vocab_size=8000, embedding_size=16, hidden_size=32, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=40, max_position_embeddings=64)


def _write(path, data: bytes) -> str:
    with open(path, "wb") as f:
        f.write(data)
    return str(path)


# ---------------------------------------------------------------------------------------------
# The reader.
def test_csv_with_bom_crlf_quotes_and_separators_inside_fields(tmp_path):
    path = _write(tmp_path / "a.csv",
                  b'\xef\xbb\xbftext,label\r\n"a, b\r\nc",x\r\nplain "q" text,y\r\n\r\n'
                  b'"with ""quote""\tand tab",x')
    assert read_table(path) == (["text", "label"], [
        (2, {"text": "a, b\nc", "label": "x"}),
        (4, {"text": 'plain "q" text', "label": "y"}),
        (6, {"text": 'with "quote"\tand tab', "label": "x"})])


def test_tsv_quoted_tab_and_comma(tmp_path):
    path = _write(tmp_path / "a.tsv", b'sentence\tother\tlabel\n"a\tb"\t1\tx\nc, d\t"2\n3"\ty')
    assert read_table(path) == (["sentence", "other", "label"], [
        (2, {"sentence": "a\tb", "other": "1", "label": "x"}),
        (3, {"sentence": "c, d", "other": "2\n3", "label": "y"})])


def test_jsonl_numbers_as_text_crlf_and_blank_lines(tmp_path):
    path = _write(tmp_path / "a.jsonl", b'\xef\xbb\xbf{"text": "hi, \\"you\\"", "label": 2}\r\n\n'
                                        b'{"text": "yo\\tthere", "label": 10, "ok": true}')
    assert read_table(path) == (["text", "label"], [
        (1, {"text": 'hi, "you"', "label": "2"}),
        (3, {"text": "yo\tthere", "label": "10", "ok": "true"})])
    examples = glue.read_table_examples(path, "text")
    assert [(e.guid, e.text_a, e.label) for e in examples] == [
        ("train-0", 'hi, "you"', "2"), ("train-1", "yo\tthere", "10")]
    assert glue.label_set(examples) == ["2", "10"]  # integers in numeric order


def test_pairs_regression_and_a_test_file_without_labels(tmp_path):
    train = _write(tmp_path / "t.csv", b"q,p,score\nwho,me,1.5\nwhy, not,-2e-1\n")
    examples = glue.read_table_examples(train, "q", "p", "score", regression=True)
    assert [(e.text_a, e.text_b, e.label) for e in examples] == [("who", "me", 1.5),
                                                                 ("why", "not", -0.2)]
    test = _write(tmp_path / "test.tsv", b"q\tp\nwho\tme\n")
    examples = glue.read_table_examples(test, "q", "p", "score", split="test")
    assert [(e.guid, e.text_a, e.text_b, e.label) for e in examples] == [
        ("test-0", "who", "me", None)]
    assert glue.label_set(glue.read_table_examples(
        _write(tmp_path / "l.csv", b"t,l\na,b\nc,a\nd,b\n"), "t", label_column="l")) == ["a", "b"]


BAD_FILES = [
    ("a.csv", b"text,topic\nhi,x\n", dict(),
     "a.csv: line 1: no column 'label' (--label_column); the file's columns are "
     "['text', 'topic']."),
    ("a.tsv", b"sentence\tlabel\nhi\tx\n", dict(text_a_column="text"),
     "a.tsv: line 1: no column 'text' (--text_a_column); the file's columns are "
     "['sentence', 'label']."),
    ("a.jsonl", b'{"text": "a", "label": "x"}\n{"txt": "b", "label": "x"}\n', dict(),
     "a.jsonl: line 2: no column 'text' (--text_a_column); the line's columns are "
     "['txt', 'label']."),
    ("a.csv", b"text,label\nhi,x\n  ,y\n", dict(),
     "a.csv: line 3, column 'text': the text is empty; fill it in or remove the row."),
    ("a.jsonl", b'{"text": "a", "label": "x"}\n{"text": null, "label": "x"}\n', dict(),
     "a.jsonl: line 2, column 'text': the text is empty; fill it in or remove the row."),
    ("a.csv", b"text,label\nhi,x\nho,\n", dict(),
     "a.csv: line 3, column 'label': the label is empty (--label_column); give every row a "
     "label, or remove the row."),
    ("a.jsonl", b'{"text": "a", "label": "x"}\n{"text": "b", "label": "x"\n', dict(),
     "a.jsonl: line 2, column 27: not valid JSON (Expecting ',' delimiter); each line must be "
     "one JSON object."),
    ("a.jsonl", b'["a", "x"]\n', dict(),
     "a.jsonl: line 1 is a JSON list, not an object; each line must be one object of column: "
     'value, e.g. {"text": "...", "label": "..."}.'),
    ("a.csv", b"text,label\nhi,x\nhi, there,y\n", dict(),
     "a.csv: line 3 has 3 field(s) and the header (line 1) has 2 ['text', 'label']: quote a "
     "field that holds a comma. The row: ['hi', ' there', 'y']"),
    ("a.tsv", b"text\tlabel\n\"open\tx\nmore\n", dict(),
     "a.tsv: line 2: unexpected end of data (a quote opened and not closed? a field with the "
     "separator, a quote or a line break must be quoted, a quote inside it doubled: "
     '"say ""hi""").'),
    ("a.csv", b"text,text\nhi,x\n", dict(),
     "a.csv: line 1: the header names column 'text' twice (columns 1 and 2)."),
    ("a.csv", b"text,label\n\n", dict(), "a.csv holds no rows below its header."),
    ("a.csv", b"text,label\nh\xe9,x\n", dict(),
     "a.csv: line 2 is not valid UTF-8 (byte 0xe9 at column 2); save the file as UTF-8."),
    ("a.txt", b"text,label\nhi,x\n", dict(),
     "a.txt: the format is taken from the extension, and '.txt' is not one of .csv, .jsonl, "
     ".ndjson, .tab, .tsv: rename the file (.csv comma-separated, .tsv tab-separated, .jsonl "
     "one JSON object per line)."),
    ("a.csv", b"text,score\nhi,high\n", dict(label_column="score", regression=True),
     "a.csv: line 2, column 'score': label 'high' is not a finite number, and a regression "
     "task (--num_labels 1) predicts numbers."),
    ("a.jsonl", b'{"text": "a", "label": "x", "text": "b"}\n', dict(),
     "a.jsonl: line 1 gives the key 'text' twice; give each column once (a CSV header may not "
     "name a column twice either)."),
    ("a.jsonl", b'{"text": {"a": 1}, "label": "x"}\n', dict(),
     "a.jsonl: line 1, column 'text': a JSON object; a text is a string (or a number)."),
    ("a.jsonl", b'{"text": "a", "label": ["x"]}\n', dict(),
     "a.jsonl: line 1, column 'label': a JSON array; a label is a string, a number or a "
     "boolean."),
    ("a.csv", b"text,label\nhi,x\n", dict(label_column="text"),
     "a.csv: --text_a_column and --label_column both name the column 'text': the model would "
     "be given its label as its text; name different columns."),
    ("a.jsonl", b'{"q": "a", "label": "x"}\n', dict(text_a_column="q", text_b_column="q"),
     "a.jsonl: --text_a_column and --text_b_column both name the column 'q': each pair would "
     "be one text twice; name different columns."),
    ("dev.csv", b"text,label\nhi,x\nho,z\n", dict(labels=("x", "y"), split="dev"),
     "dev.csv: line 3, column 'label': label 'z' is not one of the 2 labels ['x', 'y'] of the "
     "training file; a model predicts only the labels it was trained on (fix the label, or add "
     "examples of it to the training file)."),
]


@pytest.mark.parametrize("name,data,kwargs,message", BAD_FILES,
                         ids=[f"{i}-{b[0]}" for i, b in enumerate(BAD_FILES)])
def test_bad_files_give_the_file_line_and_column(tmp_path, name, data, kwargs, message):
    path = _write(tmp_path / name, data)
    kwargs = dict({"text_a_column": "text"}, **kwargs)
    with pytest.raises((TableError, glue.GlueDataError)) as error:
        glue.read_table_examples(path, **kwargs)
    assert str(error.value) == f"{tmp_path}/{message}"


def test_custom_task_labels_metrics_and_lookup():
    binary = glue.custom_task(["neg", "pos"], "text")
    assert glue.metric_names(binary) == ("accuracy", "f1", "matthews_corr")
    assert glue.main_metric(binary) == "accuracy"
    three = glue.custom_task(["a", "b", "c"], "text")
    assert glue.metric_names(three) == ("accuracy",) and glue.main_metric(three) == "accuracy"
    regression = glue.custom_task(None, "text")
    assert glue.metric_names(regression) == ("pearson", "spearman")
    assert glue.main_metric(regression) == "pearson" and regression.num_labels == 1
    assert glue.main_metric("cola") == "matthews_corr"  # GLUE's tasks unchanged
    with pytest.raises(glue.GlueDataError, match=r"Unknown GLUE task 'mydata'; choose one of "
                                                 r".*, or 'custom' for your own CSV, TSV or "
                                                 r"JSON Lines files"):
        glue.get_task("mydata")
    with pytest.raises(glue.GlueDataError, match=r"needs 2 or more labels; the training file "
                                                 r"has \['only'\]"):
        glue.custom_task(["only"], "text")


def _examples(labels):
    return [glue.InputExample(f"train-{i}", "t", None, label) for i, label in enumerate(labels)]


LABEL_ORDERS = [
    # integers (ASCII digits, a sign allowed) by value, equal values by their text; then the
    # rest by text: "1_0" and the Arabic-Indic "\u0661" are not integers here (int() takes them)
    (["1", "01", "+1", "1_0", "10", "\u0661", "2"],
     ["+1", "01", "1", "2", "10", "1_0", "\u0661"]),
    (["00", "a", "-1", "B", "0", "1"], ["-1", "0", "00", "1", "B", "a"]),
    (["10", "9", "x", "09", "-0"], ["-0", "09", "9", "10", "x"]),
]


@pytest.mark.parametrize("labels,expected", LABEL_ORDERS)
def test_the_label_order_is_one_whatever_the_files_order(labels, expected):
    """labels.json must not depend on the order of the rows nor on the hash seed (the set the
    labels are gathered in): 200 shuffles of the labels (each three times) sort alike."""
    rng = random.Random(0)
    for _ in range(200):
        shuffled = rng.sample(labels * 3, len(labels) * 3)
        assert glue.label_set(_examples(shuffled)) == expected


def test_numeric_labels_not_all_integers_are_named():
    """The labels a --train_file of scores has (every one a number, some not integers): what
    run_classifier refuses to train as classes without --num_labels."""
    assert glue.non_integer_numbers(["0.67", "4.24", "1", "-2e-1"]) == ["0.67", "4.24", "-2e-1"]
    assert glue.non_integer_numbers(["1", "2", "10"]) == []
    assert glue.non_integer_numbers(["0.5", "high"]) == []  # not all numbers: classes
    assert glue.non_integer_numbers(["1", "1.0"]) == ["1.0"]
    assert glue.non_integer_numbers(["nan", "1.5"]) == []  # "nan" is a word here


def test_jsonl_numbers_keep_their_text_and_unread_columns_may_hold_anything(tmp_path):
    """A JSON number is its text in the file (as a CSV field is): 1 and 1.0 are two labels,
    1e400 is "1e400" (not "inf"), a long integer keeps its digits; an object or array in a
    column no flag names is not an error."""
    path = _write(tmp_path / "a.jsonl",
                  b'{"text": 1e5, "label": 1, "meta": {"a": [1, {"b": 2}]}}\n'
                  b'{"text": 12345678901234567890, "label": 1.0, "meta": null}\n'
                  b'{"text": "c", "label": "1", "meta": [1]}\n{"text": "d", "label": 1e400}\n')
    examples = glue.read_table_examples(path, "text")
    assert [(e.text_a, e.label) for e in examples] == [
        ("1e5", "1"), ("12345678901234567890", "1.0"), ("c", "1"), ("d", "1e400")]
    assert glue.label_set(examples) == ["1", "1.0", "1e400"]
    with pytest.raises(glue.GlueDataError, match=r"line 4, column 'label': label '1e400' is "
                                                 r"not a finite number"):
        glue.read_table_examples(path, "text", regression=True)


def test_a_field_longer_than_the_csv_modules_limit_is_read(tmp_path):
    """csv's default field limit is 131,072 characters; JSON Lines has none, nor has CSV now.
    A quote left open is still reported at its line."""
    long = "word " * 40000  # 200,000 characters
    path = _write(tmp_path / "a.csv", f'text,label\n"{long}",x\nshort,y\n'.encode())
    assert read_table(path)[1] == [(2, {"text": long, "label": "x"}),
                                   (3, {"text": "short", "label": "y"})]
    path = _write(tmp_path / "b.tsv", f'text\tlabel\nok\tx\n"{long}\tx\nmore\ty\n'.encode())
    with pytest.raises(TableError, match=r"b.tsv: line 3: unexpected end of data \(a quote "
                                         r"opened and not closed\?"):
        read_table(path)


def test_a_test_files_labels_are_not_read(tmp_path):
    """Prediction needs no label: a test file's label column (a label the training file lacks,
    an empty one) is not read."""
    path = _write(tmp_path / "test.csv", b"text,label\na,zzz\nb,\n")
    task = glue.custom_task(["x", "y"], "text", files={"test": path})
    assert [(e.text_a, e.label) for e in glue.read_examples(task, path, "test")] == [
        ("a", None), ("b", None)]
    assert [e.label for e in glue.read_table_examples(path, "text", split="test",
                                                      labels=("x", "y"))] == [None, None]


def _exp(output_dir, **settings):
    """run_classifier's settings (an `ExperimentConfig`) of a custom run: `settings` given,
    the rest the flags' defaults."""
    task = dict(task_name="custom", train_file=None, dev_file=None, test_file=None,
                text_a_column="text", text_b_column=None, label_column="label", num_labels=0)
    trainer = dict(do_train=False, do_eval=False, do_predict=False, output_dir=str(output_dir),
                   export_dir=None)
    for name, value in settings.items():
        (task if name in task else trainer)[name] = value
    return ExperimentConfig.of("albert_tf.run_classifier", {**task, **trainer},
                               frozenset(settings) | {"task_name", "output_dir"})


def _trained(exp):
    """What a training run records in its --output_dir (`runner.record_config`)."""
    os.makedirs(exp.output_dir, exist_ok=True)
    exp.write(exp.output_dir)
    return run_classifier_module.custom_task(exp)


def test_a_later_run_takes_the_columns_and_num_labels_the_training_run_recorded(tmp_path):
    """--do_eval, --do_predict, --export_dir without the column flags use the ones the
    training run recorded (a pair-trained model is evaluated, predicted and exported on pairs);
    a column or --num_labels given otherwise is refused; a regression run is one again."""
    custom_task = run_classifier_module.custom_task
    train = _write(tmp_path / "train.csv", b"q,p,label,score\na,b,x,0.5\nc,d,y,1.5\n")
    run = tmp_path / "run"
    pairs = _trained(_exp(run, train_file=train, do_train=True, text_a_column="q",
                          text_b_column="p"))
    assert (pairs.a, pairs.b, pairs.label, pairs.labels) == ("q", "p", "label", ("x", "y"))
    for action in (dict(do_eval=True, dev_file=train), dict(do_predict=True, test_file=train),
                   dict(export_dir=str(tmp_path / "export"))):
        later = custom_task(_exp(run, **action))
        assert (later.a, later.b, later.label, later.labels) == ("q", "p", "label", ("x", "y"))
    assert custom_task(_exp(run, do_predict=True, test_file=train, text_b_column="p")).b == "p"
    for flag, value, shown, kept in (
            ("text_b_column", "other", "'other'", "'p'"),
            ("text_a_column", "text", "'text'", "'q'"),
            ("num_labels", 1, "1 (regression)", "0 (the training file's labels)")):
        with pytest.raises(ValueError) as error:
            custom_task(_exp(run, do_predict=True, test_file=train, **{flag: value}))
        assert str(error.value) == (
            f"--{flag} {shown}, and the run in {run} was trained with --{flag} {kept} "
            f"({run}/config.yaml): a model is used as it was trained; drop --{flag} (the "
            "recorded one is used; rename a file's column to match), or give another "
            "--output_dir.")
    regression = tmp_path / "regression"
    assert _trained(_exp(regression, train_file=train, do_train=True, label_column="score",
                         num_labels=1)).is_regression
    later = custom_task(_exp(regression, do_predict=True, test_file=train))
    assert later.is_regression and later.label == "score"
    with pytest.raises(ValueError) as error:
        custom_task(_exp(tmp_path / "none", do_predict=True, test_file=train))
    assert str(error.value) == (
        f"No labels: {tmp_path}/none holds no labels.json (a classification training run "
        "writes it; a regression run, --num_labels 1, writes none) and no config.yaml of a "
        "training run: give --train_file with --do_train, --num_labels 1 for regression, or "
        "the --output_dir of a training run.")


def test_scores_are_not_trained_as_classes_without_num_labels(tmp_path):
    """A training file whose labels are all numbers, some not integers (scores), is refused
    without --num_labels: --num_labels 1 is regression, --num_labels N (their count) keeps
    them as classes."""
    train = _write(tmp_path / "reg.csv", b"text,score\na,0.67\nb,4.24\nc,1\nd,0.67\n")
    with pytest.raises(ValueError) as error:
        run_classifier_module.custom_task(_exp(tmp_path / "a", train_file=train, do_train=True,
                                               label_column="score"))
    assert str(error.value) == (
        f"--train_file {train}: every label is a number, and 2 of the 3 distinct labels are "
        "not integers ('0.67', '4.24'): for a number to predict (regression) give --num_labels "
        "1; to train them as 3 classes, give --num_labels 3.")
    assert not os.path.exists(tmp_path / "a" / "labels.json")
    assert run_classifier_module.custom_task(_exp(
        tmp_path / "b", train_file=train, do_train=True, label_column="score",
        num_labels=1)).is_regression
    classes = run_classifier_module.custom_task(_exp(
        tmp_path / "c", train_file=train, do_train=True, label_column="score", num_labels=3))
    assert classes.labels == ("1", "0.67", "4.24")


def test_predict_of_a_table_path_that_names_no_file_is_an_error(tmp_path, sample_vocab):
    """A str ending in a table extension is a file's path in predict as in fit and evaluate:
    a typo is "No such file", never a text to classify; a list is text, whatever its end."""
    clf = AlbertTextClassifier(AlbertClassifier(AlbertConfig(**TINY), num_labels=2),
                               AlbertTextPreprocessor(sample_vocab, 16), labels=["a", "b"])
    clf.compile()
    typo = str(tmp_path / "tset.csv")
    for call in (clf.predict, clf.evaluate, clf.fit):
        with pytest.raises(TableError) as error:
            call(typo)
        assert str(error.value) == (
            f"No such file: {typo} (a str ending in .csv, .jsonl, .ndjson, .tab or .tsv is a "
            "file's path; to predict such a text, pass a list: predict([text])).")
    assert clf.predict(["my notes.csv"], verbose=0).shape == (1, 2)


# ---------------------------------------------------------------------------------------------
# run_classifier --task_name custom, end to end.
TOPICS = {
    "food": "bread soup cheese apples dinner kitchen baked spicy".split(),
    "sport": "football goal match team runner race coach stadium".split(),
    "weather": "rain snow storm cloudy sunny wind forecast thunder".split(),
}
FILLER = ("the a old new house river walked quietly under over table seven green letter "
          "morning station garden window paper stone city road music evening we they saw "
          "and then again today").split()


def _sentences(n, seed):
    """(sentence, topic) pairs: filler words with three cue words of the topic, the topics
    unevenly drawn (majority 0.45) so the majority class is a real baseline."""
    rng = np.random.default_rng(seed)
    names = sorted(TOPICS)
    out = []
    for _ in range(n):
        topic = names[rng.choice(3, p=[0.45, 0.3, 0.25])]
        words = list(rng.choice(FILLER, rng.integers(5, 11)))
        for cue in rng.choice(TOPICS[topic], 3, replace=False):
            words.insert(int(rng.integers(len(words) + 1)), str(cue))
        out.append((" ".join(words).capitalize() + ".", topic))
    return out


def test_a_directory_or_an_unknown_task_is_named_first(tmp_path, capsys):
    """Hostile pass: --train_file DIR said "'none' is not one of the extensions"; --task_name
    nope without --data_dir said --data_dir was required for the GLUE task nope."""
    with pytest.raises(TableError, match=f"^{tmp_path} is a directory; give a .csv"):
        read_table(str(tmp_path))
    capsys.readouterr()
    assert run_classifier("--task_name", "nope", "--albert_config_file", "a.json",
                          "--spm_model_file", "b.model", "--output_dir",
                          str(tmp_path / "out"), "--do_train") == 1
    assert "Unknown GLUE task 'nope'; choose one of" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def run_classifier(*args) -> int:
    """`python -m albert_tf.run_classifier ARGS` in this process (its `cli`, `run_cli`): the
    exit status."""
    return run_cli("albert_tf.run_classifier", *args)


@pytest.fixture(scope="module")
def custom_run(tmp_path_factory, sample_vocab):
    """run_classifier --task_name custom on a CSV train file, a TSV dev file and a JSON Lines
    test file without labels, from random weights: train, eval, predict, export."""
    tmp = tmp_path_factory.mktemp("custom")
    train, dev, test = _sentences(360, 1), _sentences(150, 2), _sentences(30, 3)
    with open(tmp / "train.csv", "w", encoding="utf-8", newline="") as f:
        f.write("id,sentence,topic\r\n")
        for i, (text, topic) in enumerate(train):
            f.write(f'{i},"{text}",{topic}\r\n')
    with open(tmp / "dev.tsv", "w", encoding="utf-8") as f:
        f.write("topic\tsentence\n" + "".join(f"{t}\t{s}\n" for s, t in dev))
    with open(tmp / "test.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"sentence": s}) + "\n" for s, _ in test)
    AlbertConfig(**TINY).to_json_file(tmp / "albert_config.json")
    out, export = tmp / "run", tmp / "exports" / "topics"
    common = ["--task_name", "custom", "--albert_config_file", str(tmp / "albert_config.json"),
              "--spm_model_file", sample_vocab, "--output_dir", str(out),
              "--text_a_column", "sentence", "--label_column", "topic",
              "--max_seq_length", "32", "--eval_batch_size", "50", "--predict_batch_size", "16"]
    status = run_classifier(
        *common, "--train_file", str(tmp / "train.csv"), "--dev_file", str(tmp / "dev.tsv"),
        "--test_file", str(tmp / "test.jsonl"), "--do_train", "--do_eval", "--do_predict",
        "--train_batch_size", "16", "--learning_rate", "5e-4", "--train_step", "1000",
        "--warmup_step", "100", "--save_checkpoints_steps", "1000", "--iterations_per_loop",
        "250", "--num_train_files", "1", "--random_seed", "3", "--export_dir", str(export))
    assert status == 0
    return dict(tmp=tmp, out=out, export=export, common=common, dev=dev, test=test)


@pytest.mark.slow
def test_custom_three_classes_beat_the_majority_and_answer_label_names(custom_run):
    """The command learns a three-class topic set from random weights well beyond its majority
    class (dev accuracy >= majority + 0.3; measured 1.000 against 0.427), writes the sorted
    labels, the metrics, predictions by label name, and an export whose `classify` answers the
    label names with the probabilities `--do_predict` wrote."""
    out, dev, test = custom_run["out"], custom_run["dev"], custom_run["test"]
    assert json.load(open(out / "labels.json")) == ["food", "sport", "weather"]
    results = json.load(open(out / "eval_results.json"))
    majority = max(np.mean([t == name for _, t in dev]) for name in TOPICS)
    print(f"\ncustom topics: dev accuracy {results['accuracy']:.3f}, majority {majority:.3f}")
    assert results["task"] == "custom" and results["examples"] == 150
    assert results["global_step"] == 1000 and "f1" not in results  # three classes: accuracy
    assert results["accuracy"] >= majority + 0.3
    rows = [json.loads(line) for line in open(out / "predictions.jsonl", encoding="utf-8")]
    assert [r["index"] for r in rows] == list(range(30))
    assert [r["text_a"] for r in rows] == [s for s, _ in test]
    assert sum(r["prediction"] == t for r, (_, t) in zip(rows, test)) >= 30 * (majority + 0.3)
    assert all(set(r["probabilities"]) == set(TOPICS) for r in rows)
    assert all(r["prediction"] == max(r["probabilities"], key=r["probabilities"].get)
               for r in rows)
    version = custom_run["export"] / "1"
    classify = tf.saved_model.load(str(version)).signatures["classify"]
    requests = [example_of({"text": s}) for s, _ in test]
    served = classify(inputs=tf.constant(requests))
    assert served["classes"].numpy()[0].tolist() == [b"food", b"sport", b"weather"]
    scores = served["scores"].numpy()
    written = np.array([[r["probabilities"][name] for name in sorted(TOPICS)] for r in rows])
    np.testing.assert_allclose(scores, written, atol=2e-5)
    # the run read back in Python reads its files by the columns the run recorded (it read a
    # column "text" and refused the test file)
    clf = AlbertTextClassifier.from_checkpoint(str(out))
    assert (clf.text_a_column, clf.text_b_column, clf.label_column) == ("sentence", None, "topic")
    np.testing.assert_allclose(clf.predict(str(custom_run["tmp"] / "test.jsonl")), written,
                               atol=2e-5)


@pytest.mark.slow
def test_a_refused_rerun_with_another_learning_rate_writes_nothing(custom_run, tmp_path, capsys):
    """A learning-rate sweep into a finished run's --output_dir, at another sequence length and
    evaluation batch (features that differ from the run's): refused, naming the learning rate,
    before any feature is written: every file of the run keeps its bytes and its time."""
    run = tmp_path / "run"
    shutil.copytree(custom_run["out"], run)

    def files():
        return {p.relative_to(run): (p.read_bytes(), p.stat().st_mtime_ns)
                for p in sorted(run.rglob("*")) if p.is_file()}

    before = files()
    assert {"train.tfrecord", "dev.tfrecord"} <= {str(p) for p in before}
    tmp, common = custom_run["tmp"], custom_run["common"]
    common = common[:common.index("--output_dir")] + ["--output_dir", str(run)] + common[
        common.index("--output_dir") + 2:common.index("--max_seq_length")]
    capsys.readouterr()
    assert run_classifier(
        *common, "--train_file", str(tmp / "train.csv"), "--dev_file", str(tmp / "dev.tsv"),
        "--do_train", "--do_eval", "--max_seq_length", "16", "--eval_batch_size", "25",
        "--train_batch_size", "16", "--learning_rate", "1e-3", "--train_step", "1000",
        "--warmup_step", "100", "--num_train_files", "1", "--random_seed", "3") == 1
    error = capsys.readouterr().err.splitlines()[-1]
    assert error.startswith(f"error: --output_dir {run} holds a run with other settings "
                            "(learning_rate: 0.0005 there, 0.001 now); resuming it"), error
    assert files() == before


@pytest.mark.slow
def test_a_rerun_on_a_cased_run_tokenizes_as_the_run_did(custom_run, tmp_path, capsys):
    """A command rerun on a run's --output_dir without --do_lower_case takes the casing the
    run's config.yaml records (here made cased): its export serves cased text; the flag given
    against it is used, with a warning naming both."""
    run = tmp_path / "run"
    shutil.copytree(custom_run["out"], run)
    config = (run / "config.yaml").read_text()
    assert "  do_lower_case: true\n" in config
    (run / "config.yaml").write_text(config.replace("  do_lower_case: true\n",
                                                    "  do_lower_case: false\n"))
    common = custom_run["common"]
    common = common[:common.index("--output_dir")] + ["--output_dir", str(run)] + common[
        common.index("--output_dir") + 2:]
    capsys.readouterr()
    assert run_classifier(*common, "--export_dir", str(tmp_path / "cased")) == 0
    assert f"Note: --do_lower_case=False, as the run in {run} records (its config.yaml)." \
        in capsys.readouterr().err
    record = json.load(open(tmp_path / "cased" / "1" / "assets.extra" / "albert_export.json"))
    assert record["do_lower_case"] is False
    assert run_classifier(*common, "--do_lower_case", "--export_dir",
                          str(tmp_path / "lower")) == 0
    assert "Warning: --do_lower_case=True differs from the casing the run in" \
        in capsys.readouterr().err
    record = json.load(open(tmp_path / "lower" / "1" / "assets.extra" / "albert_export.json"))
    assert record["do_lower_case"] is True


@pytest.mark.slow
def test_a_later_run_reuses_labels_json_and_dev_labels_are_checked(custom_run, capsys):
    """--do_eval without --train_file, its task flags in a --config_file (YAML), scores with the
    labels the training run kept (the same accuracy); --export_dir alone exports with them; a
    dev label the training file lacks is an error naming file, line and column."""
    tmp, out, common = custom_run["tmp"], custom_run["out"], custom_run["common"]
    before = json.load(open(out / "eval_results.json"))
    os.remove(out / "eval_results.json")
    (tmp / "eval.yaml").write_text(
        "task:\n  task_name: custom\n  dev_file: " + str(tmp / "dev.tsv") + "\n"
        "  text_a_column: sentence\n  label_column: topic\n"
        "model:\n  max_seq_length: 32\ntrainer:\n  do_eval: true\n  eval_batch_size: 50\n",
        encoding="utf-8")
    assert run_classifier(*common[common.index("--albert_config_file"):common.index(
        "--text_a_column")], "--config_file", str(tmp / "eval.yaml")) == 0
    again = json.load(open(out / "eval_results.json"))
    assert again["accuracy"] == before["accuracy"] and again["examples"] == 150
    # --do_eval alone: the run's recorded dev file, columns and task; the step evaluated (it
    # wrote the recorded --dev_file as missing, and global_step 0)
    assert run_classifier("--output_dir", str(out), "--do_eval") == 0
    alone = json.load(open(out / "eval_results.json"))
    assert (alone["accuracy"], alone["examples"], alone["global_step"]) == (
        before["accuracy"], 150, before["global_step"]) and before["global_step"] == 1000
    assert abs(alone["cross_entropy"] - before["cross_entropy"]) < 1e-6  # batches of 8, not 50
    # --export_dir alone, no file and no column named: the labels of labels.json, served
    export = tmp / "exports" / "again"
    assert run_classifier(*common[:2], *common[common.index("--albert_config_file"):common.index(
        "--text_a_column")], "--max_seq_length", "32", "--export_dir", str(export)) == 0
    served = tf.saved_model.load(str(export / "1")).signatures["classify"](
        inputs=tf.constant([example_of({"text": "Rain and snow today."})]))
    assert served["classes"].numpy()[0].tolist() == [b"food", b"sport", b"weather"]
    bad = tmp / "bad_dev.tsv"
    bad.write_text("topic\tsentence\nsport\tA goal.\nmusic\tA song.\n", encoding="utf-8")
    capsys.readouterr()
    assert run_classifier(*common, "--dev_file", str(bad), "--do_eval") == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: {bad}: line 3, column 'topic': label 'music' is not one of the 3 labels "
        "['food', 'sport', 'weather'] of the training file; a model predicts only the labels "
        "it was trained on (fix the label, or add examples of it to the training file).")



@pytest.mark.slow
def test_custom_regression_reports_correlations_and_numbers(custom_run, capsys):
    """--num_labels 1: the label is a number (here the sentence's word count; pairs from two
    columns), scored by Pearson and Spearman; predictions.jsonl holds numbers; no labels.json.
    A later --do_predict and --export_dir predict and serve pairs, by regression, without the
    column flags or --num_labels (the recorded ones); a column given otherwise is refused."""
    tmp = custom_run["tmp"]
    rows = _sentences(40, 5)
    with open(tmp / "scores.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"a": s, "b": t, "n": len(s.split())}) + "\n" for s, t in rows)
    out = tmp / "regression"
    args = ["--task_name", "custom", "--num_labels", "1", "--text_a_column", "a",
            "--text_b_column", "b", "--label_column", "n", "--albert_config_file",
            str(tmp / "albert_config.json"), "--spm_model_file",
            custom_run["common"][custom_run["common"].index("--spm_model_file") + 1],
            "--output_dir", str(out), "--max_seq_length", "32", "--train_file",
            str(tmp / "scores.jsonl"), "--dev_file", str(tmp / "scores.jsonl"), "--test_file",
            str(tmp / "scores.jsonl"), "--do_train", "--do_eval", "--do_predict",
            "--train_batch_size", "8", "--eval_batch_size", "8", "--predict_batch_size", "8",
            "--train_step", "10", "--save_checkpoints_steps", "10", "--iterations_per_loop", "10",
            "--num_train_files", "1"]
    assert run_classifier(*args) == 0
    results = json.load(open(out / "eval_results.json"))
    assert {"mse", "pearson", "spearman"} <= set(results) and "accuracy" not in results
    assert results["examples"] == 40 and -1 <= results["pearson"] <= 1
    rows_out = [json.loads(line) for line in open(out / "predictions.jsonl", encoding="utf-8")]
    assert [(r["text_a"], r["text_b"]) for r in rows_out] == rows
    assert all(isinstance(r["prediction"], float) and "probabilities" not in r
               for r in rows_out)
    assert not (out / "labels.json").exists()
    # A later --do_predict --export_dir naming neither the columns nor --num_labels: the
    # training run's recorded ones (config.yaml): pairs, regression; the same predictions.
    os.remove(out / "predictions.jsonl")
    later = args[:2] + args[args.index("--albert_config_file"):args.index("--train_file")] + [
        "--test_file", str(tmp / "scores.jsonl"), "--do_predict", "--predict_batch_size", "8"]
    export = tmp / "exports" / "regression"
    assert run_classifier(*later, "--export_dir", str(export)) == 0
    again = [json.loads(line) for line in open(out / "predictions.jsonl", encoding="utf-8")]
    assert again == rows_out
    record = json.load(open(export / "1" / "assets.extra" / "albert_export.json"))
    assert record["text_pair"] is True and record["num_labels"] == 1
    capsys.readouterr()
    assert run_classifier(*later, "--text_b_column", "z") == 1  # not the recorded "b"
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: --text_b_column 'z', and the run in {out} was trained with --text_b_column "
        f"'b' ({out}/config.yaml): a model is used as it was trained; drop --text_b_column (the "
        "recorded one is used; rename a file's column to match), or give another --output_dir.")

# ---------------------------------------------------------------------------------------------
# AlbertTextClassifier on the same files.
@pytest.mark.slow
def test_text_classifier_fits_evaluates_and_predicts_files_as_lists(tmp_path, sample_vocab):
    """`fit(x="train.csv", validation_data="dev.tsv")` trains on the file's texts and label
    ids; `evaluate` and `predict` of a file give exactly what the same texts and ids give as
    lists; a model without labels takes the training file's, sorted; the column names are in
    its config (a `.keras` file's); a file of more labels than classes, and a dev label the
    model lacks, are errors naming the fix."""
    run = tmp_path / "pretrained"
    run.mkdir()
    AlbertConfig(**TINY).to_json_file(run / "albert_config.json")
    tf.train.Checkpoint(model=AlbertPretrainer(AlbertConfig(**TINY))).save(str(run / "ckpt"))
    shutil.copy(sample_vocab, run)
    rows = _sentences(12, 4)
    names = sorted({t for _, t in rows})
    with open(tmp_path / "train.csv", "w", encoding="utf-8") as f:
        f.write("body,kind\n" + "".join(f'"{s}",{t}\n' for s, t in rows))
    with open(tmp_path / "dev.tsv", "w", encoding="utf-8") as f:
        f.write("kind\tbody\n" + "".join(f"{t}\t{s}\n" for s, t in rows[:6]))
    with open(tmp_path / "test.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"body": s}) + "\n" for s, _ in rows)
    texts, ids = [s for s, _ in rows], np.array([names.index(t) for _, t in rows], np.int32)

    keras.utils.set_random_seed(5)
    by_file = AlbertTextClassifier.from_checkpoint(str(run), num_classes=3, sequence_length=24,
                                                   text_a_column="body", label_column="kind")
    by_file.compile(learning_rate=1e-3)
    history = by_file.fit(str(tmp_path / "train.csv"), batch_size=4, shuffle=False, verbose=0,
                          validation_data=str(tmp_path / "dev.tsv"))
    assert by_file.labels == names == ["food", "sport", "weather"]
    evaluated = by_file.evaluate(tmp_path / "dev.tsv", verbose=0)  # a Path is a file
    predicted = by_file.predict(str(tmp_path / "test.jsonl"), verbose=0)  # no label column
    config = by_file.get_config()  # what a `.keras` file keeps
    assert (config["text_a_column"], config["text_b_column"], config["label_column"],
            config["labels"]) == ("body", None, "kind", names)
    (tmp_path / "odd.csv").write_text("body,kind\nA goal.,music\n", encoding="utf-8")
    with pytest.raises(glue.GlueDataError, match=r"odd.csv: line 2, column 'kind': label "
                                                 r"'music' is not one of the 3 labels .* of "
                                                 r"the model \(its `labels`\)"):
        by_file.evaluate(str(tmp_path / "odd.csv"))
    (tmp_path / "other.csv").write_text("text,kind\nA goal.,sport\n", encoding="utf-8")
    with pytest.raises(glue.GlueDataError) as error:  # the Python API's words, not a flag's
        by_file.evaluate(str(tmp_path / "other.csv"))
    assert str(error.value) == (f"{tmp_path}/other.csv: line 1: no column 'body' "
                                "(from_checkpoint's text_a_column); the file's columns are "
                                "['text', 'kind'].")
    by_file.label_column = "body"
    with pytest.raises(glue.GlueDataError) as error:
        by_file.evaluate(str(tmp_path / "dev.tsv"))
    assert "from_checkpoint's text_a_column and from_checkpoint's label_column both name the " \
           "column 'body'" in str(error.value)
    by_file.label_column = "kind"
    assert set(history.history) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    # what fit, evaluate and predict were given: the files' texts and the ids of `names`
    x, y = by_file._file_data(str(tmp_path / "train.csv"), None, "train")
    assert x == texts and y.tolist() == ids.tolist()
    np.testing.assert_array_equal(evaluated, by_file.evaluate(texts[:6], ids[:6], verbose=0))
    np.testing.assert_array_equal(predicted, by_file.predict(texts, verbose=0))
    two_classes = AlbertTextClassifier.from_checkpoint(str(run), num_classes=2,
                                                       sequence_length=24,
                                                       text_a_column="body",
                                                       label_column="kind")
    with pytest.raises(ValueError) as error:
        two_classes.fit(str(tmp_path / "train.csv"))
    assert str(error.value) == (f"{tmp_path}/train.csv has 3 labels {names}, and the model has "
                                "2 classes: build it with from_checkpoint(..., num_classes=3).")
