"""`AlbertTextClassifier`: ALBERT sequence classification as a Keras task model that fits,
evaluates and predicts on raw text (one segment or pairs), and exports the SavedModel the
commands write.

    clf = AlbertTextClassifier.from_checkpoint(CKPT, spm_model_file=SPM, num_classes=2,
                                               sequence_length=128)
    clf.compile()                      # the official fine-tuning optimizer and schedule
    clf.fit(x=texts, y=labels, batch_size=32, epochs=3, validation_data=(dev_x, dev_y))
    clf.fit(x="train.csv", validation_data="dev.csv")   # your own files (below)
    probs = clf.predict(["a gripping film", "dull and flat"])   # [2, num_classes]
    clf.export(EXPORT_BASE)            # BASE/NAME/<version>, as --export_dir writes

The model is the `AlbertClassifier` of `run_classifier` (backbone, dropout, dense head) with
its logits as the one output, so Keras losses and metrics apply; the text goes through an
`AlbertTextPreprocessor` inside `tf.data` (tokenized and packed as `run_classifier`'s
features), so the model itself sees token ids, as under any `tf.distribute` strategy.

Pieces shared with the commands, never copied: the checkpoint readers
(`albert_tf.checkpoints.initialize_from_checkpoint` / `initialize_backbone`, as
`--init_checkpoint`), the tokenizer and packing, the optimizer and its update
(`albert_tf.training.optimization`), the defaults of `run_classifier`'s flags, and the exporter
(`albert_tf.export.saved_model.export_saved_model`, imported by `_export` when it is called, so
that loading the Keras API does not load the serving code; docs/architecture.md).

Your own files: `fit`, `evaluate` and `predict` also take the path of a CSV, TSV or JSON Lines
file (`x="train.csv"`, `validation_data="dev.tsv"`; a `str` with one of those extensions, or any
`os.PathLike`: one that names no file is "No such file", in `predict` too; a text that ends so
is given in a list, `predict(["notes.csv"])`), read by the reader of `run_classifier
--task_name custom` (`albert_tf.tasks.glue.read_table_examples`): the text from the column
`text_a_column` (default "text"; `text_b_column` for pairs), the label from `label_column`
(default "label"), names given to `from_checkpoint` (which takes a custom run's recorded
columns where none are given). A model without `labels` takes the
training file's (sorted, integers in numeric order; as many as `num_classes`); a label outside
the model's is an error naming the file, line and column. `predict`'s file may lack the label
column.

`RawTextModel` holds what does not depend on the task (checkpoint reading, `compile`, `fit`,
`evaluate`, the export); `albert_tf.api.text_tagger.AlbertTextTagger` is its other subclass.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import numbers
import os
import warnings
import zipfile

import keras
import numpy as np
import tensorflow as tf

from albert_tf.models.backbone import Performance
from albert_tf.checkpoints import (CheckpointError, CheckpointMismatchError, initialize_backbone,
                                   initialize_from_checkpoint)
from albert_tf.checkpoints.conversion import (carried_tokenizer, checkpoint_config, keras_settings,
                                              recorded_labels)
from albert_tf.checkpoints.runs import (delivered_checkpoint, recorded_run_setting,
                                       run_model_kind, split_run_checkpoint, training_run)
from albert_tf.models.classifier import AlbertClassifier
from albert_tf.training.controller import NonFiniteLossError
from albert_tf.configs.definitions import RULES, SETTINGS
from albert_tf.models.kinds import registered
from albert_tf.training.optimization import KerasFitOptimizer, OffsetSchedule, WarmupPolynomialDecay
from albert_tf.api.preprocessing import AlbertTextPreprocessor, text_columns
from albert_tf.tasks import glue
from albert_tf.tasks.tables import EXTENSIONS, TableError
from albert_tf.training.train_lib import TrainingConfig

# `run_classifier`'s defaults (its flags; the loop's for clipping and weight decay).
_LOOP_DEFAULTS = {f.name: f.default for f in dataclasses.fields(TrainingConfig)}
FINE_TUNING_DEFAULTS = {"optimizer": SETTINGS["optimizer"].default,
                        "learning_rate": SETTINGS["learning_rate"].default,
                        "warmup_steps": SETTINGS["warmup_step"].default,
                        "weight_decay_rate": _LOOP_DEFAULTS["weight_decay_rate"],
                        "clip_norm": _LOOP_DEFAULTS["clip_norm"],
                        "dropout_rate": SETTINGS["dropout_rate"].default}


def check_number(name: str, value, flag: str, integer: bool = False):
    """`value` of the argument `name`, checked by the range of the command flag `--flag`
    (its definition's rule, `albert_tf.configs.definitions`: the commands refuse the same
    numbers at parse time);
    ValueError naming the argument, the range and the value otherwise (nan, inf, a bool, a
    string, a float where an integer belongs)."""
    test, wanted = RULES[SETTINGS[flag].rule]
    kind = numbers.Integral if integer else numbers.Real
    if isinstance(value, bool) or not isinstance(value, kind) or not test(float(value)):
        raise ValueError(f"`{name}` must be {wanted}{' (an integer)' if integer else ''}, as "
                         f"the commands' --{flag}; got {value!r}.")
    return value


def batch_size_of(batch_size, flag: str) -> int:
    """`batch_size`, checked by the range of `--flag` (an integer > 0); None: 32, Keras's."""
    return 32 if batch_size is None else check_number("batch_size", batch_size, flag,
                                                      integer=True)


