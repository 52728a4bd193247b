"""GLUE: readers of the original task files and the metrics GLUE reports.

Files are read as the GLUE distribution ships them: tab-separated, no quoting (a `"` is text, as
in the official readers' `quotechar=None`), UTF-8 with or without a BOM, LF or CRLF, with or
without a trailing newline. Headered files are read by column name, so a column order that
differs is still read right, and a missing column is an error that names the file and line.
CoLA's train/dev files have no header (source, label, original label, sentence). A label not in
the task's list, an STS-B score that is not a finite number in [0, 5], a row with too few
columns (QQP's aside, skipped and counted as the official processor does) and an empty file are
errors naming the file and line.

Labels, in the official `run_classifier.py` order (the label id is the index):

    cola, sst-2, mrpc, qqp, wnli   "0", "1"
    mnli, mismnli                  "contradiction", "entailment", "neutral"
    rte, qnli                      "entailment", "not_entailment"
    sts-b                          regression (a float score, 0-5)

Metrics (`glue_metrics`): accuracy for every classification task; F1 of class "1" for MRPC and
QQP; Matthews correlation for CoLA (scikit-learn); Pearson and Spearman correlation (SciPy; ties
ranked by their mean rank) for STS-B, 0.0 where a side is constant (SciPy's nan).

Task names are the official processors' (`cola`, `mnli`, `mismnli`, `mrpc`, `qnli`, `qqp`, `rte`,
`sst-2`, `sts-b`, `wnli`; `mismnli` trains on MNLI's train file and is scored on
`dev_mismatched.tsv`), any case, with a few aliases (`sst2`, `mnli-mm`, ...). `--data_dir` is
the GLUE root as in the official runner (`DATA_DIR/MRPC/train.tsv`, MNLI's files under
`DATA_DIR/MNLI`), or the task's own folder (`DATA_DIR/train.tsv`): `task_file` takes the one that
exists.

Your own data (`custom_task`, run_classifier's `--task_name custom`): CSV, TSV or JSON Lines
files (`albert_tf.tasks.tables`) whose columns are named (`text_a_column`, `text_b_column`,
`label_column`, three different columns: `check_columns`); the labels are the training file's
(`label_set`: sorted, integers of ASCII digits in numeric order, equal values by their text, the
rest by text), or a float for regression; `read_table_examples` reads them, its errors naming
the file, line and column. `non_integer_numbers` names the labels that make a file of scores.
"""

from __future__ import annotations

import dataclasses
import os
import re
import warnings

import numpy as np
from absl import logging
from scipy import stats
from sklearn import metrics as sklearn_metrics

from albert_tf.tasks.tables import read_table, table_format

BOM = b"\xef\xbb\xbf"


class GlueDataError(ValueError):
    """A GLUE file cannot be read as its task's format; the message names the file and line."""


@dataclasses.dataclass(frozen=True)
class InputExample:
    """One example: `guid` ("dev-17"), `text_a`, `text_b` (None for single sentences), `label`
    (a label string, a float for STS-B, None in test files)."""

    guid: str
    text_a: str
    text_b: str | None
    label: object


@dataclasses.dataclass(frozen=True)
class GlueTask:
    """Where a task's columns are. `a`, `b`, `label`: header names (or column indexes for
    CoLA's headerless train/dev files); `files`: split -> file name."""

    name: str
    folder: str  # the task's folder in the GLUE distribution (official data_dir/<folder>/...)
    labels: tuple | None  # None: regression
    a: object
    b: object
    label: object
    files: dict
    header: bool = True
    test_a: object = None  # columns of the test file when they differ
    test_b: object = None
    test_header: bool = True
    positive_f1: bool = False
    matthews: bool = False
    # Labelled rows with too few columns are skipped, as the official processor does (QQP's
    # train.tsv has a few), instead of being an error; the count is logged.
    skip_short_rows: bool = False
    best: str = ""  # the metric that picks the best checkpoint, where not GLUE's (`main_metric`)

    @property
    def is_regression(self) -> bool:
        return self.labels is None

    @property
    def num_labels(self) -> int:
        return 1 if self.labels is None else len(self.labels)


