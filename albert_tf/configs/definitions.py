"""The settings of an experiment, each defined once: its default, its range, its help, its
choices and its section, as fields of typed sections (`TaskSettings`, `ModelSettings`,
`TrainerSettings` with its `OptimizationSettings` and `ScheduleSettings`, `RuntimeSettings`;
`ExperimentSettings` holds the four).

Everything else is generated from these fields: the command-line flags
(`albert_tf.commands.flags.define` defines a setting by its name), their range checks at parse
time (`problem`), the section a setting has in `--config_file` and in a run's config.yaml
(`section_of`), and the loop's defaults (`albert_tf.training.train_lib.TrainingConfig` takes the
official `run_pretraining.py` ones from `PRETRAINING_DEFAULTS`). A command may change a
default (`define(..., max_seq_length=384)`: the official run_squad value), never a meaning.
tests/test_definitions.py walks these fields and every command's flags.

Names are the official google-research/albert flag names, so one name means one thing in the
flags, the config files and the code. A config file keeps the four sections flat (`trainer:
learning_rate`), as written since config.yaml began; the nesting of `TrainerSettings` groups
its fields for a reader and is not a level of the file.

No TensorFlow and no absl here: the flags' help, their checks and a config file's sections load
in a fraction of a second.
"""

from __future__ import annotations

import dataclasses
import math
import numbers

NAN = float("nan")

# Range rules: (test, what the value must be). None (a setting left unset) always passes.
RULES = {
    "positive": (lambda v: math.isfinite(v) and v > 0, "a finite number > 0"),
    "non_negative": (lambda v: math.isfinite(v) and v >= 0, "a finite number >= 0"),
    "probability": (lambda v: math.isfinite(v) and 0 <= v <= 1, "between 0 and 1"),
    "positive_probability": (lambda v: math.isfinite(v) and 0 < v <= 1,
                             "above 0 and at most 1"),
    "dropout": (lambda v: math.isfinite(v) and 0 <= v < 1, "at least 0 and below 1"),
    # [CLS], one piece, [SEP]: a shorter sequence holds no text at all.
    "sequence": (lambda v: math.isfinite(v) and v >= 3, "at least 3 ([CLS], a piece, [SEP])"),
    "finite": (math.isfinite, "a finite number"),
    "seed": (lambda v: v == -1 or 0 <= v < 2 ** 32,
             "-1 (a fresh seed) or a seed from 0 to 2^32 - 1"),
    "finite_or_nan": (lambda v: not math.isinf(v), "a finite number (nan: none)"),
}
KINDS = ("string", "integer", "float", "bool", "enum", "list")


def rule_problem(name: str, rule: str, value) -> str | None:
    """Why `value` of --`name` breaks the range `rule` (a RULES name), or None; a bool is no
    number."""
    test, wanted = RULES[rule]
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and test(value):
        return None
    return f"--{name} must be {wanted}"


@dataclasses.dataclass(frozen=True)
class Setting:
    """One setting as the flags and the config files see it."""

    name: str
    section: str  # task, model, trainer or runtime
    kind: str  # one of KINDS: the flag's parser
    default: object
    help: str
    choices: tuple = ()
    rule: str | None = None  # a RULES name
    group: str | None = None  # the group of its section that holds it (the trainer's optimization
    # and schedule), or None: a field of the section itself

    def problem(self, value) -> str | None:
        """Why `value` is not a value of this setting (one of its choices, within its range),
        or None. What the flag parser refuses at parse time and the loop's settings
        (`TrainingConfig`) refuse when built from Python."""
        if value is None:
            return None
        if self.choices and value not in self.choices:
            return f"--{self.name} must be one of {', '.join(self.choices)}"
        if self.kind == "integer" and (isinstance(value, bool)
                                       or not isinstance(value, numbers.Integral)):
            return f"--{self.name} must be an integer"
        return None if self.rule is None else rule_problem(self.name, self.rule, value)


_TYPES = {"string": str, "integer": int, "float": float, "bool": bool, "enum": str, "list": list}