class _StopOnNonFinite(keras.callbacks.Callback):
    """Ends `fit` as the commands' loop ends a run (`Controller.stop_non_finite`): the default
    optimizer's finiteness gate (`KerasFitOptimizer`) closed on a step whose gradient or
    updated weights are not finite, so that step (and any after it in the same execution) was
    not applied; the gate is opened again and `NonFiniteLossError` names the step and the fix.
    With an optimizer of your own (no gate) a non-finite loss ends `fit` the same way, its
    weights possibly written (`save` and `export` then refuse them)."""

    def _steps(self) -> tuple[str, int, int]:
        """The optimizer steps of the last execution ("step N" or "steps A-B"), N, and the
        steps per execution: read only when a stop is reported."""
        last = int(self.model.optimizer.iterations.numpy())
        per_call = int(getattr(self.model, "steps_per_execution", 1) or 1)
        steps = f"step {last}" if per_call == 1 else f"steps {last - per_call + 1}-{last}"
        return steps, last, per_call

    def on_train_batch_end(self, batch, logs=None):
        model, optimizer = self.model, self.model.optimizer
        if isinstance(optimizer, KerasFitOptimizer):
            gate = optimizer.update_gate
            if float(gate.numpy()) >= 0.5:
                return  # the one read of a step that went well
            steps, last, per_call = self._steps()
            gate.assign(1.0)
            if per_call == 1:
                optimizer.iterations.assign(last - 1)  # the step counts as not run
            rate = getattr(model, "_fit_schedule", None)
            raise NonFiniteLossError(
                f"fit(): non-finite loss, gradient or updated weights at optimizer {steps}; "
                "that step was not applied, so the model is the one after the step before "
                "(its weights finite). Compile with a lower learning_rate"
                f"{f' (now {rate[0]!r})' if rate else ''}, or check the data (the labels, "
                "the sample weights).")
        loss = (logs or {}).get("loss")
        if loss is not None and not np.isfinite(float(loss)):
            steps = self._steps()[0]
            raise NonFiniteLossError(
                f"fit(): the loss is {float(loss)} at optimizer {steps}, and your optimizer "
                "has no finiteness gate: its weights may hold nan or inf now (save() and "
                "export() refuse them). Use a lower learning rate, or compile() with the "
                "default optimizer, whose gate never applies a non-finite step.")


def _checkpoint_directory(checkpoint: str) -> str:
    path = os.fspath(checkpoint).removesuffix(":best")
    run = split_run_checkpoint(path)
    if run:
        return run[0]
    return path if os.path.isdir(path) else os.path.dirname(path)


def fine_tuned_heads(report: dict) -> list:
    """The entries of a backbone read's report (`skipped`) that belong to a head other than
    the pretraining heads (a fine-tuned classifier's, tagger's, span model's head): what a
    classifier of other labels would drop by reading only the backbone."""
    pretrainer = registered()["pretrainer"]
    pretraining = tuple(pretrainer.official_head_prefixes) + tuple(pretrainer.hf_head_prefixes)
    return sorted(name for name, reason in (report.get("skipped") or {}).items()
                  if "head" in str(reason) and not name.removeprefix("albert.").startswith(
                      pretraining))


def _delivered_model(checkpoint) -> str:
    """What a classifier reads of `checkpoint`: for a fine-tuning run's directory given bare,
    `RUN:best` where its evaluation kept one (the model its runner predicts with and exports:
    `--do_predict`, `--export_dir`, `convert`), for its head and its encoder alike; anything
    else as given (a pretraining run's directory: its latest, as `--init_checkpoint`)."""
    path = os.fspath(checkpoint)
    run = training_run(path) if os.path.isdir(path) else None
    if run and delivered_checkpoint(run[0]) == "best":
        return f"{run[0]}:best"
    return path


def initialize_classifier(classifier: AlbertClassifier, checkpoint: str,
                          init_from_group0: bool = False, new_head: str | None = None) -> dict:
    """Fills `classifier` from `checkpoint` with the commands' readers: the whole model where
    the source is a classifier of the same labels (a fine-tuning run, a fine-tuned TF1 or
    Hugging Face classifier: `initialize_from_checkpoint`), else its backbone, the source's
    heads dropped and reported (`initialize_backbone`, as `--init_checkpoint`). Both are
    strict: a failed read assigns nothing. A fine-tuning run's directory is read at the
    model it delivers (`_delivered_model`). Returns the reader's report, with `head`
    ("checkpoint" or "new") and `read` (what was read). `new_head` (a reason): the backbone
    only, whatever the source."""
    source = _delivered_model(checkpoint)
    try:
        if new_head:
            raise CheckpointError(new_head)
        report = initialize_from_checkpoint(classifier, source,
                                            init_from_group0=init_from_group0)
        return dict(report, head="checkpoint", read=source)
    except (CheckpointError, CheckpointMismatchError, KeyError) as whole:
        report = initialize_backbone(classifier.backbone, source,
                                     init_from_group0=init_from_group0)
        if not new_head and not fine_tuned_heads(report):
            # The usual path: a pretrained model (its pretraining heads, or none) gives the
            # encoder and the new head starts from the initializer, as the fine-tuning
            # commands do; nothing of a fine-tuned head is dropped (the report says what is).
            return dict(report, head="new", read=source)
        # Said, not silent: a fine-tuned head of other labels is dropped here.
        warnings.warn(f"{source}: its encoder is read, and a new head of "
                      f"{classifier.num_labels} classes starts from the initializer (the "
                      f"checkpoint is not a classifier of {classifier.num_labels} classes: "
                      f"{str(whole)[:300]})", stacklevel=4)  # the caller of from_checkpoint
        return dict(report, head="new", read=source)


def check_checkpoint_given(cls, head_class, checkpoint) -> None:
    """ValueError unless `checkpoint` is a path (from_checkpoint(None) was os.fspath's
    TypeError), saying how a model from random weights is built instead."""
    if not isinstance(checkpoint, (str, os.PathLike)) or not os.fspath(checkpoint):
        raise ValueError(f"from_checkpoint({checkpoint!r}): give the path of a pretrained "
                         "model (a run's --output_dir, a .keras file, a TF1 checkpoint, a "
                         "Hugging Face folder); a model from random weights is built "
                         f"directly: {cls.__name__}({head_class.__name__}(AlbertConfig(...), "
                         "...), AlbertTextPreprocessor(SPM, sequence_length)).")


