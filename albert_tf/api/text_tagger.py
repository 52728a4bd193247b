"""`AlbertTextTagger`: ALBERT token classification as a Keras task model on raw words: words
in, one tag per word out; it fits, evaluates and predicts, and exports the SavedModel
`run_tagging --export_dir` writes.

    tagger = AlbertTextTagger.from_checkpoint(CKPT, spm_model_file=SPM, labels=TAGS,
                                              sequence_length=128)
    tagger.compile()                   # the official fine-tuning optimizer and schedule
    tagger.fit(x=sentences, y=tags, batch_size=32, epochs=3,
               validation_data=(dev_sentences, dev_tags))
    tagger.predict([["Obama", "visited", "Paris"]])    # [["B-PER", "O", "B-LOC"]]
    tagger.score(dev_sentences, dev_tags)   # token accuracy (and entity P/R/F1 for BIO tags)
    tagger.export(EXPORT_BASE)         # BASE/NAME/<version>, as run_tagging --export_dir

The model is `run_tagging`'s `AlbertTokenClassifier` with its logits [batch, seq, tags] as
the one output. Sentences (lists of words) become windows of token features with
`run_tagging`'s own `TaggingPreprocessor` (each word tokenized alone, its tag on its first
piece, the other pieces ignored by the loss and the metric; a long sentence split into windows
at word boundaries), and `predict` joins the windows' predictions back into one tag per word
(`TaggingPreprocessor.join_sentences`, as `TaggingTask.predict_tags`), so it tags as
`run_tagging --do_predict` does with the same weights. The loss is cross entropy averaged over
the labelled pieces (one per word) of each global batch, as `TaggingTask`'s, also under a
`tf.distribute` strategy (`TokenCrossEntropy`: the replicas' sums over the all-reduced count);
the metric is `token_accuracy`, the share of words tagged right.

Everything else is `AlbertTextClassifier`'s (`albert_tf.api.text_classifier.RawTextModel`):
checkpoint reading, `compile`'s optimizer and schedule, `fit`/`evaluate` with Keras
callbacks and strategies, the export.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from albert_tf import features as F
from albert_tf.tasks.tagging import IGNORE, TaggingPreprocessor, score_sentences
from albert_tf.api.text_classifier import (FINE_TUNING_DEFAULTS, RawTextModel, _unpack,
                                           batch_size_of, build_from_checkpoint,
                                           check_checkpoint_given, check_label_names,
                                           stored_labels)
from albert_tf.models.token_classifier import AlbertTokenClassifier


@keras.saving.register_keras_serializable(package="albert_tf")
class TokenAccuracy(keras.metrics.SparseCategoricalAccuracy):
    """Accuracy over the labelled positions (label != -100: each word's first piece), so the
    share of words whose tag is right."""

    def __init__(self, name="token_accuracy", **kwargs):
        super().__init__(name=name, **kwargs)

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = tf.convert_to_tensor(y_true)
        weight = tf.cast(tf.not_equal(y_true, IGNORE), tf.float32)
        if sample_weight is not None:
            weight *= tf.cast(sample_weight, tf.float32)
        return super().update_state(tf.maximum(y_true, 0), y_pred, sample_weight=weight)


@keras.saving.register_keras_serializable(package="albert_tf")
class TokenCrossEntropy(keras.losses.Loss):
    """Cross entropy of the logits [batch, seq, tags] averaged over the labelled pieces
    (label != -100) of the global batch, as `TaggingTask`'s loss (its `token_count`
    normalizer): each replica returns its pieces' summed loss over the count of all
    replicas' (all-reduced), so under a `tf.distribute` strategy the replicas' losses (and
    gradients) sum to one device's on the same batch. Keras's own mean would average each
    replica's mean, weighting a piece by how few labelled pieces its replica holds."""

    def __init__(self, name="token_cross_entropy", **kwargs):
        kwargs["reduction"] = "sum"
        super().__init__(name=name, **kwargs)

    def call(self, y_true, y_pred):
        y_true = tf.cast(y_true, tf.int32)
        labelled = tf.cast(tf.not_equal(y_true, IGNORE), tf.float32)
        losses = tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.maximum(y_true, 0), logits=tf.cast(y_pred, tf.float32)) * labelled
        count = tf.reduce_sum(labelled)
        context = tf.distribute.get_replica_context()
        if context is not None and context.num_replicas_in_sync > 1:
            count = context.all_reduce(tf.distribute.ReduceOp.SUM, count)
        return losses / tf.maximum(tf.stop_gradient(count), 1.0)

    def get_config(self):
        return {"name": self.name}