def setting(kind: str, default, help: str, *, choices=(), rule: str | None = None):
    """A field of a settings section: its default, and what the flag and checks need. A
    definition that contradicts itself (a kind, rule or choices that do not exist or do not
    fit, a default of another type or outside its choices) is refused when this module loads."""
    fits = (kind in KINDS and (rule is None or (rule in RULES and kind in ("integer", "float")))
            and (kind == "enum") == bool(choices)
            and isinstance(choices, tuple) and all(isinstance(c, str) for c in choices)
            and (default is None or (isinstance(default, _TYPES[kind])
                                     and (kind != "integer" or not isinstance(default, bool))
                                     and (not choices or default in choices))))
    if not fits:
        raise ValueError(f"a setting of kind {kind!r}, default {default!r}, rule {rule!r}, "
                         f"choices {choices!r} contradicts itself")
    return dataclasses.field(default=default, metadata={
        "kind": kind, "help": help, "choices": tuple(choices), "rule": rule})


@dataclasses.dataclass(frozen=True)
class TaskSettings:
    """What is learned from what data: the task, its files, its decoding."""

    task_name: str | None = setting(
        "string", None,
        "The task to run.")
    data_dir: str | None = setting(
        "string", None,
        "Directory of the task's original files.")
    input_file: str | None = setting(
        "string", None,
        "Input files: comma-separated globs.")
    eval_input_file: str | None = setting(
        "string", None,
        "Evaluation TFRecords (default: --input_file).")
    max_predictions_per_seq: int = setting(
        "integer", 20,
        "Masked positions per sequence.", rule="positive")
    train_file: str | None = setting(
        "string", None,
        "Training data: the SQuAD JSON (or zip) for run_squad_*; the features "
        "TFRecord for run_race (written if absent).")
    dev_file: str | None = setting(
        "string", None,
        "The file to evaluate on (--do_eval).")
    test_file: str | None = setting(
        "string", None,
        "The file to predict (--do_predict); it may lack the labels.")
    predict_file: str | None = setting(
        "string", None,
        "Data to predict (and score where it has answers): the SQuAD JSON (or zip) "
        "for run_squad_*; the features TFRecord for run_race (written if absent).")
    eval_file: str | None = setting(
        "string", None,
        "Dev features TFRecord (written if absent).")
    cached_dir: str | None = setting(
        "string", None,
        "Where the feature TFRecords go (default: --output_dir).")
    train_feature_file: str | None = setting(
        "string", None,
        "Training features TFRecord (default: OUTPUT_DIR/train.tfrecord).")
    predict_feature_file: str | None = setting(
        "string", None,
        "Prediction features TFRecord (default: OUTPUT_DIR/predict.tfrecord).")
    predict_feature_left_file: str | None = setting(
        "string", None,
        "Accepted for compatibility.")
    train_examples: int = setting(
        "integer", 0,
        "Fine-tune on the first N examples of the train split only (0: all of them): "
        "a few-label setting or a learning curve.", rule="non_negative")
    # --task_name custom (run_classifier): your own table.
    text_a_column: str = setting(
        "string", "text",
        "--task_name custom: the column of the text (the first text of a pair).")
    text_b_column: str | None = setting(
        "string", None,
        "--task_name custom: the column of the second text of a pair (none: one text "
        "per example).")
    label_column: str = setting(
        "string", "label",
        "--task_name custom: the column of the label.")
    num_labels: int = setting(
        "integer", 0,
        "--task_name custom: 1 for regression (the label is a number); 0: the labels "
        "are the training file's (a number > 1 is checked against them, and keeps a "
        "file of scores as classes).", rule="non_negative")
    # Decoding and the task heads' own settings.
    doc_stride: int = setting(
        "integer", 128,
        "SQuAD: stride between context windows (pieces).", rule="positive")
    max_query_length: int = setting(
        "integer", 64,
        "SQuAD: question pieces kept.", rule="positive")
    n_best_size: int = setting(
        "integer", 20,
        "SQuAD: start and end candidates per window.", rule="positive")
    max_answer_length: int = setting(
        "integer", 30,
        "SQuAD: longest answer, in pieces.", rule="positive")
    null_score_diff_threshold: float = setting(
        "float", 0.0,
        "SQuAD 2.0: answer \"\" when the null score minus the best span's score exceeds"
        " this (BERT's flag; eval_results.json gives the best one as best_f1_thresh).",
        rule="finite")
    start_n_top: int = setting(
        "integer", 5,
        "Start candidates of the answer-class model's beam (official); an error with "
        "--v2_head null_score.", rule="positive")
    end_n_top: int = setting(
        "integer", 5,
        "End candidates per start of the answer-class model's beam (official); an "
        "error with --v2_head null_score.", rule="positive")
    max_qa_length: int = setting(
        "integer", 128,
        "RACE: pieces of question + option kept (the last).", rule="positive")
    high_only: bool = setting(
        "bool", False,
        "Only high-school passages.")
    middle_only: bool = setting(
        "bool", False,
        "Only middle-school passages.")
    classifier_dropout_prob: float = setting(
        "float", 0.1,
        "Dropout on the sequence output before the tagging layer (Hugging Face's "
        "name).", rule="dropout")
    # The commands that read a finished model (export, analysis, convert).
    model_dir: str | None = setting(
        "string", None,
        "Our model directory or SavedModel export, a .keras file, or a pretraining "
        "--output_dir.")
    checkpoint: str | None = setting(
        "string", None,
        "For a training run's --output_dir: latest, best, or a checkpoint prefix (default: "
        "the run's model: a fine-tuning run's best evaluated checkpoint, else its latest; a "
        "pretraining run's latest).")
    output: str | None = setting(
        "string", None,
        "Where the result is written (never over existing work).")
    output_file: str | None = setting(
        "string", None,
        "The file to write.")
    overwrite: bool = setting(
        "bool", False,
        "Replace an existing output that holds other work (without it, that is an "
        "error).")
    labels: list | None = setting(
        "list", None,
        "Class names of a classifier (default: 0, 1, ...).")
    text_pair: bool = setting(
        "bool", False,
        "The text signature takes text and text_b.")
    top_k: int = setting(
        "integer", 5,
        "Fill-mask answers per [MASK].", rule="positive")