def check_label_names(labels, name: str = "labels") -> list:
    """`labels` as a list of distinct non-empty strings (index = id). Refused, with the fix:
    an unordered collection (a set or dict: its order varies between processes, so ids
    would), a string, non-string or empty names, duplicates. A numpy array of strings is
    converted."""
    if isinstance(labels, np.ndarray):
        labels = labels.tolist()
    if isinstance(labels, (str, bytes)):
        raise ValueError(f"`{name}` is one string ({labels[:40]!r}); give a list of names, "
                         "one per output, in id order, e.g. ['O', 'B-PER', 'I-PER'].")
    if isinstance(labels, (collections.abc.Set, collections.abc.Mapping)) or not isinstance(
            labels, collections.abc.Sequence):
        raise ValueError(f"`{name}` is a {type(labels).__name__}: the names must be in a fixed "
                         "order (index = id), and a set's or dict's order can change from one "
                         f"process to the next; pass a list, e.g. sorted({name}).")
    labels = list(labels)
    bad = [x for x in labels if not isinstance(x, str) or not x]
    if bad:
        raise ValueError(f"`{name}` holds {bad[0]!r}: each name is a non-empty string; pass "
                         f"e.g. [str(x) for x in {name}] (and drop empty names).")
    seen = collections.Counter(labels)
    dup = [x for x, n in seen.items() if n > 1]
    if dup:
        raise ValueError(f"`{name}` names {dup[0]!r} {seen[dup[0]]} times: each name must be "
                         f"distinct (one per output); remove the duplicates. Received: {labels}")
    return labels


def stored_labels(checkpoint) -> tuple:
    """(labels, where) that `checkpoint` records: a `.keras` file's config `labels`, else its
    directory's (`recorded_labels`: a run's labels.json, our directory's albert_tf.json, a
    Hugging Face folder's id2label); (None, None) where it records none."""
    path = os.fspath(checkpoint)
    if path.endswith(".keras") and os.path.isfile(path):
        labels = keras_settings(path)["labels"]
        return (list(labels), f"{path} (its config)") if labels else (None, None)
    return recorded_labels(_checkpoint_directory(path))


def recorded_columns(checkpoint, text_a_column=None, text_b_column=None,
                     label_column=None) -> dict:
    """The table columns of a classifier read from `checkpoint`: those given; where
    `text_a_column` is None, the text columns the run `checkpoint` records if it is a
    `--task_name custom` run (its config.yaml's `--text_a_column` and, unless `text_b_column`
    is given, `--text_b_column`), else "text" (one text); where `label_column` is None, the
    run's `--label_column`, else "label". A `text_b_column` given with a `text_a_column`
    given is taken as it is (None: one text)."""
    if text_a_column is not None and label_column is not None:
        return {"text_a_column": text_a_column, "text_b_column": text_b_column,
                "label_column": label_column}  # all given: the run's config.yaml is not read
    run = training_run(os.fspath(checkpoint))
    custom = run is not None and recorded_run_setting(run[0], "task_name", str) == "custom"

    def recorded(name):
        return recorded_run_setting(run[0], name, str) if custom else None

    if text_a_column is None:
        text_a_column = recorded("text_a_column") or "text"
        if text_b_column is None:
            text_b_column = recorded("text_b_column")
    return {"text_a_column": text_a_column, "text_b_column": text_b_column,
            "label_column": label_column or recorded("label_column") or "label"}


def recorded_classes(checkpoint, labels=None) -> int:
    """The number of classes of a classifier read from `checkpoint` where none is given: the
    `labels` given, else what the checkpoint records (a fine-tuning run's recorded num_labels,
    1 for a regression run; the class names a saved classifier records, `stored_labels`),
    else 2 (a pretrained encoder, another task's run)."""
    if labels is not None:
        return len(labels)
    run = training_run(os.fspath(checkpoint))
    if run:
        kind, num_labels = run_model_kind(run[0])
        return num_labels if num_labels and registered().get(kind) is \
            registered()["classifier"] else 2
    stored = stored_labels(checkpoint)[0]
    return len(stored) if stored else 2


def head_labels(labels, checkpoint, kind: str = "tags"):
    """The reason to start a new head (a str), or None to keep the checkpoint's if it has one
    of as many outputs: a checkpoint that records its labels keeps its head only for the
    same list. The same names in another order: ValueError naming both lists and the fix
    (its head would rename them by position)."""
    stored, where = stored_labels(checkpoint)
    if stored is None or labels is None or list(labels) == stored:
        return None
    if sorted(stored) == sorted(labels):
        raise ValueError(
            f"{checkpoint} was trained on the {kind} {stored} ({where}), and `labels` gives "
            f"the same {kind} in another order: {list(labels)}. Its head would rename them by "
            f"position. Pass labels={stored} (the checkpoint's order) or labels=None to adopt "
            "them.")
    return (f"its {kind} {stored} ({where}) are not `labels` {list(labels)}: the head is not "
            "kept")