def check_sentences(x, name: str = "x") -> list:
    """`x` as a list of sentences, each a list of words; ValueError naming the row and the fix
    for a string where a list of words belongs, an empty sentence, or a word that is not a
    non-empty string without whitespace (the export splits sentences on whitespace)."""
    if x is None:
        raise ValueError(f"`{name}` is None; give a list of sentences, each a list of words, "
                         "e.g. [['Obama', 'visited', 'Paris']].")
    if isinstance(x, (str, bytes)):
        raise ValueError(f"`{name}` is one string; the tagger takes a list of sentences, each "
                         f"a list of words: pass [{name}.split()].")
    sentences = []
    for i, words in enumerate(x):
        if isinstance(words, (str, bytes)):
            raise ValueError(f"{name}[{i}] is a string ({words[:40]!r}), not a list of words: "
                             f"pass {name}[{i}].split() (or the sentence's words as a list).")
        words = list(words)
        if not words:
            raise ValueError(f"{name}[{i}] is an empty sentence (no words): drop it; a "
                             "sentence needs at least one word to tag.")
        for j, word in enumerate(words):
            if not isinstance(word, str) or not word or word.split() != [word]:
                raise ValueError(f"{name}[{i}][{j}] is {word!r}: a word is a non-empty string "
                                 "without whitespace (the export splits sentences on "
                                 "whitespace); split it into words or drop it.")
            try:
                word.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ValueError(f"{name}[{i}][{j}] is {word!r}, not valid Unicode text ("
                                 f"{e.reason} at {e.start}: a lone surrogate, e.g. from bytes "
                                 "decoded with errors='surrogateescape'): decode the text as "
                                 "UTF-8, or fix or drop the word.") from None
        sentences.append(words)
    return sentences


