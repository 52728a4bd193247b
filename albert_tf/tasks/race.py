"""RACE (multiple-choice reading comprehension): the original files, features, the
multiple-choice model and the task the training loop runs.

Files, as the RACE release ships them: `<data_dir>/RACE/{train,dev,test}/{middle,high}/*.txt`
(the official runner's layout; `<data_dir>/{train,dev,test}/...` is read too), each holding one
JSON object per passage — `id`, `article`, `questions`, `options` (four per question),
`answers` ("A"-"D"). Passages are read in sorted file order (the official reader's `listdir`
order is the file system's). A malformed file is an error naming it (and the line, in a file of
JSON lines), the question index and what is wrong: a string where a list belongs (`options:
"ABCD"` is not four options), a question without four options, an answer that is not one of
its options' letters, questions, option lists and answers of different lengths.

Features (official `race_utils.py`): for each of the four options, `[CLS] article [SEP] qa
[SEP]`, where `qa` is the question with its `_` blank filled by the option, or the question and
the option joined by a space when it has no blank; the last `max_qa_length` pieces of `qa` are
kept and the article is cut to fit. `input_ids`, `input_mask`, `segment_ids` are
[num_choices, max_seq_length]; `label_ids` [1] (0-3), `is_real_example` [1], and `race_level`
[1] (0 middle, 1 high) for the breakdown. Evaluation files are padded with `is_real_example = 0`
examples to whole batches, so every question is scored.

Model: the backbone on each (passage, option) sequence, dropout then a dense layer to one logit
on the pooled output (official `output_weights` [1, H], `output_bias` [1]), the four logits
softmaxed. Metrics: accuracy, and accuracy on middle-school and high-school questions.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os

import numpy as np
import tensorflow as tf

from albert_tf import features as F
from albert_tf.models.task_models import NUM_CHOICES, AlbertMultipleChoice  # noqa: F401
from albert_tf.packing import for_batches, join_in_graph, keep_first, keep_last, ragged_rows
from albert_tf.tasks.base import LabelledTask
from albert_tf.records import files_for, read_cached, to_example, write_records
from albert_tf.tokenization import FEATURES_REVISION

LEVELS = ("middle", "high")
LABELS = ("A", "B", "C", "D")
LABEL_IDS, IS_REAL_EXAMPLE, RACE_LEVEL = F.LABEL_IDS, F.IS_REAL_EXAMPLE, "race_level"
SIDECAR_FORMAT = "albert_race_tfrecord"


class RaceDataError(ValueError):
    """A RACE file cannot be read; the message names the file and what is wrong."""


@dataclasses.dataclass(frozen=True)
class RaceExample:
    """One question: `guid` ("<passage id>-<question index>"), its passage's `level`, the
    `article`, the `question`, its four `options`, and `label` (0-3, None when unlabelled)."""

    guid: str
    level: str
    article: str
    question: str
    options: tuple
    label: int | None


def _passages(path: str):
    """(where, passage) of each passage of a file: one JSON object (`where` is the path), or one
    object per line (`where` is "<path>, line <n>")."""
    with tf.io.gfile.GFile(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise RaceDataError(f"{path} is not UTF-8 ({e}); RACE files are UTF-8 JSON.") from None
    try:
        return [(path, json.loads(text))]
    except json.JSONDecodeError:
        pass
    passages = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                passages.append((f"{path}, line {number}", json.loads(line)))
            except json.JSONDecodeError as e:
                raise RaceDataError(f"{path}, line {number}: not JSON ({e.msg}); each RACE "
                                    "file holds one JSON object per passage.") from None
    return passages


def _is_strings(value) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _check_passage(passage, where: str) -> None:
    """Refuses a passage whose fields are not RACE's: `article` a string, `questions` a list of
    strings, `options` a list (one per question) of lists of NUM_CHOICES strings, `answers`
    (when given) a list of letters of those options. A string where a list belongs is refused,
    not read character by character ("ABCD" is not four options)."""
    if not isinstance(passage, dict):
        raise RaceDataError(f"{where}: a passage is {type(passage).__name__}, not an object.")
    missing = [k for k in ("article", "questions", "options") if k not in passage]
    if missing:
        raise RaceDataError(f"{where}: passage without {', '.join(missing)}.")
    if not isinstance(passage["article"], str):
        raise RaceDataError(f"{where}: article is {type(passage['article']).__name__}, not a "
                            "string.")
    questions, options = passage["questions"], passage["options"]
    answers = passage.get("answers")
    for name, value in (("questions", questions), ("options", options), ("answers", answers)):
        if value is not None and not isinstance(value, list):
            raise RaceDataError(f"{where}: {name} is {type(value).__name__}, not a list (one "
                                "entry per question).")
    if len(options) != len(questions) or answers is not None and len(answers) != len(questions):
        raise RaceDataError(f"{where}: {len(questions)} questions, {len(options)} option lists"
                            f"{'' if answers is None else f', {len(answers)} answers'}; they "
                            "must be as many.")
    for i, question in enumerate(questions):
        if not isinstance(question, str):
            raise RaceDataError(f"{where}: question {i} is {type(question).__name__}, not a "
                                "string.")
        if not _is_strings(options[i]):
            raise RaceDataError(f"{where}: question {i}'s options are {options[i]!r:.80}, not a "
                                f"list of {NUM_CHOICES} strings.")
        if len(options[i]) != NUM_CHOICES:
            raise RaceDataError(f"{where}: question {i} has {len(options[i])} options; RACE has "
                                f"{NUM_CHOICES}.")
        if answers is not None and answers[i] not in LABELS[:len(options[i])]:
            raise RaceDataError(f"{where}: question {i}'s answer {answers[i]!r} is not one "
                                f"of {', '.join(LABELS)}.")


def _examples_of(passage, where: str, path: str, level: str) -> list[RaceExample]:
    _check_passage(passage, where)
    answers = passage.get("answers")
    pid = passage.get("id") or os.path.basename(path)
    return [RaceExample(f"{pid}-{i}", level, passage["article"], question,
                        tuple(passage["options"][i]),
                        None if answers is None else LABELS.index(answers[i]))
            for i, question in enumerate(passage["questions"])]


# The preprocessed layout: one file per level holding every passage, one JSON object per line
# (the official reader reads every .txt of a level as JSON lines, so it reads this too).
ALL_FILE = "all.txt"


def read_split(data_dir: str, split: str, levels=LEVELS) -> list[RaceExample]:
    """Every question of a split ("train", "dev", "test") at the given levels, from
    `RACE/<split>/<level>/`: the release's one JSON file per passage, or one `all.txt` of JSON
    lines per level."""
    base = os.path.join(data_dir, "RACE")
    if not tf.io.gfile.isdir(os.path.join(base, split)):
        base = data_dir
    examples = []
    for level in levels:
        directory = os.path.join(base, split, level)
        if not tf.io.gfile.isdir(directory):
            raise FileNotFoundError(f"{directory} does not exist: --data_dir must hold the RACE "
                                    f"release (RACE/{split}/{level}/*.txt).")
        names = sorted(n for n in tf.io.gfile.listdir(directory) if n.endswith(".txt"))
        if not names:
            raise RaceDataError(f"{directory} holds no .txt passage files.")
        if ALL_FILE in names and len(names) > 1:
            raise RaceDataError(
                f"{directory} holds both {ALL_FILE} and per-passage files ({len(names) - 1}); "
                f"every question would be read twice. Keep {ALL_FILE} (every passage, one JSON "
                "object per line) or the per-passage files, not both.")
        for name in names:
            path = os.path.join(directory, name)
            for where, passage in _passages(path):
                examples.extend(_examples_of(passage, where, path, level))
    return examples


# ---------------------------------------------------------------------------------------------
def race_schema(max_seq_length: int) -> dict:
    return {F.INPUT_IDS: ((NUM_CHOICES, max_seq_length), "int64"),
            F.INPUT_MASK: ((NUM_CHOICES, max_seq_length), "int64"),
            F.SEGMENT_IDS: ((NUM_CHOICES, max_seq_length), "int64"),
            LABEL_IDS: (1, "int64"), IS_REAL_EXAMPLE: (1, "int64"), RACE_LEVEL: (1, "int64")}


class RacePreprocessor:
    """Article, question and options -> the model's features: the official packing (module
    docstring) as TensorFlow ops, defined once and run for the records (`features`, with the
    Python tokenizer: the official data's SentencePiece) and inside the SavedModel (`__call__`,
    with the in-graph tokenizer; `albert_tf.export.serving_tasks.MultipleChoiceServingModule`).

    Args:
        tokenizer: the Python tokenizer (`albert_tf.tokenization.Tokenizer`, for `features`)
            or an in-graph one (`Tokenizer.in_graph()`, `in_graph_tokenizer`, for `__call__`).
        max_seq_length: the packed length of each option's sequence.
        max_qa_length: the pieces of the second segment kept (its last ones), 0 to
            `max_seq_length - 3`.
        num_choices: options per question.
    """

    def __init__(self, tokenizer, max_seq_length: int, max_qa_length: int,
                 num_choices: int = NUM_CHOICES):
        for name, value in (("max_seq_length", max_seq_length), ("max_qa_length", max_qa_length)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise ValueError(f"--{name} must be an integer. Received: {value!r}")
        if max_seq_length < 4:
            raise ValueError(f"--max_seq_length {max_seq_length} is too short for [CLS] article "
                             "[SEP] question+option [SEP]: use at least 4.")
        if not 0 <= max_qa_length <= max_seq_length - 3:
            raise ValueError(f"--max_qa_length {max_qa_length} leaves no room in "
                             f"--max_seq_length {max_seq_length}: it must be between 0 and "
                             f"max_seq_length - 3 = {max_seq_length - 3}.")
        self.tokenizer = tokenizer
        self.max_seq_length = int(max_seq_length)
        self.max_qa_length = int(max_qa_length)
        self.num_choices = int(num_choices)

    def second_segments(self, question, options):
        """String [batch * num_choices]: each option's second segment, the question with
        every `_` replaced by the option, or question + " " + option when it has none."""
        options = tf.reshape(options, [-1])
        repeated = tf.repeat(question, self.num_choices)
        parts = tf.strings.split(repeated, sep="_")
        filler = tf.gather(options, parts.value_rowids())
        pairs = tf.stack([parts.flat_values, filler], axis=1)  # part, option, part, option...
        interleaved = tf.RaggedTensor.from_row_lengths(tf.reshape(pairs, [-1]),
                                                       2 * parts.row_lengths())
        filled = tf.strings.reduce_join(interleaved[:, :-1], axis=1)
        has_blank = tf.strings.regex_full_match(repeated, "(?s).*_.*")
        return tf.where(has_blank, filled, tf.strings.join([repeated, options], " "))

    def pack(self, article_ids, qa_ids) -> dict:
        """Int RaggedTensors of the articles [batch, (pieces)] and the second segments [batch
        * num_choices, (pieces)] -> int32 `input_ids`, `input_mask`, `segment_ids` [batch,
        num_choices, length] (padded to the longest) and `cut` (bool [batch]: the article
        was cut for some option)."""
        choices = self.num_choices
        qa = keep_last(qa_ids, self.max_qa_length)
        batch = article_ids.nrows(out_type=tf.int32)
        article_ids = tf.gather(article_ids, tf.repeat(tf.range(batch), choices))
        context = keep_first(article_ids, tf.maximum(
            self.max_seq_length - 3 - qa.row_lengths(), 0))
        features = join_in_graph(context, qa, special=self.tokenizer)
        shape = tf.stack([batch, choices, -1])
        out = {name: tf.reshape(features[name], shape) for name in F.BACKBONE_INPUTS}
        cut = context.row_lengths() < article_ids.row_lengths()
        out["cut"] = tf.reduce_any(tf.reshape(cut, [-1, choices]), axis=1)
        return out

    def __call__(self, article, question, options) -> dict:
        """String tensors [batch], [batch], [batch, num_choices] -> `pack`'s dict, with the
        in-graph tokenizer."""
        return self.pack(self.tokenizer(article),
                         self.tokenizer(self.second_segments(question, options)))

    def _check(self, example) -> None:
        """A `RaceExample` built in code gets the reader's checks (`_check_passage`)."""
        where = f"RACE example {example.guid!r}"
        if not isinstance(example.article, str) or not isinstance(example.question, str):
            raise ValueError(f"{where}: article and question must be strings. Received: "
                             f"{type(example.article).__name__}, "
                             f"{type(example.question).__name__}")
        options = example.options
        if not isinstance(options, (list, tuple)) or not all(isinstance(o, str) for o in options):
            raise ValueError(f"{where}: options must be a list of {self.num_choices} strings "
                             f"(a string is not a list of options). Received: "
                             f"{example.options!r}")
        if len(example.options) != self.num_choices:
            raise ValueError(f"{where}: {len(example.options)} options, the model takes "
                             f"{self.num_choices}.")
        if example.level not in LEVELS:
            raise ValueError(f"{where}: level {example.level!r} is not one of {LEVELS}.")

    def features(self, examples, batch_size: int = 256):
        """(features with flat lists padded to `max_seq_length`, whether the article was cut)
        of each `RaceExample`, in order, with the Python tokenizer; `label_ids` 0 for an
        unlabelled one."""
        encode = self.tokenizer.encode
        pack = for_batches(self.pack, len(examples), batch_size, 2)
        for begin in range(0, len(examples), batch_size):
            batch = examples[begin:begin + batch_size]
            for example in batch:
                self._check(example)
            texts = self.second_segments(tf.constant([e.question for e in batch]),
                                         tf.constant([list(e.options) for e in batch]))
            out = pack(ragged_rows([encode(e.article) for e in batch]),
                       ragged_rows([encode(t.decode()) for t in texts.numpy()]))
            pad = self.max_seq_length - int(out[F.INPUT_IDS].shape[-1])
            arrays = {name: np.pad(out[name].numpy(), [(0, 0), (0, 0), (0, pad)])
                      for name in F.BACKBONE_INPUTS}
            cut = out["cut"].numpy().tolist()
            for i, example in enumerate(batch):
                features = {name: arrays[name][i].reshape(-1).tolist()
                            for name in F.BACKBONE_INPUTS}
                features.update({LABEL_IDS: [example.label or 0], IS_REAL_EXAMPLE: [1],
                                 RACE_LEVEL: [LEVELS.index(example.level)]})
                yield features, cut[i]