@dataclasses.dataclass(frozen=True)
class ModelSettings:
    """The architecture file, the pretrained weights, the vocabulary, the sequence length, the
    seed, the heads' dropout."""

    albert_config_file: str | None = setting(
        "string", None,
        "Model config JSON (official keys).")
    init_checkpoint: str | None = setting(
        "string", None,
        "Pretrained weights: an official TF1 checkpoint or TF-Hub module, a Hugging "
        "Face folder, our model directory or .keras file, or a pretraining "
        "--output_dir (DIR:best for its best checkpoint).")
    init_from_group0: bool = setting(
        "bool", False,
        "Initialize every layer group from group 0 of --init_checkpoint (official "
        "fallback).")
    albert_hub_module_handle: str | None = setting(
        "string", None,
        "A TF-Hub module of ALBERT (TF1 format, as Google released them) in a local "
        "directory: the model starts from its weights (as --init_checkpoint would). A"
        " URL is refused: nothing is downloaded; download and unpack the module "
        "first.")
    spm_model_file: str | None = setting(
        "string", None,
        "SentencePiece model of the model's vocabulary.")
    vocab_file: str | None = setting(
        "string", None,
        "With --spm_model_file: the official .vocab file (piece and score per line) "
        "of that model, checked to hold the same pieces in the same order (a mismatch"
        " is an error); --spm_model_file is the tokenizer. Alone: a WordPiece "
        "vocabulary (a token per line, e.g. the Chinese models' vocab_chinese.txt), "
        "the tokenizer then, as the official FullTokenizer without a SentencePiece "
        "model.")
    do_lower_case: bool = setting(
        "bool", True,
        "Lowercase the text (as the vocabulary was made; the released models: true).")
    max_seq_length: int = setting(
        "integer", 512,
        "Packed sequence length in pieces ([CLS] and [SEP] included).", rule="sequence")
    random_seed: int = setting(
        "integer", 12345,
        "Seed of every random draw (initialization, dropout, data order); the same "
        "command gives the same result. -1 draws a fresh one.", rule="seed")
    dropout_prob: float = setting(
        "float", 0.1,
        "Dropout on the task head's input.", rule="dropout")
    dropout_rate: float = setting(
        "float", 0.1,
        "Dropout on the pooled output (official 0.1).", rule="dropout")
    v2_head: str = setting(
        "enum", "answer_class",
        "answer_class (default): the official ALBERT v2 model (start over the "
        "context, end conditioned on the start with a beam of --start_n_top x "
        "--end_n_top, an answer-class head). null_score: BERT's span head, the null "
        "answer scored at [CLS] (not official ALBERT).", choices=("answer_class", "null_score"))