_BINARY = ("0", "1")
_NLI = ("entailment", "not_entailment")
_MNLI = ("contradiction", "entailment", "neutral")
_SPLITS = {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"}

TASKS = {t.name: t for t in (
    GlueTask("cola", "CoLA", _BINARY, 3, None, 1, _SPLITS, header=False, test_a="sentence",
             matthews=True),
    GlueTask("sst-2", "SST-2", _BINARY, "sentence", None, "label", _SPLITS),
    GlueTask("mrpc", "MRPC", _BINARY, "#1 String", "#2 String", "Quality", _SPLITS,
             positive_f1=True),
    GlueTask("qqp", "QQP", _BINARY, "question1", "question2", "is_duplicate", _SPLITS,
             positive_f1=True, skip_short_rows=True),
    GlueTask("sts-b", "STS-B", None, "sentence1", "sentence2", "score", _SPLITS),
    GlueTask("mnli", "MNLI", _MNLI, "sentence1", "sentence2", "gold_label",
             {"train": "train.tsv", "dev": "dev_matched.tsv", "test": "test_matched.tsv"}),
    GlueTask("mismnli", "MNLI", _MNLI, "sentence1", "sentence2", "gold_label",
             {"train": "train.tsv", "dev": "dev_mismatched.tsv",
              "test": "test_mismatched.tsv"}),
    GlueTask("qnli", "QNLI", _NLI, "question", "sentence", "label", _SPLITS),
    GlueTask("rte", "RTE", _NLI, "sentence1", "sentence2", "label", _SPLITS),
    GlueTask("wnli", "WNLI", _BINARY, "sentence1", "sentence2", "label", _SPLITS),
)}
# The official runner's names are the keys of TASKS; these are other spellings in use.
ALIASES = {"sst2": "sst-2", "stsb": "sts-b", "sts": "sts-b", "mnli-m": "mnli",
           "mnli_matched": "mnli", "mnli-mm": "mismnli", "mnli_mismatched": "mismnli"}


def get_task(name: str) -> GlueTask:
    key = ALIASES.get(name.lower(), name.lower())
    if key == CUSTOM:
        raise GlueDataError(f"Task {name!r} is your own files' and has no fixed labels: it is "
                            "made by custom_task() from the training file (run_classifier "
                            "--task_name custom --train_file F --text_a_column NAME "
                            "--label_column NAME).")
    if key not in TASKS:
        raise GlueDataError(f"Unknown GLUE task {name!r}; choose one of {sorted(TASKS)}, or "
                            f"{CUSTOM!r} for your own CSV, TSV or JSON Lines files "
                            "(--train_file, --dev_file, --test_file, --text_a_column, "
                            "--label_column).")
    return TASKS[key]


# ---------------------------------------------------------------------------------------------
# Your own data: a table (CSV, TSV, JSON Lines: `albert_tf.tasks.tables`) whose columns are named.
CUSTOM = "custom"


def is_custom(name: str) -> bool:
    """Whether the task name `name` is your own files' (`custom_task`)."""
    return bool(name) and name.lower() == CUSTOM


def custom_task(labels, text_a_column: str, text_b_column: str | None = None,
                label_column: str = "label", files: dict | None = None) -> GlueTask:
    """The task of your own table files: `labels` the class names (index = id; `label_set` of
    the training file), or None for regression (a float label); `files` split -> path. Two
    classes are scored as MRPC is (accuracy, F1 of the second label, Matthews correlation),
    more by accuracy; the best checkpoint by accuracy (regression: Pearson)."""
    if labels is not None and len(labels) < 2:
        raise GlueDataError(f"A classification task needs 2 or more labels; the training file "
                            f"has {list(labels)}. For a number to predict, give --num_labels 1 "
                            "(regression).")
    check_columns(text_a_column, text_b_column, label_column)
    binary = labels is not None and len(labels) == 2
    return GlueTask(CUSTOM, "", None if labels is None else tuple(labels), text_a_column,
                    text_b_column, label_column, dict(files or {}), positive_f1=binary,
                    matthews=binary, best="pearson" if labels is None else "accuracy")


# An integer label: ASCII digits, a sign allowed ("1_0", "\u0661" and " 1" are int()'s, not
# ours: they sort as text). A number: an integer or a decimal, an exponent allowed.
_INTEGER = re.compile(r"[+-]?[0-9]+")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _label_key(label: str):
    """Integer labels ("2", "10") in numeric order, equal values ("1", "01", "+1") by their
    text; then the rest in text order. One order for any set of labels: a total key."""
    if _INTEGER.fullmatch(label):
        return (0, int(label), label)
    return (1, 0, label)


def label_set(examples) -> list[str]:
    """The sorted distinct labels of `examples` (integers in numeric order, `_label_key`): the
    class names of a task trained on them, index = id; the same list whatever the order of the
    examples (and the hash seed of the set they are gathered in)."""
    return sorted({e.label for e in examples}, key=_label_key)


def non_integer_numbers(labels) -> list[str]:
    """The labels that are not integers when every one of `labels` is a number ("0.67",
    "-2e-1", "1.0"; `_NUMBER`), in their order; [] otherwise. Such labels are scores read as
    class names: run_classifier asks for --num_labels (1: regression) before training on them."""
    labels = list(labels)
    if not labels or not all(_NUMBER.fullmatch(label) for label in labels):
        return []
    return [label for label in labels if not _INTEGER.fullmatch(label)]


def check_columns(text_a_column, text_b_column=None, label_column=None, where: str = "",
                  names: tuple = ("--text_a_column", "--text_b_column", "--label_column")):
    """The columns of a table task must differ: a text column that is the label column would
    give the model its label as text; text A and text B one column, a pair of one text twice.
    `where` (a file's path) leads the message; `names` are the settings' names in it."""
    named = list(zip(names, (text_a_column, text_b_column, label_column)))
    for i, (flag, name) in enumerate(named):
        for other, other_name in named[i + 1:]:
            if name is not None and name == other_name:
                why = ("each pair would be one text twice" if other == names[1] else
                       "the model would be given its label as its text")
                raise GlueDataError(f"{where + ': ' if where else ''}{flag} and {other} both "
                                    f"name the column {name!r}: {why}; name different columns.")


def _table_label(raw, where: str, flag: str, regression: bool, labels, source):
    if isinstance(raw, (dict, list)):
        raise GlueDataError(f"{where}: a JSON {_json_kind(raw)}; a label is a string, a number "
                            "or a boolean.")
    if raw is None or not str(raw).strip():
        raise GlueDataError(f"{where}: the label is empty ({flag}); give every row a label, "
                            "or remove the row.")
    raw = str(raw).strip()
    if regression:
        try:
            value = float(raw)
        except ValueError:
            value = float("nan")
        if not np.isfinite(value):
            raise GlueDataError(f"{where}: label {raw!r} is not a finite number, and a "
                                "regression task (--num_labels 1) predicts numbers.")
        return value
    if labels is not None and raw not in labels:
        raise GlueDataError(f"{where}: label {raw!r} is not one of the {len(labels)} labels "
                            f"{list(labels)} of {source}; a model predicts only the labels it "
                            "was trained on (fix the label, or add examples of it to the "
                            "training file).")
    return raw


def _json_kind(value) -> str:
    return "object" if isinstance(value, dict) else "array"


def read_table_examples(path: str, text_a_column: str, text_b_column: str | None = None,
                        label_column: str | None = "label", split: str = "train",
                        labels=None, regression: bool = False,
                        labels_from: str = "the training file",
                        names: tuple = ("--text_a_column", "--text_b_column", "--label_column")
                        ) -> list[InputExample]:
    """The examples of a table file (`albert_tf.tasks.tables.read_table`: CSV, TSV or JSON
    Lines by extension): texts from `text_a_column` (and `text_b_column`), the label from
    `label_column` (a class name, or a finite number with `regression`); a label outside
    `labels` (when given; `labels_from` says whose they are) is an error. `split` "test": no
    label is read (labels None; prediction needs none, so a test file's label column, absent,
    empty or of labels the training file lacks, is never an error). The columns must differ
    (`check_columns`). Every error names the file, line and column: a column the file does not
    have (the columns it has listed), an empty text or label, a JSON object or array where a
    text or label is read (other columns may hold anything), with the setting that names it
    (`names`: the command's flags; the Python API's own words)."""
    check_columns(text_a_column, text_b_column, label_column, where=path, names=names)
    columns, rows = read_table(path)
    wanted = list(zip((text_a_column, text_b_column, label_column), names))
    has_label = label_column is not None and split != "test"
    if table_format(path) != "jsonl":  # CSV/TSV: the header names the columns once
        for name, flag in wanted:
            if name is not None and (name != label_column or has_label) and name not in columns:
                raise GlueDataError(f"{path}: line {_header_line(path)}: no column {name!r} "
                                    f"({flag}); the file's columns are {columns}.")
    examples = []
    for number, row in rows:
        texts = []
        for name, flag in wanted[:2]:
            if name is None:
                texts.append(None)
                continue
            if name not in row:
                raise GlueDataError(f"{path}: line {number}: no column {name!r} ({flag}); the "
                                    f"line's columns are {list(row)}.")
            value = row[name]
            if isinstance(value, (dict, list)):
                raise GlueDataError(f"{path}: line {number}, column {name!r}: a JSON "
                                    f"{_json_kind(value)}; a text is a string (or a number).")
            if value is None or not value.strip():
                raise GlueDataError(f"{path}: line {number}, column {name!r}: the text is "
                                    "empty; fill it in or remove the row.")
            texts.append(value.strip())
        label = None
        if has_label:
            if label_column not in row:
                raise GlueDataError(f"{path}: line {number}: no column {label_column!r} "
                                    f"({names[2]}); the line's columns are {list(row)}.")
            label = _table_label(row[label_column], f"{path}: line {number}, column "
                                 f"{label_column!r}", names[2], regression, labels,
                                 labels_from)
        examples.append(InputExample(f"{split}-{len(examples)}", texts[0], texts[1], label))
    return examples


def _header_line(path: str) -> int:
    """The line of a CSV/TSV file's header (its first non-blank line)."""
    with open(path, encoding="utf-8-sig", errors="replace") as f:
        for number, line in enumerate(f, start=1):
            if line.strip():
                return number
    return 1


def read_tsv(path: str) -> list[tuple[int, list[str]]]:
    """(line number, fields) of each row of a GLUE TSV: BOM dropped, LF or CRLF, no quoting; a
    final line without a newline is a row; empty lines are skipped."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise GlueDataError(f"No such GLUE file: {path}") from None
    if data.startswith(BOM):
        data = data[len(BOM):]
    rows = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        raw = raw[:-1] if raw.endswith(b"\r") else raw
        if not raw.strip():
            continue
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise GlueDataError(f"{path}: line {number} is not valid UTF-8 (byte "
                                f"0x{raw[e.start]:02x} at column {e.start + 1}).") from None
        rows.append((number, line.split("\t")))
    return rows


def _column(header, wanted, path, line):
    if isinstance(wanted, int):
        return wanted
    if wanted not in header:
        raise GlueDataError(f"{path}: line {line}: no column {wanted!r} in its header "
                            f"{header}; is it the right task's file?")
    return header.index(wanted)


# STS-B similarity scores lie in [0, 5] (the benchmark's scale); the train and dev files hold
# exactly that range.
SCORE_RANGE = (0.0, 5.0)


def _score(raw: str, path: str, number: int) -> float:
    """An STS-B score: a finite number in `SCORE_RANGE` (float() also takes "nan" and "inf",
    which would reach the loss)."""
    try:
        score = float(raw)
    except ValueError:
        raise GlueDataError(f"{path}: line {number}: score {raw!r} is not a number.") from None
    low, high = SCORE_RANGE
    if not low <= score <= high:  # False for nan too
        raise GlueDataError(f"{path}: line {number}: score {raw!r} is not a number in "
                            f"[{low:g}, {high:g}] (STS-B's scale).")
    return score


def read_examples(task: GlueTask | str, path: str, split: str) -> list[InputExample]:
    """The examples of one file of `task`; `split` ("train", "dev", "test") names the guids and
    says whether labels are expected (not in "test"). A `custom_task`'s files are tables
    (`read_table_examples`)."""
    task = get_task(task) if isinstance(task, str) else task
    if task.name == CUSTOM:
        return read_table_examples(path, task.a, task.b, task.label, split, task.labels,
                                   task.is_regression)
    rows = read_tsv(path)
    is_test = split == "test"
    header_row = task.test_header if is_test else task.header
    a_col = task.test_a if is_test and task.test_a is not None else task.a
    b_col = task.test_b if is_test and task.test_b is not None else task.b
    if not rows:
        raise GlueDataError(f"{path} is empty: no header and no examples.")
    header = rows[0][1] if header_row else None
    line = rows[0][0]
    body = rows[1:] if header_row else rows
    a = _column(header, a_col, path, line)
    b = None if b_col is None else _column(header, b_col, path, line)
    label_col = None if is_test else _column(header, task.label, path, line)
    needed = max(c for c in (a, b, label_col) if c is not None) + 1
    examples = []
    skipped = 0
    for number, fields in body:
        if len(fields) < needed and task.skip_short_rows and not is_test:
            skipped += 1
            continue
        if len(fields) < needed:
            raise GlueDataError(f"{path}: line {number} has {len(fields)} column(s), the "
                                f"{task.name} format needs {needed}: {fields!r:.200}")
        label = None
        if label_col is not None:
            raw = fields[label_col].strip()
            if task.is_regression:
                label = _score(raw, path, number)
            elif raw not in task.labels:
                raise GlueDataError(f"{path}: line {number}: label {raw!r} is not one of "
                                    f"{task.name}'s labels {task.labels}.")
            else:
                label = raw
        examples.append(InputExample(f"{split}-{len(examples)}", fields[a].strip(),
                                     None if b is None else fields[b].strip(), label))
    if skipped:
        logging.warning("%s: skipped %d row(s) with fewer than %d columns (as the official "
                        "%s processor does).", path, skipped, needed, task.name)
    if not examples:
        raise GlueDataError(f"{path} holds no examples.")
    return examples


def task_file(task: GlueTask | str, data_dir: str, split: str) -> str:
    """The file of `split`: `data_dir/<folder>/<file>` when `data_dir` is the GLUE root (the
    official runner's --data_dir), `data_dir/<file>` when it is the task's folder."""
    task = get_task(task) if isinstance(task, str) else task
    if task.name == CUSTOM:
        if not task.files.get(split):
            raise GlueDataError(f"No {split} file: give --{split}_file (a .csv, .tsv or "
                                ".jsonl file).")
        return task.files[split]
    candidates = [os.path.join(data_dir, task.folder, task.files[split]),
                  os.path.join(data_dir, task.files[split])]
    for path in candidates:
        if os.path.isfile(path):
            return path
    raise GlueDataError(f"No {task.name} {split} file under --data_dir {data_dir}: looked for "
                        f"{candidates[0]} (data_dir as the GLUE root, as the official runner) "
                        f"and {candidates[1]} (data_dir as the task's folder).")


def load_split(task: GlueTask | str, data_dir: str, split: str) -> list[InputExample]:
    """`read_examples` of the task's file for `split` under `data_dir` (`task_file`)."""
    task = get_task(task) if isinstance(task, str) else task
    return read_examples(task, task_file(task, data_dir, split), split)


# ---------------------------------------------------------------------------------------------
# Metrics.
def accuracy(predictions, labels) -> float:
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    return float(np.mean(predictions == labels))


def f1_positive(predictions, labels, positive=1) -> float:
    """F1 of the positive class (MRPC, QQP); 0 when there is no true positive (scikit-learn's
    `f1_score`, its zero division made 0 without a warning)."""
    return float(sklearn_metrics.f1_score(np.asarray(labels), np.asarray(predictions),
                                          labels=[positive], average="micro",
                                          zero_division=0.0))


def matthews_corrcoef(predictions, labels) -> float:
    """Binary Matthews correlation (CoLA), scikit-learn's, which GLUE uses: 0 when a row or
    column of the confusion matrix is empty (constant predictions or labels)."""
    with warnings.catch_warnings():  # one class in both: 0.0, as every degenerate case
        warnings.filterwarnings("ignore", "A single label was found", UserWarning)
        return float(sklearn_metrics.matthews_corrcoef(np.asarray(labels),
                                                       np.asarray(predictions)))


def _degenerate(x, y) -> bool:
    """Fewer than two pairs or a constant side: no correlation is defined (SciPy returns nan
    with a warning); GLUE's score for it here is 0.0, as the hand-written metric was."""
    return len(x) < 2 or np.all(x == x[0]) or np.all(y == y[0])


def pearson(x, y) -> float:
    """Pearson correlation (STS-B; SciPy's `pearsonr`); 0.0 for a constant side (`_degenerate`)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    return 0.0 if _degenerate(x, y) else float(stats.pearsonr(x, y).statistic)


def spearman(x, y) -> float:
    """Spearman correlation, ties ranked by their mean rank (SciPy's `spearmanr`); 0.0 for a
    constant side (`_degenerate`)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    return 0.0 if _degenerate(x, y) else float(stats.spearmanr(x, y).statistic)


def glue_metrics(task: GlueTask | str, predictions, labels) -> dict:
    """GLUE's metrics of one task: predictions and labels are label ids (classification) or
    scores (STS-B)."""
    task = get_task(task) if isinstance(task, str) else task
    if task.is_regression:
        return {"pearson": pearson(predictions, labels), "spearman": spearman(predictions,
                                                                              labels)}
    metrics = {"accuracy": accuracy(predictions, labels)}
    if task.positive_f1:
        metrics["f1"] = f1_positive(predictions, labels)
    if task.matthews:
        metrics["matthews_corr"] = matthews_corrcoef(predictions, labels)
    return metrics


def metric_names(task: GlueTask | str) -> tuple:
    """The names `glue_metrics` returns for `task`, in its order."""
    task = get_task(task) if isinstance(task, str) else task
    if task.is_regression:
        return ("pearson", "spearman")
    return ("accuracy",) + (("f1",) if task.positive_f1 else ()) + (
        ("matthews_corr",) if task.matthews else ())


def main_metric(task: GlueTask | str) -> str:
    """The metric GLUE ranks a task by (and that picks the best checkpoint)."""
    task = get_task(task) if isinstance(task, str) else task
    if task.best:
        return task.best
    if task.is_regression:
        return "pearson"
    if task.matthews:
        return "matthews_corr"
    return "accuracy"