def example_features(example: RaceExample, tokenizer, max_seq_length: int,
                     max_qa_length: int) -> tuple[dict, bool]:
    """(features with flat lists, whether the article was cut) of one question
    (`RacePreprocessor.features`)."""
    return next(RacePreprocessor(tokenizer, max_seq_length, max_qa_length).features([example]))


def write_examples(examples, tokenizer, max_seq_length: int, max_qa_length: int, path: str,
                   shuffle_seed: int | None = None, pad_to_multiple: int = 1,
                   num_files: int = 1) -> dict:
    """The questions as TFRecords with JSON sidecars, atomically (kept when made from the same
    examples and settings); seeded order for training files, `is_real_example = 0` padding to
    a multiple of `pad_to_multiple`, `num_files` files (`albert_tf.records.write_records`).
    Returns the split's sidecar with `files`."""
    digest = hashlib.sha256(json.dumps(
        ["race", max_seq_length, max_qa_length, shuffle_seed, pad_to_multiple,
         tokenizer.sha256, tokenizer.do_lower_case, FEATURES_REVISION,
         [dataclasses.astuple(e) for e in examples]], ensure_ascii=False).encode()).hexdigest()
    num_files = files_for(len(examples), num_files)
    cached = read_cached(path, digest, num_files)
    if cached:
        return cached
    schema = race_schema(max_seq_length)
    order = np.arange(len(examples))
    if shuffle_seed is not None:
        order = np.random.default_rng([shuffle_seed, 0x8ACE]).permutation(len(examples))
    preprocessor = RacePreprocessor(tokenizer, max_seq_length, max_qa_length)
    records, cut = [], 0
    for features, was_cut in preprocessor.features([examples[i] for i in order.tolist()]):
        cut += int(was_cut)
        records.append(to_example(features, schema))
    padding = (-len(records)) % pad_to_multiple
    pad = {name: [0] * int(np.prod(shape)) for name, (shape, _) in schema.items()}
    records.extend([to_example(pad, schema)] * padding)
    meta = {"format": SIDECAR_FORMAT, "task": "race", "num_examples": len(records),
            "real_examples": len(examples), "padding_examples": padding,
            "truncated_examples": cut, "max_seq_length": max_seq_length,
            "max_qa_length": max_qa_length,
            "levels": {level: sum(e.level == level for e in examples) for level in LEVELS},
            "vocab_size": tokenizer.vocab_size, "spm_model_sha256": tokenizer.sha256,
            "digest": digest}
    return dict(meta, files=write_records(records, path, meta, num_files))