@dataclasses.dataclass(frozen=True)
class OptimizationSettings:
    """The optimizer and its peak learning rate (official flags)."""

    optimizer: str = setting(
        "enum", "adamw",
        "Optimizer: ALBERT's LAMB or AdamW (both with decoupled weight decay, "
        "LayerNorm and biases excluded).", choices=("lamb", "adamw"))
    learning_rate: float = setting(
        "float", 5e-05,
        "Peak learning rate.", rule="positive")
    poly_power: float = setting(
        "float", 1.0,
        "Power of the polynomial decay.", rule="non_negative")

@dataclasses.dataclass(frozen=True)
class ScheduleSettings:
    """How long and how the learning rate warms up: the fine-tuning runners' names
    (train_step, warmup_step; SQuAD's epochs and warmup share) and run_pretraining's
    (num_train_steps, num_warmup_steps, start_warmup_step)."""

    train_step: int = setting(
        "integer", 1000,
        "Optimizer steps.", rule="positive")
    warmup_step: int = setting(
        "integer", 0,
        "Linear warmup steps.", rule="non_negative")
    num_train_epochs: float = setting(
        "float", 3.0,
        "Epochs over the training features.", rule="positive")
    warmup_proportion: float = setting(
        "float", 0.1,
        "Share of the steps spent warming up.", rule="probability")
    num_train_steps: int = setting(
        "integer", 125000,
        "Optimizer steps.", rule="positive")
    num_warmup_steps: int = setting(
        "integer", 3125,
        "Linear warmup steps.", rule="non_negative")
    start_warmup_step: int = setting(
        "integer", 0,
        "Step at which warmup starts.", rule="non_negative")

@dataclasses.dataclass(frozen=True)
class TrainerSettings:
    """What a run does, its batches, its checkpoints and its export; the optimizer and the
    schedule as their own groups."""

    output_dir: str | None = setting(
        "string", None,
        "Checkpoints, summaries, metrics and predictions go here.")
    do_train: bool = setting(
        "bool", False,
        "Train.")
    do_eval: bool = setting(
        "bool", False,
        "Evaluate on the dev split (each checkpoint when training); the best "
        "checkpoint is kept.")
    do_predict: bool = setting(
        "bool", False,
        "Predict the test split (and score it where it has answers).")
    train_batch_size: int = setting(
        "integer", 32,
        "Global batch size per optimizer step.", rule="positive")
    eval_batch_size: int = setting(
        "integer", 8,
        "Global evaluation batch size.", rule="positive")
    predict_batch_size: int = setting(
        "integer", 8,
        "Prediction batch size.", rule="positive")
    max_eval_steps: int = setting(
        "integer", 100,
        "Evaluation batches.", rule="positive")
    save_checkpoints_steps: int = setting(
        "integer", 1000,
        "Checkpoint (and evaluation) interval.", rule="positive")
    keep_checkpoint_max: int = setting(
        "integer", 5,
        "Checkpoints kept.", rule="positive")
    num_keep_checkpoint: int = setting(
        "integer", 5,
        "Checkpoints kept (official name of --keep_checkpoint_max; this one wins).",
        rule="positive")
    iterations_per_loop: int = setting(
        "integer", 1000,
        "Steps per host call (one tf.function call runs this many).", rule="positive")
    num_train_files: int = setting(
        "integer", 8,
        "Files the training features are written as (consecutive blocks of the seeded"
        " order), so that up to this many input pipelines (workers, TPU hosts; "
        "--input_shards) can read them.", rule="positive")
    input_shards: int = setting(
        "integer", 0,
        "Independent input streams the training files are dealt into (0: one per "
        "input pipeline, i.e. worker or TPU host). The data order depends on it, not "
        "on the hardware: a run resumed on any number of hosts that divides it reads "
        "the same batches.", rule="non_negative")
    shuffle_window: int = setting(
        "integer", 10000,
        "Training records are permuted within consecutive windows of this many (a "
        "seeded, checkpoint-free shuffle; see albert_tf.input_pipeline).", rule="positive")
    masked_lm_budget: float = setting(
        "float", 0.0,
        "Official online-masking ratio; only 0 (offline masking, the official "
        "default) is supported, any other value is refused.", rule="non_negative")
    export_dir: str | None = setting(
        "string", None,
        "Export SavedModels for TF Serving: each export is a new version directory "
        "under its base (EXPORT_DIR/1, EXPORT_DIR/2, ...).")
    export_max_seq_length: int | None = setting(
        "integer", None,
        "max_seq_length of the exported text signatures (default: --max_seq_length).",
        rule="sequence")
    threshold_to_export: float = setting(
        "float", NAN,
        "A decision threshold served with the exported classifier's answers (its "
        "`threshold` output), as the official flag; nan: none.", rule="finite_or_nan")
    optimization: OptimizationSettings = dataclasses.field(default_factory=OptimizationSettings)
    schedule: ScheduleSettings = dataclasses.field(default_factory=ScheduleSettings)