def check_tags(y, sentences, labels, names=("x", "y")) -> list:
    """`y` as one list of tags per sentence, each tag one of `labels`; ValueError naming the
    row and the fix otherwise."""
    x_name, y_name = names
    if isinstance(y, (str, bytes)):
        raise ValueError(f"`{y_name}` is one string; give one list of tags per sentence.")
    rows = list(y)
    if len(rows) != len(sentences):
        raise ValueError(f"{len(sentences)} sentences in {x_name} but {len(rows)} rows in "
                         f"{y_name}: give one list of tags per sentence.")
    known = set(labels)
    out = []
    for i, (words, tags) in enumerate(zip(sentences, rows)):
        if isinstance(tags, (str, bytes)):
            raise ValueError(f"{y_name}[{i}] is a string ({tags[:40]!r}), not a list of tags: "
                             f"give one tag per word of {x_name}[{i}], as a list.")
        tags = list(tags)
        if len(tags) != len(words):
            raise ValueError(f"{x_name}[{i}] has {len(words)} words but {y_name}[{i}] has "
                             f"{len(tags)} tags: give exactly one tag per word.")
        unknown = [t for t in tags if t not in known]
        if unknown:
            raise ValueError(f"{y_name}[{i}]: tag {unknown[0]!r} is not one of the model's "
                             f"{len(labels)} tags {list(labels)}: fix the tag, or build the "
                             "tagger with the full tag set (`labels=` of from_checkpoint).")
        out.append(tags)
    return out


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertTextTagger(RawTextModel):
    """An `AlbertTokenClassifier` whose output is its logits [batch, seq, num_tags], with the
    vocabulary's `AlbertTextPreprocessor` and `run_tagging`'s windowing.

    Args:
        token_classifier: an `AlbertTokenClassifier` of `len(labels)` tags (kept as it is,
            but for its pooler, frozen: the logits never read it).
        preprocessor: the `AlbertTextPreprocessor` of the model's vocabulary (its tokenizer
            and `sequence_length`, the windows' length).
        labels: the tag names (index = tag id), distinct.

    `fit`, `evaluate`: `x` a list of sentences, each a list of words; `y` one list of tags
    (names from `labels`) per sentence; or a batched `tf.data.Dataset` of (token features,
    label ids [batch, seq], -100 where ignored). `predict(x)`: one list of tags per sentence,
    one tag per word. `score(x, y)`: word-level `token_accuracy` and, for BIO tags, entity
    precision, recall and F1 (`albert_tf.tasks.entity_metrics`, seqeval's default mode).
    """

    HEAD_ARG = "token_classifier"
    LABELS_NAME = "tags"

    def __init__(self, token_classifier, preprocessor, labels, **kwargs):
        inputs = dict(token_classifier.input)
        logits = token_classifier(inputs)["logits"]
        super().__init__(inputs=inputs, outputs=logits, **kwargs)
        self._check_parts(token_classifier, preprocessor)
        labels = [] if labels is None else labels
        if len(labels) != token_classifier.num_labels or len(set(labels)) != len(labels):
            raise ValueError(f"`labels` must be {token_classifier.num_labels} distinct tag "
                             f"names, one per output of the model. Received: {labels}")
        labels = check_label_names(labels)
        # The pooler is off the logits' path: frozen, so Keras does not warn on every `fit`
        # that it has no gradient (the training loop gives it a zero one).
        token_classifier.backbone.pooler.trainable = False
        self.token_classifier = token_classifier
        self.preprocessor = preprocessor
        self.labels = labels
        self.tagging = TaggingPreprocessor(preprocessor.tokenizer, labels,
                                           preprocessor.sequence_length)
        self.init_report = None
        self._fit_schedule = None  # (learning_rate, warmup_steps, warmup_proportion)

    @classmethod
    def from_checkpoint(cls, checkpoint, spm_model_file=None, labels=None, sequence_length=None,
                        albert_config_file=None, vocab_file=None, do_lower_case=None,
                        dropout_rate=FINE_TUNING_DEFAULTS["dropout_rate"],
                        init_from_group0=False):
        """A tagger of the tags `labels` initialised from `checkpoint`, any source
        `--init_checkpoint` takes (as `AlbertTextClassifier.from_checkpoint`): a token
        classifier of as many tags (a `run_tagging` output directory, a saved tagger) keeps
        its head, and where it records its tags (run_tagging's labels.json, a `.keras`
        tagger's config) only for the same list in the same order (the same tags in another
        order: ValueError; other tags: a new head, warned); any other source gives its
        encoder and a new head. `labels=None` adopts the tags the checkpoint records.
        `sequence_length` is `run_tagging`'s `--max_seq_length` (the windows' length;
        None: the one a run's config.yaml records, else 128); `do_lower_case=None`, the
        casing the checkpoint records (as `AlbertTextClassifier.from_checkpoint`), else True."""
        check_checkpoint_given(cls, AlbertTokenClassifier, checkpoint)
        if labels is None:
            labels = stored_labels(checkpoint)[0]  # a tagger's own tags, in its order
        if labels is None or (not isinstance(labels, np.ndarray) and not labels):
            raise ValueError("`labels` (the tag set, a list of tag names such as "
                             "['O', 'B-PER', 'I-PER']) is required: the head has one output "
                             "per tag (labels=None adopts the tags a checkpoint records: "
                             "run_tagging's labels.json, a saved tagger's).")
        labels = check_label_names(labels)
        return build_from_checkpoint(
            cls, AlbertTokenClassifier, len(labels), checkpoint, spm_model_file, sequence_length,
            albert_config_file, vocab_file, do_lower_case, dropout_rate, init_from_group0,
            labels=labels)

    def _default_loss_and_metrics(self):
        """Cross entropy averaged over the labelled pieces, and token accuracy."""
        return TokenCrossEntropy(), [TokenAccuracy()]

    # -----------------------------------------------------------------------------------------
    def fit(self, x=None, y=None, batch_size=None, epochs=1, validation_data=None, **kwargs):
        """Keras `fit` on sentences and tags (`RawTextModel.fit`: the default optimizer's
        schedule spans this call); `validation_data=(sentences, tags)`."""
        if validation_data is not None and not isinstance(validation_data, tf.data.Dataset):
            dev_x, dev_y, weight = _unpack(validation_data)
            if weight is not None:
                raise ValueError("`validation_data` takes (sentences, tags); every word "
                                 "weighs the same, no sample weights.")
            validation_data = self._windows_dataset(
                dev_x, dev_y, batch_size_of(batch_size, "train_batch_size"), False,
                ("validation_data[0]", "validation_data[1]"))
        return super().fit(x, y, batch_size=batch_size, epochs=epochs,
                           validation_data=validation_data, **kwargs)

    def predict(self, x, batch_size=None, **kwargs):
        """One list of tags per sentence of `x` (lists of words), one tag per word: each word
        tagged by its first piece, in the window of that piece. `[]` gives `[]`."""
        if kwargs.get("steps") is not None:
            raise ValueError("`steps` is not supported: predict tags every window of every "
                             "sentence (fewer steps would drop words); pass fewer sentences "
                             "instead.")
        kwargs.pop("steps", None)
        if x is not None and not isinstance(x, (str, bytes)) and len(x := list(x)) == 0:
            return []
        features, _, windows = self._windows(x)
        data = tf.data.Dataset.from_tensor_slices((features,)).batch(
            batch_size_of(batch_size, "predict_batch_size"))
        logits = super().predict(data, **kwargs)
        built = sum(len(ws) for ws in windows)
        if len(logits) != built:
            raise ValueError(f"predict gave {len(logits)} windows of logits for the {built} "
                             "windows of the sentences: every window must be predicted.")
        return self.tagging.join_sentences(windows, logits.argmax(-1))

    def score(self, x, y, batch_size=None) -> dict:
        """Word-level `token_accuracy` of `predict(x)` against the tags `y`, and for a BIO tag
        set `entity_precision`, `entity_recall`, `entity_f1` (as `run_tagging`'s
        eval and test results: `albert_tf.tasks.tagging.score_sentences`)."""
        if y is None:
            raise ValueError("score(): `y` is None; give the true tags of `x`, one list of "
                             "tags per sentence.")
        sentences = check_sentences(x)
        if not sentences:
            raise ValueError("`x` holds no sentences: give at least one sentence (a list of "
                             "words).")
        tags = check_tags(y, sentences, self.labels)
        return score_sentences(self.labels, tags,
                               self.predict(sentences, batch_size, verbose=0))

    def _windows(self, x, y=None, names=("x", "y")):
        """(features {name: int32 [windows, seq]}, label ids [windows, seq] or None,
        [[Window]] per sentence) of sentences `x` and tags `y`."""
        sentences = check_sentences(x, names[0])
        if not sentences:
            raise ValueError(f"`{names[0]}` holds no sentences: give at least one sentence "
                             "(a list of words).")
        tags = None if y is None else check_tags(y, sentences, self.labels, names)
        windows = self.tagging.windows_of([(words, None if tags is None else tags[i],
                                            f"{names[0]}[{i}]")
                                           for i, words in enumerate(sentences)])
        flat = [w for ws in windows for w in ws]
        features = {name: np.array([w.features[name] for w in flat], np.int32)
                    for name in F.BACKBONE_INPUTS}
        labels = None if tags is None else np.array([w.features[F.LABEL_IDS] for w in flat],
                                                    np.int32)
        return features, labels, windows

    def _windows_dataset(self, x, y, batch_size, shuffle, names=("x", "y")):
        features, labels, _ = self._windows(x, y, names)
        data = tf.data.Dataset.from_tensor_slices(
            (features,) if labels is None else (features, labels))
        if shuffle:
            data = data.shuffle(len(features[F.INPUT_IDS]), reshuffle_each_iteration=True)
        return data.batch(batch_size).prefetch(tf.data.AUTOTUNE)

    def _dataset(self, x, y, sample_weight, batch_size: int, shuffle) -> tf.data.Dataset:
        if sample_weight is not None:
            raise ValueError("`sample_weight` is not supported: every labelled word weighs "
                             "the same (the loss is the mean over words, as run_tagging's).")
        if isinstance(x, tf.data.Dataset):
            if y is not None:
                raise ValueError("With a dataset `x`, its elements carry the label ids; `y` "
                                 "must be None.")
            return x
        return self._windows_dataset(x, y, batch_size, shuffle)

    # -----------------------------------------------------------------------------------------
    def export(self, export_dir, version=None, **kwargs):
        """Writes the TF Serving SavedModel that `run_tagging --export_dir` writes
        (`albert_tf.export.saved_model.export_saved_model` with `albert_tf.export.serving_tagging`:
        `serving_default` takes sentences and splits them on whitespace, one tag per word;
        `serve_tokens`), `export_dir` being `BASE/NAME`, a new version under it. Other
        keyword arguments go to `export_saved_model`. Returns the version directory."""
        return self._export(export_dir, version, labels=self.labels, **kwargs)