# ---------------------------------------------------------------------------------------------
class RaceTask(LabelledTask):
    """RACE through the one loop: cross entropy over the four options, averaged over the real
    questions of the global batch; accuracy overall and per level; the best checkpoint by
    accuracy."""

    name = "race"
    model_inputs = F.BACKBONE_INPUTS
    term_names = ("loss_sum", "count", "correct_sum")
    metric_names = ("cross_entropy", "accuracy", "accuracy_middle", "accuracy_high")
    best_metric = "accuracy"
    writer = "albert_tf.tasks.race.write_examples"

    def __init__(self, albert_config, max_seq_length: int, dropout_rate: float = 0.1):
        self.albert_config = albert_config
        self.max_seq_length = max_seq_length
        self.dropout_rate = dropout_rate

    def build_model(self, dtype=None, performance=None):
        return AlbertMultipleChoice(self.albert_config, NUM_CHOICES, self.dropout_rate, dtype,
                                    performance=performance)

    def schema(self):
        return race_schema(self.max_seq_length)

    def expected_sidecar(self):
        return {"format": SIDECAR_FORMAT, "max_seq_length": self.max_seq_length,
                "vocab_size": self.albert_config.vocab_size}

    def eval_outputs(self, outputs, features):
        prediction, label, _, real = self._per_example(outputs, features)
        return {"prediction": prediction, "label": label, "real": real,
                "level": tf.reshape(features[RACE_LEVEL], [-1])}

    def metrics(self, sums, collected=None):
        count = max(float(sums["count"]), 1.0)
        metrics = {"cross_entropy": float(sums["loss_sum"]) / count,
                   "accuracy": float(sums["correct_sum"]) / count}
        if collected:
            metrics.update(race_accuracy(collected["prediction"], collected["label"],
                                         collected["level"], collected["real"] > 0.5))
        return metrics


def race_accuracy(predictions, labels, levels, real=None) -> dict:
    """Accuracy overall and per level (`levels`: 0 middle, 1 high) over the real examples, with
    the counts."""
    predictions, labels, levels = map(np.asarray, (predictions, labels, levels))
    real = np.ones(len(labels), bool) if real is None else np.asarray(real, bool)
    correct = (predictions == labels) & real
    result = {"accuracy": float(correct.sum() / max(real.sum(), 1))}
    for i, level in enumerate(LEVELS):
        chosen = real & (levels == i)
        result[f"accuracy_{level}"] = float(correct[chosen].sum() / max(chosen.sum(), 1))
        result[f"examples_{level}"] = int(chosen.sum())
    return result