@dataclasses.dataclass(frozen=True)
class RuntimeSettings:
    """Where and how a run executes: the strategy, the TPU, precision and performance (the same
    results at another cost)."""

    distribution_strategy: str = setting(
        "enum", "default",
        "tf.distribute strategy.",
        choices=("tpu", "multi_worker_mirrored", "mirrored", "one_device", "default"))
    tpu: str | None = setting(
        "string", None,
        "TPU name, grpc://host:port, or 'local'.")
    use_tpu: bool = setting(
        "bool", False,
        "Official alias: --distribution_strategy=tpu.")
    tpu_name: str | None = setting(
        "string", None,
        "Official alias of --tpu.")
    tpu_zone: str | None = setting(
        "string", None,
        "GCE zone of the Cloud TPU named by --tpu/--tpu_name (TPU runs only; default:"
        " from the VM's metadata).")
    gcp_project: str | None = setting(
        "string", None,
        "GCP project of the Cloud TPU (TPU runs only; default: from the VM's "
        "metadata).")
    master: str | None = setting(
        "string", None,
        "TPU master address (grpc://host:port) when no --tpu or --tpu_name is given "
        "(TPU runs only).")
    num_tpu_cores: int = setting(
        "integer", 8,
        "TPU cores expected (TPU runs only): a TPU with another number of cores is an"
        " error; the cores come from the TPU itself.", rule="positive")
    tpu_connect_timeout: float = setting(
        "float", 60.0,
        "Seconds allowed for each TPU connect step.", rule="positive")
    mixed_precision: str = setting(
        "enum", "float32",
        "Compute dtype: bfloat16 where the hardware has it (TPU, A100/H100, AVX-512 "
        "BF16), float16 with dynamic loss scaling elsewhere (V100, T4).",
        choices=("float32", "bfloat16", "float16"))
    remove_padding: bool = setting(
        "bool", True,
        "Run the encoder's matmuls on each batch's real tokens only (not on padding):"
        " the same losses, metrics and predictions (dropout drops the same units). "
        "SQuAD's span head (v1, v2 null-score), whose official softmax reads the "
        "padding, keeps the padded computation; ignored under TPUStrategy and with "
        "XLA (run_pretraining's --jit_compile).")
    jit_compile: bool = setting(
        "bool", False,
        "Compile with XLA.")
    recompute: bool = setting(
        "bool", False,
        "Recompute each encoder layer's activations in the backward pass instead of "
        "keeping them: less training memory for about one more forward pass (same "
        "results).")
    use_einsum: bool = setting(
        "bool", False,
        "Attention as tf.einsum (the official default, true) instead of transposes "
        "and batched matmuls (the default here, faster on CPU and GPU): the same "
        "values to 1e-6 (tests/test_layers.py).")
    grad_accum_steps: int = setting(
        "integer", 1,
        "Split each batch into this many sequential micro-batches (same step, less "
        "memory).", rule="positive")
    deterministic: bool = setting(
        "bool", False,
        "Deterministic ops (exact resume on CPU; slower on accelerators).")