def build_from_checkpoint(cls, head_class, num_labels, checkpoint, spm_model_file,
                           sequence_length, albert_config_file, vocab_file, do_lower_case,
                           dropout_rate, init_from_group0, **kwargs):
    """A `RawTextModel` subclass `cls`: `cls(head_class(config, num_labels), preprocessor,
    **kwargs)` read from `checkpoint` (`initialize_classifier`), its report kept as
    `init_report`. A checkpoint that records its labels keeps its head only for the same
    `labels` list (`head_labels`)."""
    check_number("dropout_rate", dropout_rate, "dropout_rate")
    check_checkpoint_given(cls, head_class, checkpoint)
    if kwargs.get("labels") is not None:
        kwargs["labels"] = check_label_names(kwargs["labels"])
    new_head = head_labels(kwargs.get("labels"), checkpoint, cls.LABELS_NAME)
    config = checkpoint_config(checkpoint, albert_config_file)
    given_vocabulary = bool(spm_model_file or vocab_file)
    carried = carried_tokenizer(checkpoint, check=not given_vocabulary)
    if not given_vocabulary:
        spm_model_file = carried["spm_model_file"]
        if not spm_model_file:
            raise CheckpointError(f"No SentencePiece model with {checkpoint}: pass "
                                  "spm_model_file= (or vocab_file= for WordPiece).")
    if do_lower_case is None:  # the casing the checkpoint records, else the official True
        do_lower_case = carried["do_lower_case"] is not False
    if sequence_length is None:  # a run's own --max_seq_length, else 128
        run = training_run(os.fspath(checkpoint))
        sequence_length = (run and recorded_run_setting(run[0], "max_seq_length", int)) or 128
    preprocessor = AlbertTextPreprocessor(spm_model_file, sequence_length, do_lower_case,
                                          vocab_file=vocab_file)
    # The commands' default: padding removed (same results, faster).
    head = head_class(config, num_labels, dropout_rate=dropout_rate,
                      performance=Performance(remove_padding=True))
    report = initialize_classifier(head, checkpoint, init_from_group0, new_head)
    if kwargs.get("labels") is None and report["head"] == "checkpoint":
        stored = stored_labels(checkpoint)[0]  # the names the kept head was trained on
        if stored is not None and len(stored) == num_labels:
            kwargs["labels"] = stored
    model = cls(head, preprocessor, **kwargs)
    model.init_report = report
    return model


