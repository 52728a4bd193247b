"""GLUE readers on the shipped original files and on each format's real header; the metrics
against hand-worked values."""

import os

import numpy as np
import pytest

from albert_tf.tasks import glue
from conftest import SHARED_DIR

GLUE_DIR = os.path.join(SHARED_DIR, "data", "glue")


@pytest.mark.needs_shared("data/glue")
@pytest.mark.parametrize("task,directory,counts", [
    ("sst-2", "SST-2", {"train": (67349, {"1": 37569, "0": 29780}),
                        "dev": (872, {"1": 444, "0": 428}), "test": (1821, {None: 1821})}),
    ("cola", "CoLA", {"train": (8551, {"1": 6023, "0": 2528}),
                      "dev": (1043, {"1": 721, "0": 322})}),
    ("rte", "RTE", {"train": (2490, {"entailment": 1249, "not_entailment": 1241}),
                    "dev": (277, {"entailment": 146, "not_entailment": 131}),
                    "test": (3000, {None: 3000})}),
])
def test_shipped_classification_files(task, directory, counts):
    for split, (n, labels) in counts.items():
        examples = glue.load_split(task, os.path.join(GLUE_DIR, directory), split)
        assert len(examples) == n
        found = {}
        for e in examples:
            found[e.label] = found.get(e.label, 0) + 1
        assert found == labels, split
        assert len({e.guid for e in examples}) == n
    dev = glue.load_split(task, os.path.join(GLUE_DIR, directory), "dev")
    first = {"sst-2": ("it 's a charming and often affecting journey .", None, "1"),
             "cola": ("The sailors rode the breeze clear of the rocks.", None, "1"),
             "rte": ("Dana Reeve, the widow of the actor Christopher Reeve, has died of lung "
                     "cancer at age 44, according to the Christopher Reeve Foundation.",
                     "Christopher Reeve had an accident.", "not_entailment")}[task]
    assert (dev[0].text_a, dev[0].text_b, dev[0].label) == first


@pytest.mark.needs_shared("data/glue")
def test_shipped_sts_b_scores():
    directory = os.path.join(GLUE_DIR, "STS-B")
    train, dev = (glue.load_split("sts-b", directory, s) for s in ("train", "dev"))
    test = glue.load_split("stsb", directory, "test")
    assert (len(train), len(dev), len(test)) == (5749, 1500, 1379)
    assert round(sum(e.label for e in dev), 3) == 3545.861
    assert min(e.label for e in train) == 0.0 and max(e.label for e in train) == 5.0
    assert (dev[0].text_a, dev[0].text_b, dev[0].label) == (
        "A man with a hard hat is dancing.", "A man wearing a hard hat is dancing.", 5.0)
    assert all(e.label is None for e in test)
    assert glue.get_task("sts-b").num_labels == 1


# The real headers of the files not shipped here (GLUE distribution).
HEADERS = {
    "mrpc": ("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String", "1\t702876\t702977\t{a}\t{b}"),
    "qqp": ("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate", "5\t11\t12\t{a}\t{b}\t0"),
    "qnli": ("index\tquestion\tsentence\tlabel", "0\t{a}\t{b}\tnot_entailment"),
    "wnli": ("index\tsentence1\tsentence2\tlabel", "0\t{a}\t{b}\t1"),
    "mnli": ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
             "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label",
             "0\t31193\t31193n\tgovernment\t( x )\t( y )\t(ROOT x)\t(ROOT y)\t{a}\t{b}\t"
             "neutral\tneutral"),
}


@pytest.mark.slow
@pytest.mark.parametrize("task", sorted(HEADERS))
def test_each_format_by_its_real_header(task, tmp_path):
    header, row = HEADERS[task]
    a, b = 'He said "yes" -- twice.', "Café, naïve: ünïcode."
    # BOM, CRLF, a quote character inside a field, no trailing newline.
    data = ("\ufeff" + header + "\r\n" + row.format(a=a, b=b) + "\r\n"
            + row.format(a=a + " 2", b=b)).encode("utf-8")
    path = tmp_path / "dev.tsv"
    path.write_bytes(data)
    examples = glue.read_examples(task, str(path), "dev")
    assert [(e.text_a, e.text_b) for e in examples] == [(a, b), (a + " 2", b)]
    expected = {"mrpc": "1", "qqp": "0", "qnli": "not_entailment", "wnli": "1",
                "mnli": "neutral"}[task]
    assert examples[0].label == expected
    assert glue.get_task(task).labels.index(expected) >= 0


def test_bad_files_are_named(tmp_path):
    path = tmp_path / "dev.tsv"
    path.write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\tmaybe\n")
    with pytest.raises(glue.GlueDataError, match=r"dev.tsv: line 2: label 'maybe' is not one of "
                                                  r"rte's labels"):
        glue.read_examples("rte", str(path), "dev")
    path.write_text("sentence\tlabel\nfine\t1\n")
    with pytest.raises(glue.GlueDataError, match=r"no column 'sentence1' in its header"):
        glue.read_examples("rte", str(path), "dev")
    path.write_text("index\tsentence1\tsentence2\tlabel\n0\tonly a\n")
    with pytest.raises(glue.GlueDataError, match=r"line 2 has 2 column\(s\), the rte format "
                                                  r"needs 4"):
        glue.read_examples("rte", str(path), "dev")
    path.write_bytes(b"sentence\tlabel\nbad \xff byte\t1\n")
    with pytest.raises(glue.GlueDataError, match=r"line 2 is not valid UTF-8 \(byte 0xff"):
        glue.read_examples("sst-2", str(path), "dev")
    with pytest.raises(glue.GlueDataError, match=r"Unknown GLUE task 'squad'"):
        glue.get_task("squad")