@dataclasses.dataclass(frozen=True)
class ExperimentSettings:
    """The four sections of an experiment, as `--config_file` and config.yaml name them."""

    task: TaskSettings = dataclasses.field(default_factory=TaskSettings)
    model: ModelSettings = dataclasses.field(default_factory=ModelSettings)
    trainer: TrainerSettings = dataclasses.field(default_factory=TrainerSettings)
    runtime: RuntimeSettings = dataclasses.field(default_factory=RuntimeSettings)


SECTIONS = tuple(f.name for f in dataclasses.fields(ExperimentSettings))


def _settings_of(cls, section: str, group: str | None = None):
    for field in dataclasses.fields(cls):
        if "kind" in field.metadata:
            m = field.metadata
            yield Setting(field.name, section, m["kind"], field.default, m["help"],
                          m["choices"], m["rule"], group)
        else:  # a group of the section (the trainer's optimization and schedule)
            yield from _settings_of(field.default_factory, section, field.name)


def _by_name() -> dict:
    """Every setting by name; a name given twice (in two sections) is refused."""
    settings = {}
    for section in dataclasses.fields(ExperimentSettings):
        for s in _settings_of(section.default_factory, section.name):
            if s.name in settings:
                raise ValueError(f"the setting {s.name} is defined in {settings[s.name].section} "
                                 f"and in {s.section}")
            settings[s.name] = s
    return settings


SETTINGS = _by_name()


def default(name: str):
    """A setting's default: what a library class takes where a command takes the flag."""
    return SETTINGS[name].default


def section_of(name: str) -> str:
    """The section of a setting in a config file; a flag that is no setting (a command's own
    switch) is the task's."""
    return SETTINGS[name].section if name in SETTINGS else "task"


# The fine-tuning runners' official names of three of the loop's settings: the typed settings
# of a command that has the first carry its value in the second as well (`settings`).
ALIASES = {"train_step": "num_train_steps", "warmup_step": "num_warmup_steps",
           "num_keep_checkpoint": "keep_checkpoint_max"}


def settings(values: dict, carry_aliases: bool = True) -> ExperimentSettings:
    """The typed settings of {name: value}, e.g. a command's parsed flags: names that are not
    settings are left out, a setting missing keeps its default, and (`carry_aliases`: what the
    loop reads) the fine-tuning runners' official names (`ALIASES`) give their values to the
    loop's names too: where one of them is given, the others not given are at their own defaults
    (--train_step alone: no warmup, not run_pretraining's 3125 steps). Without `carry_aliases`,
    each value stays under its own name (a command's config as written)."""
    values = dict(values)
    if carry_aliases and any(alias in values for alias in ALIASES):  # all of the runners' names
        for alias, name in ALIASES.items():
            values[name] = values.get(alias, SETTINGS[alias].default)

    def build(cls):
        kwargs = {}
        for field in dataclasses.fields(cls):
            if "kind" in field.metadata:
                if field.name in values:
                    kwargs[field.name] = values[field.name]
            else:
                kwargs[field.name] = build(field.default_factory)
        return cls(**kwargs)

    return build(ExperimentSettings)


def value_of(experiment: ExperimentSettings, name: str):
    """The value of the setting `name` in `experiment`, wherever its section and group hold it
    (`learning_rate` is `experiment.trainer.optimization.learning_rate`)."""
    setting = SETTINGS[name]
    holder = getattr(experiment, setting.section)
    if setting.group is not None:
        holder = getattr(holder, setting.group)
    return getattr(holder, name)


# The official run_pretraining.py defaults where they differ from the fine-tuning runners'
# (above): the loop's own defaults (`TrainingConfig`) and run_pretraining's flags.
PRETRAINING_DEFAULTS = {
    "do_train": True, "train_batch_size": 4096, "eval_batch_size": 64, "optimizer": "lamb",
    "learning_rate": 0.00176, "save_checkpoints_steps": 5000,
}