class RawTextModel(keras.Model):
    """What `AlbertTextClassifier` and `albert_tf.api.text_tagger.AlbertTextTagger` share: a
    registered ALBERT head model (`albert_model`: backbone, dropout, dense head; the argument
    and `get_config` key named `HEAD_ARG`) whose logits are the one output, the
    `AlbertTextPreprocessor` of its vocabulary, reading from any checkpoint
    (`build_from_checkpoint`), `compile` with the official fine-tuning optimizer and a
    schedule over what each `fit` runs, `evaluate`, and the commands' export (`_export`).
    A subclass gives `_dataset(x, y, sample_weight, batch_size, shuffle)` (a batched dataset
    of features and labels) and `_default_loss_and_metrics()`."""

    HEAD_ARG = "classifier"
    LABELS_NAME = "labels"  # what a checkpoint's record calls its class names

    @property
    def albert_model(self):
        """The registered ALBERT model it wraps (what checkpoint readers and export take)."""
        return getattr(self, self.HEAD_ARG)

    @staticmethod
    def _check_parts(model, preprocessor) -> None:
        if preprocessor.vocab_size != model.config.vocab_size:
            raise ValueError(f"The preprocessor's vocabulary has {preprocessor.vocab_size} "
                             f"pieces but the model's vocab_size is "
                             f"{model.config.vocab_size}.")
        if preprocessor.sequence_length > model.config.max_position_embeddings:
            raise ValueError(f"`sequence_length` {preprocessor.sequence_length} exceeds the "
                             "model's max_position_embeddings "
                             f"{model.config.max_position_embeddings}.")

    def _trained_on(self) -> None:
        """Called by `fit` once its training dataset is made (a subclass notes its form)."""

    # -----------------------------------------------------------------------------------------
    # Training.
    def compile(self, optimizer="auto", loss="auto", metrics="auto", learning_rate=None,
                warmup_steps=None, warmup_proportion=None, **kwargs):
        """Keras `compile` with the official fine-tuning defaults.

        `optimizer="auto"`: `run_classifier`'s AdamW (`KerasFitOptimizer`: no bias
        correction, weight decay 0.01 with LayerNorm and biases excluded, the summed gradient
        clipped to global norm 1.0) at `learning_rate` (default the flag's, 5e-5), with linear
        warmup over `warmup_steps` (default 0, the flag's) or `warmup_proportion` of the steps,
        then linear decay to 0 at the last step of each `fit` (its epochs x steps per epoch).
        `loss="auto"` and `metrics="auto"`: the model's (`_default_loss_and_metrics`).

        The numbers have the ranges of the commands' flags (`check_number`): `learning_rate`
        a finite number > 0 (as --learning_rate: nan, inf, 0 and negative rates are a
        ValueError; there is no upper bound, as the commands have none), `warmup_steps` an
        integer >= 0, `warmup_proportion` between 0 and 1. The default optimizer applies no
        step whose gradient or updated weights are not finite: `fit` then stops with
        `NonFiniteLossError` naming the step, the model as it was before it (the commands'
        gate; a rate so large that the weights overflow, e.g. 1e6, ends so).

        5e-5 is the official rate for albert-base and larger; a small pretrained model
        underfits at it and wants a larger one, e.g. `learning_rate=2e-4`: issue 57's filer
        measured 0.668 test accuracy at 5e-5 against 0.744 at 2e-4 on a 6-class set (their
        figures, one run each; docs/training.md, "Fine-tuning in Python").
        """
        self._check_strategy("compile()")
        if learning_rate is not None:
            check_number("learning_rate", learning_rate, "learning_rate")
        if warmup_steps is not None:
            check_number("warmup_steps", warmup_steps, "warmup_step", integer=True)
        if warmup_proportion is not None:
            check_number("warmup_proportion", warmup_proportion, "warmup_proportion")
        auto = optimizer == "auto" and loss == "auto" and metrics == "auto" and not kwargs
        self._auto_compile = dict(learning_rate=learning_rate, warmup_steps=warmup_steps,
                                  warmup_proportion=warmup_proportion) if auto else None
        if optimizer == "auto":
            if warmup_steps is not None and warmup_proportion is not None:
                raise ValueError("Give `warmup_steps` or `warmup_proportion`, not both.")
            lr = FINE_TUNING_DEFAULTS["learning_rate"] if learning_rate is None \
                else learning_rate
            self._fit_schedule = (lr, warmup_steps, warmup_proportion)
            with self.distribute_strategy.scope():
                optimizer = KerasFitOptimizer(
                    learning_rate=lr, clip_norm=FINE_TUNING_DEFAULTS["clip_norm"],
                    weight_decay_rate=FINE_TUNING_DEFAULTS["weight_decay_rate"],
                    layer_adaptation=FINE_TUNING_DEFAULTS["optimizer"] == "lamb")
        elif learning_rate is not None or warmup_steps is not None \
                or warmup_proportion is not None:
            raise ValueError("`learning_rate`, `warmup_steps` and `warmup_proportion` set "
                             "the default optimizer; with your own, set them on it.")
        else:
            self._fit_schedule = None
        default_loss, default_metrics = self._default_loss_and_metrics()
        super().compile(optimizer=optimizer, loss=default_loss if loss == "auto" else loss,
                        metrics=default_metrics if metrics == "auto" else metrics, **kwargs)

    def _check_strategy(self, what: str) -> None:
        """ValueError where `what` runs under a strategy scope the model was not built in."""
        strategy = tf.distribute.get_strategy()
        if tf.distribute.has_strategy() and not strategy.extended.variable_created_in_scope(
                self.albert_model.weights[0].value):
            raise ValueError(
                f"{what} is called under a tf.distribute strategy scope the model was not "
                "built in: its variables belong to another strategy. Call from_checkpoint "
                "(or build the model) inside `with strategy.scope():`, then compile and fit.")

    def get_compile_config(self):
        """`compile`'s own arguments where the defaults were compiled (optimizer, loss and
        metrics "auto"), so a `.keras` file reloads compiled (`compile_from_config`)."""
        if self.compiled and getattr(self, "_auto_compile", None) is not None:
            scheduled = isinstance(getattr(self.optimizer, "_learning_rate", None),
                                   keras.optimizers.schedules.LearningRateSchedule)
            return {"albert_tf_auto": dict(self._auto_compile),
                    "optimizer_state": {"built": bool(self.optimizer.built),
                                        "scheduled": scheduled}}
        return super().get_compile_config()

    def compile_from_config(self, config):
        if "albert_tf_auto" not in config:
            return super().compile_from_config(config)
        self.compile(**config["albert_tf_auto"])
        state = config.get("optimizer_state", {})
        if state.get("scheduled"):  # the saved optimizer had no learning-rate variable
            self._plan_schedule(1)  # planned again by the next fit
        if state.get("built") and self.built:
            self.optimizer.build(self.trainable_variables)  # its saved state loads into it
        return None

    def _check_fit_args(self, what: str, x, y) -> None:
        """ValueError, with the fix, for what Keras would fail on less clearly."""
        self._check_strategy(what)
        if y is None and not isinstance(x, tf.data.Dataset):
            raise ValueError(f"{what}: `y` is None; give the labels of `x` as `y` (or a "
                             "dataset `x` of (inputs, labels)).")

    def fit(self, x=None, y=None, batch_size=None, epochs=1, validation_data=None,
            shuffle=True, sample_weight=None, steps_per_epoch=None, initial_epoch=0,
            **kwargs):
        """Keras `fit` on raw text. With the default optimizer, the learning-rate schedule
        spans this call: warmup from its first step, 0 after its last (`epochs -
        initial_epoch` times `steps_per_epoch`, or the batches of `x`)."""
        if kwargs.get("validation_split"):
            raise ValueError("`validation_split` is not supported on raw text: pass "
                             "`validation_data=(x, y)` (held-out texts and their labels).")
        self._check_fit_args("fit()", x, y)
        batch_size = batch_size_of(batch_size, "train_batch_size")
        train = self._dataset(x, y, sample_weight, batch_size, shuffle)
        self._trained_on()
        if validation_data is not None:
            validation_data = self._dataset(*_unpack(validation_data), batch_size,
                                            shuffle=False)
        if self._fit_schedule is not None:
            if steps_per_epoch is None:
                steps_per_epoch = int(train.cardinality())
                if steps_per_epoch < 0:
                    raise ValueError("The number of batches of `x` is unknown: pass "
                                     "`steps_per_epoch` (the schedule's length depends on it).")
            self._plan_schedule(steps_per_epoch * (epochs - initial_epoch))
        callbacks = kwargs.pop("callbacks", None)
        if isinstance(callbacks, keras.callbacks.CallbackList):
            callbacks.append(_StopOnNonFinite())
        else:
            callbacks = [*(callbacks or ()), _StopOnNonFinite()]
        return super().fit(train, epochs=epochs, validation_data=validation_data,
                           shuffle=False,  # done above, the dataset reshuffled each epoch
                           steps_per_epoch=steps_per_epoch, initial_epoch=initial_epoch,
                           callbacks=callbacks, **kwargs)

    def _plan_schedule(self, num_train_steps: int) -> None:
        """The default optimizer's schedule over the next `num_train_steps` steps."""
        if num_train_steps < 1:
            raise ValueError(f"`fit` would run {num_train_steps} steps; the schedule needs 1 "
                             "or more (epochs > initial_epoch, steps_per_epoch >= 1).")
        lr, warmup_steps, warmup_proportion = self._fit_schedule
        if warmup_steps is None:
            warmup_steps = int(num_train_steps * warmup_proportion) if warmup_proportion \
                else FINE_TUNING_DEFAULTS["warmup_steps"]
        start = int(self.optimizer.iterations.numpy())
        self.optimizer.learning_rate = OffsetSchedule(
            WarmupPolynomialDecay(lr, num_train_steps, warmup_steps), offset=start)
        self.train_function = None  # traced again with the new schedule

    def evaluate(self, x=None, y=None, batch_size=None, sample_weight=None, **kwargs):
        """Keras `evaluate` on raw text (or a batched dataset of text and labels)."""
        if kwargs.get("_use_cached_eval_dataset"):  # `fit`'s validation: preprocessed there
            return super().evaluate(x, y, batch_size=batch_size, sample_weight=sample_weight,
                                    **kwargs)
        self._check_fit_args("evaluate()", x, y)
        data = self._dataset(x, y, sample_weight,
                             batch_size_of(batch_size, "eval_batch_size"), shuffle=False)
        return super().evaluate(data, **kwargs)

    # -----------------------------------------------------------------------------------------
    # Saving: never weights that are not finite (as the commands' `Controller.save`).
    def _check_weights_finite(self, what: str) -> None:
        bad = [v.path for v in self.weights if not np.isfinite(v.numpy()).all()]
        if bad:
            raise NonFiniteLossError(
                f"{what}: the model's weights are not finite ({len(bad)} hold nan or inf, "
                f"e.g. {bad[0]}); nothing is written. Rebuild the model (from_checkpoint) or "
                "load good weights, and train with a lower learning rate.")

    def save(self, filepath, *args, **kwargs):
        """Keras `save` (a `.keras` file), refused (`NonFiniteLossError`, nothing written)
        where a weight is nan or inf."""
        self._check_weights_finite(f"save({os.fspath(filepath)!r})")
        path = os.fspath(filepath)
        if os.path.isfile(path) and not zipfile.is_zipfile(path):
            raise FileExistsError(f"save({path!r}): {path} exists and is not a saved Keras "
                                  "model (not a .keras archive); it is not written over. "
                                  "Choose another path, or remove the file first.")
        return super().save(filepath, *args, **kwargs)

    def save_weights(self, filepath, *args, **kwargs):
        """Keras `save_weights`, refused (`NonFiniteLossError`, nothing written) where a
        weight is nan or inf."""
        self._check_weights_finite(f"save_weights({os.fspath(filepath)!r})")
        return super().save_weights(filepath, *args, **kwargs)

    def _export(self, export_dir, version=None, **kwargs):
        """`albert_tf.export.saved_model.export_saved_model` of the ALBERT model, the text packed as
        here (imported here: see the module docstring); `kwargs` go to it. Refused
        (`NonFiniteLossError`, nothing written) where a weight is nan or inf."""
        from albert_tf.export.saved_model import export_saved_model

        self._check_weights_finite(f"export({os.fspath(export_dir)!r})")

        pre = self.preprocessor
        spm = pre.spm_model_file
        kwargs.setdefault("source", {"type": type(self).__name__})
        return export_saved_model(
            self.albert_model, os.fspath(export_dir), spm, version=version,
            max_seq_length=pre.sequence_length, do_lower_case=pre.do_lower_case,
            vocab_file=None if spm else pre.vocab_file, **kwargs)

    def get_config(self):
        return {self.HEAD_ARG: keras.saving.serialize_keras_object(self.albert_model),
                "preprocessor": keras.saving.serialize_keras_object(self.preprocessor),
                "labels": self.labels, "name": self.name}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        pre = config["preprocessor"].get("config", {})
        for key in ("spm_model_file", "vocab_file"):
            if pre.get(key) and not os.path.exists(pre[key]):
                raise FileNotFoundError(
                    f"The model's vocabulary, {key}={pre[key]!r}, is gone: a `.keras` file "
                    "records its path, not the file. Put the file back at that path (keep it "
                    "beside the model's checkpoint), or rebuild the model with "
                    "from_checkpoint(..., spm_model_file=...) and load_weights.")
        for key in (cls.HEAD_ARG, "preprocessor"):
            config[key] = keras.saving.deserialize_keras_object(config[key])
        return cls(**config)


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertTextClassifier(RawTextModel):
    """An `AlbertClassifier` whose output is its logits [batch, num_classes], with the text
    preprocessor that feeds it.

    Args:
        classifier: an `AlbertClassifier` (kept as it is; `num_labels` is `num_classes`, 1 for
            regression).
        preprocessor: the `AlbertTextPreprocessor` of the model's vocabulary.
        labels: optional class names (the export's `classify` signature serves them).

    `fit`, `evaluate` and `predict` take raw text (`x`: a list of strings, a list of
    `(text_a, text_b)` pairs, or a tuple of the two columns `(text_a, text_b)`: a tuple of
    sequences is always columns, a list always rows, `preprocessing.text_columns`; `y`: class
    ids, or finite floats for regression) or a batched `tf.data.Dataset` of
    `(text, label)` with `text` a string tensor or a tuple of two; `predict` returns
    probabilities (softmax of the logits), or the value for regression [n, 1].
    """

    def __init__(self, classifier, preprocessor, labels=None, text_a_column="text",
                 text_b_column=None, label_column="label", **kwargs):
        inputs = dict(classifier.input)
        logits = classifier(inputs)["logits"]
        super().__init__(inputs=inputs, outputs=logits, **kwargs)
        self._check_parts(classifier, preprocessor)
        if labels is not None:
            labels = check_label_names(labels)
        if labels is not None and len(labels) != classifier.num_labels:
            raise ValueError(f"{len(labels)} label names for {classifier.num_labels} classes.")
        self.classifier = classifier
        self.preprocessor = preprocessor
        self.labels = list(labels) if labels is not None else None
        self.text_a_column, self.text_b_column = text_a_column, text_b_column
        self.label_column = label_column
        self.text_pair = None  # what `fit` was given, for the export's serving_default
        self._pairs = None  # what the last dataset was made of
        self.init_report = None
        self._fit_schedule = None  # (learning_rate, warmup_steps, warmup_proportion)

    @property
    def num_classes(self) -> int:
        return self.classifier.num_labels

    @classmethod
    def from_checkpoint(cls, checkpoint, spm_model_file=None, num_classes=None,
                        sequence_length=None, albert_config_file=None, vocab_file=None,
                        do_lower_case=None, dropout_rate=FINE_TUNING_DEFAULTS["dropout_rate"],
                        labels=None, init_from_group0=False, text_a_column=None,
                        text_b_column=None, label_column=None):
        """A classifier initialised from `checkpoint`, any source `--init_checkpoint` takes: a
        pretraining or fine-tuning run's output directory (`DIR:best`, `DIR/ckpt-N`), an
        official TF1 checkpoint or TF-Hub module directory, a Hugging Face folder, our model
        directory or `.keras` file (`initialize_classifier`: a fine-tuned classifier of
        `num_classes` keeps its head). A fine-tuning run's directory gives the model its
        runner predicts with and exports: its best evaluated checkpoint where evaluation kept
        one, else its latest (`init_report["read"]` names what was read); a pretraining run's
        gives its latest encoder, as `--init_checkpoint`. `labels=None` with a kept head
        adopts the class names the checkpoint records (a run's labels.json, a saved
        classifier's). The config comes from the checkpoint
        (`checkpoint_config`) unless `albert_config_file` is given; `spm_model_file` defaults
        to the `.model` file in the checkpoint's directory (a run keeps its own there), and
        `do_lower_case` to the casing the checkpoint records (`carried_tokenizer`: a `.keras`
        model's, a run's config.yaml, our directory's, a Hugging Face tokenizer_config.json),
        else True.
        `sequence_length=None`: the `--max_seq_length` a run's config.yaml records (a run's
        model predicts as its runner did), else 128.
        `num_classes=1` is regression (STS-B); None: the classes the checkpoint records
        (`recorded_classes`: a fine-tuning run's, a saved classifier's named classes), else 2.
        `text_a_column`, `text_b_column` and `label_column` name the columns of the files
        `fit`, `evaluate` and `predict` may be given (the module docstring); None: the columns
        a `--task_name custom` run records (`recorded_columns`), else "text" (one text) and
        "label"."""
        check_checkpoint_given(cls, AlbertClassifier, checkpoint)  # a path before reading it
        if num_classes is None:
            num_classes = recorded_classes(checkpoint, labels)
        return build_from_checkpoint(
            cls, AlbertClassifier, num_classes, checkpoint, spm_model_file, sequence_length,
            albert_config_file, vocab_file, do_lower_case, dropout_rate, init_from_group0,
            labels=labels, **recorded_columns(checkpoint, text_a_column, text_b_column,
                                              label_column))

    def _default_loss_and_metrics(self):
        """Sparse categorical cross entropy on the logits and accuracy (regression: mean
        squared error, as STS-B, and no metric)."""
        if self.num_classes == 1:
            return keras.losses.MeanSquaredError(), []
        return (keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                [keras.metrics.SparseCategoricalAccuracy(name="accuracy")])

    def _trained_on(self) -> None:
        self.text_pair = self._pairs  # the export serves what the last `fit` trained on

    def get_config(self):
        return dict(super().get_config(), text_a_column=self.text_a_column,
                    text_b_column=self.text_b_column, label_column=self.label_column)

    # -----------------------------------------------------------------------------------------
    # Your own files.
    @staticmethod
    def _is_file(x) -> bool:
        """Whether `x` names a table file: any `os.PathLike`, or a `str` with a table extension
        (`EXTENSIONS`), a file or not (one that names none is "No such file" in `_file_data`,
        never a text: a text ending so is given in a list)."""
        if isinstance(x, os.PathLike):
            return True
        return isinstance(x, str) and os.path.splitext(x)[1].lower() in EXTENSIONS

    def _file_data(self, x, y, split: str):
        """(texts, labels) of the table file `x` (`glue.read_table_examples`, the columns the
        model names); `x`, `y` as they are when `x` is not a file. "train": a model without
        labels takes the file's (`glue.label_set`); "test": the labels may be absent (None)."""
        if not self._is_file(x):
            return x, y
        path = os.fspath(x)
        if not os.path.exists(path):
            raise TableError(f"No such file: {path} (a str ending in "
                             f"{', '.join(sorted(EXTENSIONS)[:-1])} or {sorted(EXTENSIONS)[-1]} "
                             "is a file's path; to predict such a text, pass a list: "
                             "predict([text])).")
        if y is not None:
            raise ValueError(f"{path}: the file holds the labels (its column "
                             f"{self.label_column!r}); `y` must be None.")
        regression = self.num_classes == 1
        adopt = split == "train" and self.labels is None and not regression
        examples = glue.read_table_examples(
            path, self.text_a_column, self.text_b_column,
            None if split == "test" else self.label_column, split,
            labels=None if adopt else self.labels, regression=regression,
            labels_from="the model (its `labels`)",
            names=("from_checkpoint's text_a_column", "from_checkpoint's text_b_column",
                   "from_checkpoint's label_column"))
        if adopt:
            found = glue.label_set(examples)
            if len(found) != self.num_classes:
                raise ValueError(f"{path} has {len(found)} labels {found}, and the model has "
                                 f"{self.num_classes} classes: build it with "
                                 f"from_checkpoint(..., num_classes={len(found)}).")
            self.labels = found
        texts = [e.text_a if e.text_b is None else (e.text_a, e.text_b) for e in examples]
        if any(e.label is None for e in examples):
            return texts, None
        if regression:
            return texts, [e.label for e in examples]
        if self.labels is None:
            raise ValueError(f"{path}: the model has no label names to map the file's labels "
                             "to ids: fit it on a file first, or give from_checkpoint(..., "
                             "labels=[...]).")
        ids = {name: i for i, name in enumerate(self.labels)}
        return texts, np.array([ids[e.label] for e in examples], np.int32)

    def fit(self, x=None, y=None, batch_size=None, epochs=1, validation_data=None, **kwargs):
        """Keras `fit` (`RawTextModel.fit`); `x` (and `validation_data`) may be a table file's
        path (the module docstring)."""
        x, y = self._file_data(x, y, "train")
        if validation_data is not None and self._is_file(validation_data):
            validation_data = self._file_data(validation_data, None, "dev")
        return super().fit(x, y, batch_size=batch_size, epochs=epochs,
                           validation_data=validation_data, **kwargs)

    def evaluate(self, x=None, y=None, batch_size=None, sample_weight=None, **kwargs):
        """Keras `evaluate` (`RawTextModel.evaluate`); `x` may be a table file's path."""
        if not kwargs.get("_use_cached_eval_dataset"):
            x, y = self._file_data(x, y, "dev")
        return super().evaluate(x, y, batch_size=batch_size, sample_weight=sample_weight,
                                **kwargs)

    def predict(self, x, batch_size=None, **kwargs):
        """Probabilities [n, num_classes] (softmax of the logits); regression: the value
        [n, 1]. `x` may be a table file's path (its label column, if any, is not read)."""
        x, _ = self._file_data(x, None, "test")
        logits = super().predict(self._dataset(
            x, None, None, batch_size_of(batch_size, "predict_batch_size"), shuffle=False),
                                 **kwargs)
        if self.num_classes == 1:
            return logits
        return tf.nn.softmax(tf.constant(logits, tf.float32), axis=-1).numpy()

    def _dataset(self, x, y, sample_weight, batch_size: int, shuffle) -> tf.data.Dataset:
        """A batched dataset of (features, y[, sample_weight]) from raw text or a dataset."""
        if isinstance(x, tf.data.Dataset):
            if y is not None or sample_weight is not None:
                raise ValueError("With a dataset `x`, its elements carry the labels; "
                                 "`y` and `sample_weight` must be None.")
            spec = x.element_spec
            text = spec[0] if isinstance(spec, tuple) and not all(
                isinstance(s, tf.TensorSpec) and s.dtype == tf.string for s in spec) else spec
            text = text if isinstance(text, tuple) else (text,)
            if any(s.shape.rank == 0 for s in text):
                raise ValueError(
                    "The dataset's texts are single strings (rank 0): the model takes batches. "
                    "Batch it first: `dataset.batch(32)`.")
            self._pairs = len(text) == 2
            return x.map(self.preprocessor, num_parallel_calls=tf.data.AUTOTUNE).prefetch(
                tf.data.AUTOTUNE)
        text_a, text_b = text_columns(x)
        self._pairs = text_b is not None
        text = text_a if text_b is None else (text_a, text_b)
        n = len(text_a)
        columns = [_labels(y, n, self.num_classes)] if y is not None else []
        if sample_weight is not None:
            weights = np.asarray(sample_weight, np.float32).reshape(n)
            _check_finite_rows(weights, "sample_weight", "a sample weight",
                               "a finite number >= 0", allow_negative=False)
            columns.append(weights)
        data = tf.data.Dataset.from_tensor_slices(
            (tf.nest.map_structure(lambda c: tf.constant(c, tf.string), text), *columns)
            if columns else (tf.nest.map_structure(lambda c: tf.constant(c, tf.string), text),))
        if shuffle:
            data = data.shuffle(n, reshuffle_each_iteration=True)
        return data.batch(batch_size).map(
            lambda *batch: self.preprocessor(*batch),
            num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)

    # -----------------------------------------------------------------------------------------
    # Export.
    def export(self, export_dir, labels=None, text_pair=None, version=None, **kwargs):
        """Writes the TF Serving SavedModel that `run_classifier --export_dir` and
        `python -m albert_tf.export.export_saved_model` write
        (`albert_tf.export.saved_model.export_saved_model`: `export_dir` is `BASE/NAME`, a new
        version under it; raw-text `serving_default`, `classify`/`regress`, token and tf.Example
        signatures), the text packed as here. `text_pair` (default: whether `fit` was given pairs)
        makes `serving_default` take `text` and `text_b`; `labels` (default the model's) name the
        classes; other keyword arguments go to `export_saved_model`. Returns the version
        directory."""
        return self._export(
            export_dir, version, labels=labels or self.labels,
            text_pair=bool(self.text_pair) if text_pair is None else text_pair, **kwargs)


