"""Every command-line flag that more than one command takes, defined once, in groups.

A command asks for the groups (or single flags) it takes and may change a default, never a
meaning: `define(MODEL, RUN, CLUSTER, PERFORMANCE, max_seq_length=384)`. Flags that only one
command takes stay in that command's module. The experiment config
(`albert_tf.commands.experiment.from_flags`) sorts the parsed values into its sections and
`albert_tf.training.train_lib.TrainingConfig.from_settings` turns them into the loop's settings, so
no runner copies flags by hand.

Names are the official google-research/albert ones (`run_pretraining.py`, `run_classifier.py`,
`run_squad_v*.py`, `run_race.py`) with ours added (strategy, precision, input sharding, export).
TensorFlow is not imported here: `--help` of a data command stays light.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from absl import flags

FLAGS = flags.FLAGS
# Flags defined through `define` belong to the module that calls it (its --help lists them).
flags.disclaim_key_flags()


class Spec(NamedTuple):
    kind: str  # string, integer, float, bool, enum, list
    default: object
    help: str
    choices: tuple = ()


STRATEGIES = ("tpu", "multi_worker_mirrored", "mirrored", "one_device", "default")

SPECS = {
    # The model and its vocabulary.
    "albert_config_file": Spec("string", None, "Model config JSON (official keys)."),
    "spm_model_file": Spec("string", None, "SentencePiece model of the model's vocabulary."),
    "vocab_file": Spec("string", None, "With --spm_model_file: the official .vocab file (piece "
                                       "and score per line) of that model, checked to hold the "
                                       "same pieces in the same order (a mismatch is an "
                                       "error); --spm_model_file is the tokenizer. Alone: a "
                                       "WordPiece vocabulary (a token per line, e.g. the "
                                       "Chinese models' vocab_chinese.txt), the tokenizer "
                                       "then, as the official FullTokenizer without a "
                                       "SentencePiece model."),
    "do_lower_case": Spec("bool", True, "Lowercase the text (as the vocabulary was made; the "
                                        "released models: true)."),
    "init_checkpoint": Spec("string", None, "Pretrained weights: an official TF1 checkpoint or "
                                            "TF-Hub module, a Hugging Face folder, our model "
                                            "directory or .keras file, or a pretraining "
                                            "--output_dir (DIR:best for its best checkpoint)."),
    "init_from_group0": Spec("bool", False, "Initialize every layer group from group 0 of "
                                            "--init_checkpoint (official fallback)."),
    "albert_hub_module_handle": Spec("string", None, "A TF-Hub module of ALBERT (TF1 format, "
                                                     "as Google released them) in a local "
                                                     "directory: the model starts from its "
                                                     "weights (as --init_checkpoint would). A "
                                                     "URL is refused: nothing is downloaded; "
                                                     "download and unpack the module first."),
    "max_seq_length": Spec("integer", 512, "Packed sequence length in pieces ([CLS] and [SEP] "
                                           "included)."),
    "max_predictions_per_seq": Spec("integer", 20, "Masked positions per sequence."),
    "model_dir": Spec("string", None, "Our model directory or SavedModel export, a .keras "
                                      "file, or a pretraining --output_dir."),
    "checkpoint": Spec("string", "latest", "For a pretraining --output_dir: latest, best, or a "
                                           "checkpoint prefix."),
    "random_seed": Spec("integer", 12345, "Seed of every random draw (initialization, dropout, "
                                          "data order); the same command gives the same "
                                          "result. -1 draws a fresh one."),
    # Files.
    "input_file": Spec("string", None, "Input files: comma-separated globs."),
    "output_file": Spec("string", None, "The file to write."),
    "output_dir": Spec("string", None, "Checkpoints, summaries, metrics and predictions go "
                                       "here."),
    "output": Spec("string", None, "Where the result is written (never over existing work)."),
    "overwrite": Spec("bool", False, "Replace an existing output that holds other work "
                                     "(without it, that is an error)."),
    "task_name": Spec("string", None, "The task to run."),
    "data_dir": Spec("string", None, "Directory of the task's original files."),
    "train_file": Spec("string", None, "Training data: the SQuAD JSON (or zip) for "
                                       "run_squad_*; the features TFRecord for run_race "
                                       "(written if absent)."),
    "predict_file": Spec("string", None, "Data to predict (and score where it has answers): "
                                         "the SQuAD JSON (or zip) for run_squad_*; the "
                                         "features TFRecord for run_race (written if "
                                         "absent)."),
    "dev_file": Spec("string", None, "The file to evaluate on (--do_eval)."),
    "test_file": Spec("string", None, "The file to predict (--do_predict); it may lack the "
                                      "labels."),
    "num_train_files": Spec("integer", 8, "Files the training features are written as "
                                          "(consecutive blocks of the seeded order), so that up "
                                          "to this many input pipelines (workers, TPU hosts; "
                                          "--input_shards) can read them."),
    "input_shards": Spec("integer", 0, "Independent input streams the training files are dealt "
                                       "into (0: one per input pipeline, i.e. worker or TPU "
                                       "host). The data order depends on it, not on the "
                                       "hardware: a run resumed on any number of hosts that "
                                       "divides it reads the same batches."),
    # What a run does and its schedule.
    "do_train": Spec("bool", False, "Train."),
    "do_eval": Spec("bool", False, "Evaluate on the dev split (each checkpoint when "
                                   "training); the best checkpoint is kept."),
    "do_predict": Spec("bool", False, "Predict the test split (and score it where it has "
                                      "answers)."),
    "train_batch_size": Spec("integer", 32, "Global batch size per optimizer step."),
    "eval_batch_size": Spec("integer", 8, "Global evaluation batch size."),
    "predict_batch_size": Spec("integer", 8, "Prediction batch size."),
    "optimizer": Spec("enum", "adamw", "Optimizer: ALBERT's LAMB or AdamW (both with "
                                       "decoupled weight decay, LayerNorm and biases "
                                       "excluded).", ("lamb", "adamw")),
    "learning_rate": Spec("float", 5e-5, "Peak learning rate."),
    "train_step": Spec("integer", 1000, "Optimizer steps."),
    "warmup_step": Spec("integer", 0, "Linear warmup steps."),
    "save_checkpoints_steps": Spec("integer", 1000, "Checkpoint (and evaluation) interval."),
    "keep_checkpoint_max": Spec("integer", 5, "Checkpoints kept."),
    "iterations_per_loop": Spec("integer", 1000, "Steps per host call (one tf.function call "
                                                 "runs this many)."),
    "dropout_prob": Spec("float", 0.1, "Dropout on the task head's input."),
    "export_dir": Spec("string", None, "Export SavedModels for TF Serving: each export is a "
                                       "new version directory under its base (EXPORT_DIR/1, "
                                       "EXPORT_DIR/2, ...)."),
    # Cluster: where the run executes.
    "distribution_strategy": Spec("enum", "default", "tf.distribute strategy.", STRATEGIES),
    "tpu": Spec("string", None, "TPU name, grpc://host:port, or 'local'."),
    "use_tpu": Spec("bool", False, "Official alias: --distribution_strategy=tpu."),
    "tpu_name": Spec("string", None, "Official alias of --tpu."),
    "tpu_zone": Spec("string", None, "GCE zone of the Cloud TPU named by --tpu/--tpu_name "
                                     "(TPU runs only; default: from the VM's metadata)."),
    "gcp_project": Spec("string", None, "GCP project of the Cloud TPU (TPU runs only; "
                                        "default: from the VM's metadata)."),
    "master": Spec("string", None, "TPU master address (grpc://host:port) when no --tpu or "
                                   "--tpu_name is given (TPU runs only)."),
    "num_tpu_cores": Spec("integer", 8, "TPU cores expected (TPU runs only): a TPU with "
                                        "another number of cores is an error; the cores come "
                                        "from the TPU itself."),
    # Performance: same results, other cost.
    "mixed_precision": Spec("enum", "float32", "Compute dtype: bfloat16 where the hardware has "
                                               "it (TPU, A100/H100, AVX-512 BF16), float16 with "
                                               "dynamic loss scaling elsewhere (V100, T4).",
                            ("float32", "bfloat16", "float16")),
    "remove_padding": Spec("bool", True, "Run the encoder's matmuls on each batch's real "
                                         "tokens only (not on padding): the same losses, "
                                         "metrics and predictions (dropout drops the same "
                                         "units). SQuAD's span head (v1, v2 null-score), whose "
                                         "official softmax reads the padding, keeps the padded "
                                         "computation; ignored under TPUStrategy and with XLA "
                                         "(run_pretraining's --jit_compile)."),
    "jit_compile": Spec("bool", False, "Compile with XLA."),
    "recompute": Spec("bool", False, "Recompute each encoder layer's activations in the "
                                     "backward pass instead of keeping them: less training "
                                     "memory for about one more forward pass (same "
                                     "results)."),
    "use_einsum": Spec("bool", False, "Attention as tf.einsum (the official default, true) "
                                      "instead of transposes and batched matmuls (the default "
                                      "here, faster on CPU and GPU): the same values to 1e-6 "
                                      "(tests/test_layers.py)."),
    "grad_accum_steps": Spec("integer", 1, "Split each batch into this many sequential "
                                           "micro-batches (same step, less memory)."),
    # Serving and decoding of the task models (fine-tuning runners and export alike).
    "labels": Spec("list", None, "Class names of a classifier (default: 0, 1, ...)."),
    "text_pair": Spec("bool", False, "The text signature takes text and text_b."),
    "top_k": Spec("integer", 5, "Fill-mask answers per [MASK]."),
    "doc_stride": Spec("integer", 128, "SQuAD: stride between context windows (pieces)."),
    "max_query_length": Spec("integer", 64, "SQuAD: question pieces kept."),
    "n_best_size": Spec("integer", 20, "SQuAD: start and end candidates per window."),
    "max_answer_length": Spec("integer", 30, "SQuAD: longest answer, in pieces."),
    "null_score_diff_threshold": Spec("float", 0.0, "SQuAD 2.0: answer \"\" when the null "
                                                    "score minus the best span's score exceeds "
                                                    "this (BERT's flag; eval_results.json "
                                                    "gives the best one as best_f1_thresh)."),
    "max_qa_length": Spec("integer", 128, "RACE: pieces of question + option kept (the last)."),
}

MODEL = ("albert_config_file", "init_checkpoint", "init_from_group0", "max_seq_length",
         "random_seed")
VOCAB = ("spm_model_file", "vocab_file", "do_lower_case")
RUN = ("output_dir", "do_train", "train_batch_size", "optimizer", "learning_rate",
       "save_checkpoints_steps", "keep_checkpoint_max", "iterations_per_loop", "input_shards",
       "export_dir")
EVAL = ("do_eval", "eval_batch_size")
FINETUNING = ("albert_hub_module_handle", "do_predict", "predict_batch_size",
              "num_train_files")
CLUSTER = ("distribution_strategy", "tpu", "use_tpu", "tpu_name", "tpu_zone", "gcp_project",
           "master", "num_tpu_cores")
PERFORMANCE = ("mixed_precision", "remove_padding", "recompute", "use_einsum",
               "grad_accum_steps")
SQUAD_DECODING = ("doc_stride", "max_query_length", "n_best_size", "max_answer_length")
EXPORT_SOURCE = ("model_dir", "checkpoint", "spm_model_file", "do_lower_case", "max_seq_length",
                 "labels", "text_pair", "top_k")

# What a fine-tuning command (one with --do_predict) does with a flag, unless it says otherwise.
DEFAULT_NOTES = {"export_dir": "This command exports one model to EXPORT_DIR: the one it "
                               "predicts with (the best evaluated checkpoint where --do_eval "
                               "kept one, else the last)."}

_DEFINE = {"string": flags.DEFINE_string, "integer": flags.DEFINE_integer,
           "float": flags.DEFINE_float, "bool": flags.DEFINE_bool, "list": flags.DEFINE_list}


# The range of every numeric flag, whichever command defines it (`check_numbers`, run by the
# command layer before any command runs): nan, inf and out-of-range values are refused at parse
# time, before anything is read or written. A learning rate of nan would otherwise write nan
# into every weight at the first step.
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
    "seed": (lambda v: v == -1 or v >= 0, "-1 (a fresh seed) or a seed >= 0"),
    "finite_or_nan": (lambda v: not math.isinf(v), "a finite number (nan: none)"),
}
NUMBER_RULES = {
    # Shared flags (SPECS).
    "max_seq_length": "sequence", "max_predictions_per_seq": "positive",
    "random_seed": "seed", "num_train_files": "positive", "input_shards": "non_negative",
    "train_batch_size": "positive", "eval_batch_size": "positive",
    "predict_batch_size": "positive", "learning_rate": "positive", "train_step": "positive",
    "warmup_step": "non_negative", "save_checkpoints_steps": "positive",
    "keep_checkpoint_max": "positive", "iterations_per_loop": "positive",
    "dropout_prob": "dropout", "num_tpu_cores": "positive", "grad_accum_steps": "positive",
    "top_k": "positive", "doc_stride": "positive", "max_query_length": "positive",
    "n_best_size": "positive", "max_answer_length": "positive",
    "null_score_diff_threshold": "finite", "max_qa_length": "positive",
    # Flags of one command.
    "poly_power": "non_negative", "num_train_steps": "positive",
    "num_warmup_steps": "non_negative", "start_warmup_step": "non_negative",
    "max_eval_steps": "positive", "tpu_connect_timeout": "positive",
    "export_max_seq_length": "sequence", "shuffle_window": "positive",
    "num_keep_checkpoint": "positive", "train_examples": "non_negative",
    "dropout_rate": "dropout", "num_train_epochs": "positive",
    "warmup_proportion": "probability", "start_n_top": "positive", "end_n_top": "positive",
    "num_output_shards": "positive", "num_labels": "non_negative",
    "masked_lm_prob": "positive_probability",
    "ngram": "positive", "dupe_factor": "positive", "short_seq_prob": "probability",
    "num_workers": "positive", "tokens_per_unit": "positive", "vocab_size": "positive",
    "dask_workers": "positive",
    "input_sentence_size": "non_negative", "character_coverage": "positive_probability",
    "num_threads": "positive", "heldout_every": "non_negative", "version": "positive",
    "check_texts": "positive", "min_agreement": "probability", "max_examples": "positive",
    "budget_minutes": "positive", "pretrain_steps": "positive", "finetune_steps": "positive",
    "max_build_params": "positive", "threshold_to_export": "finite_or_nan",
    "masked_lm_budget": "non_negative", "max_sentence_length": "positive",
}


def check_numbers(flag_values=FLAGS) -> None:
    """Registers the `NUMBER_RULES` range of every numeric flag defined on `flag_values`, so
    that parsing refuses a value outside it (absl: "flag --learning_rate=nan: ..."); None (a
    flag left unset) passes. The command layer calls it before parsing."""
    for name, rule in NUMBER_RULES.items():
        if name not in flag_values:
            continue
        test, wanted = RULES[rule]

        def check(value, test=test):
            return value is None or (isinstance(value, (int, float)) and test(value))

        flags.register_validator(name, check, message=f"--{name} must be {wanted}",
                                 flag_values=flag_values)


def define(*groups, kinds=None, notes=None, **defaults):
    """Defines the flags of `groups` (tuples of names, or names) on the global FLAGS, each with
    its default from SPECS unless `defaults` gives another; `kinds` changes a flag's parser
    (e.g. {"model_dir": "list"} for a command that takes several), `notes` adds a sentence to a
    flag's help (what this command does with it: its default's meaning). Returns the names."""
    names = [n for g in groups for n in ((g,) if isinstance(g, str) else g)]
    unknown = set(defaults) - set(names)
    if unknown:
        raise ValueError(f"defaults for flags not defined here: {sorted(unknown)}")
    kinds, notes = kinds or {}, notes or {}
    for name in dict.fromkeys(names):
        spec = SPECS[name]
        kind, default = kinds.get(name, spec.kind), defaults.get(name, spec.default)
        note = notes.get(name, DEFAULT_NOTES.get(name) if "do_predict" in names else None)
        help_text = f"{spec.help} {note}" if note else spec.help
        if name in FLAGS:  # a command module imported twice in one process (tests)
            continue
        if kind == "enum":
            flags.DEFINE_enum(name, default, list(spec.choices), help_text)
        else:
            _DEFINE[kind](name, default, help_text)
    return names


def require(*names) -> None:
    """Raises absl's UsageError naming the first of `names` that is not set; a name "a|b" is
    set when either flag is."""
    from absl import app

    for name in names:
        if not any(getattr(FLAGS, n) for n in name.split("|")):
            raise app.UsageError(" or ".join(f"--{n}" for n in name.split("|"))
                                 + " is required.")


def require_an_action(export: bool = False) -> None:
    """Raises absl's UsageError unless one of the command's --do_train, --do_eval, --do_predict
    is set, or with `export` (a command whose official script exports alone: run_classifier,
    run_squad_v1) --export_dir."""
    from absl import app

    actions = [name for name in ("do_train", "do_eval", "do_predict") if name in FLAGS]
    if export:
        actions.append("export_dir")
    if not any(getattr(FLAGS, name) for name in actions):
        raise app.UsageError("At least one of " + ", ".join(f"--{a}" for a in actions) + ".")