STS_B_HEADER = ("index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\t"
                 "sentence2\tscore")


@pytest.mark.parametrize("task,content,message", [
    # STS-B: float() takes these, the loss would get them.
    ("sts-b", STS_B_HEADER + "\n0\tg\tf\t2012\t1\ts\ts\ta\tb\t3.5\n1\tg\tf\t2012\t2\ts\ts\ta\tb"
     "\tnan\n", r"dev.tsv: line 3: score 'nan' is not a number in \[0, 5\]"),
    ("sts-b", STS_B_HEADER + "\n0\tg\tf\t2012\t1\ts\ts\ta\tb\t500\n",
     r"dev.tsv: line 2: score '500' is not a number in \[0, 5\] \(STS-B's scale\)"),
    ("sts-b", STS_B_HEADER + "\n0\tg\tf\t2012\t1\ts\ts\ta\tb\t-0.2\n",
     r"dev.tsv: line 2: score '-0.2' is not a number in \[0, 5\]"),
    ("sts-b", STS_B_HEADER + "\n0\tg\tf\t2012\t1\ts\ts\ta\tb\tinf\n",
     r"dev.tsv: line 2: score 'inf' is not a number in \[0, 5\]"),
    ("sts-b", STS_B_HEADER + "\n0\tg\tf\t2012\t1\ts\ts\ta\tb\tfour\n",
     r"dev.tsv: line 2: score 'four' is not a number\.$"),
    ("sts-b", "\n\n" + STS_B_HEADER.replace("score", "similarity") + "\n",
     r"dev.tsv: line 3: no column 'score' in its header"),
    # A label outside the task's list, a short row, an empty file.
    ("mnli", HEADERS["mnli"][0] + "\n" + HEADERS["mnli"][1].format(a="x", b="y")[:-8] + "\t-\n",
     r"dev.tsv: line 2: label '-' is not one of mnli's labels"),
    ("cola", "src\t1\t\tfine\nsrc\t2\t\tbad label\n",
     r"dev.tsv: line 2: label '2' is not one of cola's labels \('0', '1'\)"),
    ("cola", "src\t1\t\tfine\nsrc\t0\n", r"dev.tsv: line 2 has 2 column\(s\), the cola "
                                          r"format needs 4"),
    ("mrpc", HEADERS["mrpc"][0] + "\n1\t702876\t702977\tonly one string\n",
     r"dev.tsv: line 2 has 4 column\(s\), the mrpc format needs 5"),
    ("sst-2", "\n\r\n", r"dev.tsv is empty: no header and no examples"),
    ("sst-2", "sentence\tlabel\n", r"dev.tsv holds no examples"),
])
def test_bad_labels_and_rows_name_the_file_and_line(tmp_path, task, content, message):
    path = tmp_path / "dev.tsv"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(glue.GlueDataError, match=message) as error:
        glue.read_examples(task, str(path), "dev")
    assert str(error.value).startswith(str(path))


def test_sts_b_accepts_its_whole_scale(tmp_path):
    path = tmp_path / "dev.tsv"
    rows = [f"{i}\tg\tf\t2012\t{i}\ts\ts\ta\tb\t{score}"
            for i, score in enumerate(["0", "0.000", "5", "5.000", "2.75"])]
    path.write_text(STS_B_HEADER + "\n" + "\n".join(rows) + "\n")
    assert [e.label for e in glue.read_examples("sts-b", str(path), "dev")] == [
        0.0, 0.0, 5.0, 5.0, 2.75]


def test_metrics_hand_worked():
    predictions, labels = [1, 1, 0, 0, 1], [1, 0, 0, 1, 1]  # tp 2, tn 1, fp 1, fn 1
    assert glue.accuracy(predictions, labels) == pytest.approx(0.6)
    assert glue.f1_positive(predictions, labels) == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))
    assert glue.matthews_corrcoef(predictions, labels) == pytest.approx(
        (2 * 1 - 1 * 1) / np.sqrt(3 * 3 * 2 * 2))
    assert glue.matthews_corrcoef([1, 1, 1], [1, 0, 1]) == 0.0  # an empty column
    assert glue.pearson([1, 2, 3], [2, 4, 7]) == pytest.approx(5 / np.sqrt(2 * 114 / 9))
    assert glue.spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(4.5 / np.sqrt(4.5 * 5))
    assert glue.glue_metrics("mrpc", predictions, labels) == pytest.approx(
        {"accuracy": 0.6, "f1": 2 / 3})
    assert set(glue.glue_metrics("cola", predictions, labels)) == {"accuracy", "matthews_corr"}
    assert set(glue.glue_metrics("sts-b", [0.5, 1.0], [1.0, 2.0])) == {"pearson", "spearman"}
    for name in glue.TASKS:
        regression = glue.get_task(name).is_regression
        values = [0.5, 1.0] if regression else [0, 1]
        assert tuple(glue.glue_metrics(name, values, values)) == glue.metric_names(name)
    assert [glue.main_metric(t) for t in ("cola", "sts-b", "rte")] == [
        "matthews_corr", "pearson", "accuracy"]