def _unpack(validation_data):
    """(x, y, sample_weight) of `validation_data`: a dataset, or a tuple of 2 or 3."""
    if isinstance(validation_data, tf.data.Dataset):
        return validation_data, None, None
    if isinstance(validation_data, (tuple, list)) and len(validation_data) in (2, 3):
        return tuple(validation_data) + (None,) * (3 - len(validation_data))
    raise ValueError("`validation_data` must be (texts, labels), (texts, labels, "
                     "sample_weights) or a dataset.")


def _check_finite_rows(values: np.ndarray, name: str, what: str, wanted: str,
                       allow_negative: bool = True) -> None:
    """ValueError naming the first row of `values` [n] that is not finite (or, without
    `allow_negative`, below 0), e.g. "`y`[3] (a regression target) is nan"."""
    good = np.isfinite(values) if allow_negative else np.isfinite(values) & (values >= 0)
    if not good.all():
        rows = np.flatnonzero(~good)
        raise ValueError(
            f"`{name}`[{rows[0]}] ({what}) is {float(values[rows[0]])}: each must be {wanted}; "
            f"fix or drop that row ({len(rows)} such row{'s' if len(rows) > 1 else ''}: "
            f"{rows[:5].tolist()}).")


def _labels(y, n: int, num_classes: int) -> np.ndarray:
    """Class ids int32 [n] (regression: float32 [n, 1]), checked against `num_classes`."""
    if num_classes == 1:
        values = np.asarray(y, np.float32)
        if values.size != n:
            raise ValueError(f"{values.size} regression targets for {n} texts.")
        _check_finite_rows(values.reshape(n), "y", "a regression target",
                           "a finite number (nan and inf train every weight to nan)")
        return values.reshape(n, 1)
    values = np.asarray(y)
    if values.shape != (n,) or not np.issubdtype(values.dtype, np.integer):
        raise ValueError(f"`y` must be {n} class ids (integers 0 to {num_classes - 1}). "
                         f"Received: shape {values.shape}, dtype {values.dtype}.")
    if values.min() < 0 or values.max() >= num_classes:
        raise ValueError(f"`y` holds class ids outside 0..{num_classes - 1}: "
                         f"{sorted(set(values[(values < 0) | (values >= num_classes)]))[:5]}.")
    return values.astype(np.int32)
