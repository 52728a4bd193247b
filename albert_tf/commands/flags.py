"""The flags of the settings (`albert_tf.configs.definitions`, where each is defined once:
default, range, help, choices, section), in groups.

A command asks for the groups (or single settings) it takes and may change a default, never a
meaning: `define(MODEL, RUN, CLUSTER, PERFORMANCE, max_seq_length=384)`. A command's own
switches that are no setting of an experiment (an export's --version, the data tools' flags)
stay in that command's module. The experiment config
(`albert_tf.commands.experiment.from_flags`) sorts the parsed values into its sections and
`albert_tf.training.train_lib.TrainingConfig.from_settings` turns them into the loop's settings, so
no runner copies flags by hand.

Names are the official google-research/albert ones (`run_pretraining.py`, `run_classifier.py`,
`run_squad_v*.py`, `run_race.py`) with ours added (strategy, precision, input sharding, export).
TensorFlow is not imported here: `--help` of a data command stays light.
"""

from __future__ import annotations

from absl import flags

from albert_tf.configs.definitions import RULES, SETTINGS, rule_problem
from albert_tf.tokenization import DIGIT_COMMA_FORMS

FLAGS = flags.FLAGS
# Flags defined through `define` belong to the module that calls it (its --help lists them).
flags.disclaim_key_flags()


# Every setting's flag, generated from its definition (`albert_tf.configs.definitions`: its kind,
# default, help, choices, range and section).
SPECS = SETTINGS

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
# into every weight at the first step. A setting's range is its definition's (`SETTINGS`); here
# the ranges of the flags that are no setting of an experiment (the data, export and analysis
# commands' own).
NUMBER_RULES = {
    **{name: s.rule for name, s in SETTINGS.items() if s.rule},
    "num_output_shards": "positive", "masked_lm_prob": "positive_probability",
    "ngram": "positive", "dupe_factor": "positive", "short_seq_prob": "probability",
    "num_workers": "positive", "tokens_per_unit": "positive", "vocab_size": "positive",
    "dask_workers": "positive",
    "input_sentence_size": "non_negative", "character_coverage": "positive_probability",
    "num_threads": "positive", "heldout_every": "non_negative", "version": "positive",
    "check_texts": "positive", "min_agreement": "probability", "max_examples": "positive",
    "budget_minutes": "positive", "pretrain_steps": "positive", "finetune_steps": "positive",
    "max_build_params": "positive", "max_sentence_length": "positive",
}


def range_problem(name: str, value) -> str | None:
    """Why `value` is outside the `NUMBER_RULES` range of --`name` (None: inside it, unset, or
    a flag without a range): what parsing refuses (`check_numbers`) and a config file's
    overridden value is checked by."""
    rule = NUMBER_RULES.get(name)
    return None if rule is None or value is None else rule_problem(name, rule, value)


def check_numbers(flag_values=FLAGS, names=None) -> None:
    """Registers the `NUMBER_RULES` range of every numeric flag defined on `flag_values` (of
    `names` only, where given), so that parsing refuses a value outside it (absl: "flag
    --learning_rate=nan: ..."); None (a flag left unset) passes. The command layer calls it
    before parsing."""
    for name, rule in NUMBER_RULES.items():
        if name not in flag_values or (names is not None and name not in names):
            continue
        flags.register_validator(name, lambda value, name=name: not range_problem(name, value),
                                 message=f"--{name} must be {RULES[rule][1]}",
                                 flag_values=flag_values)


def define(*groups, kinds=None, notes=None, flag_values=FLAGS, **defaults):
    """Defines the flags of `groups` (tuples of names, or names) on the global FLAGS, each with
    its default from SPECS unless `defaults` gives another; `kinds` changes a flag's parser
    (e.g. {"model_dir": "list"} for a command that takes several), `notes` adds a sentence to a
    flag's help (what this command does with it: its default's meaning); `flag_values` a
    command's own set instead of absl's global FLAGS (the client's). Returns the names."""
    names = [n for g in groups for n in ((g,) if isinstance(g, str) else g)]
    unknown = set(defaults) - set(names)
    if unknown:
        raise ValueError(f"defaults for flags not defined here: {sorted(unknown)}")
    kinds, notes = kinds or {}, notes or {}
    for name in dict.fromkeys(names):
        spec = SPECS[name]
        kind, default = kinds.get(name, spec.kind), defaults.get(name, spec.default)
        note = notes.get(name, DEFAULT_NOTES.get(name) if "do_predict" in names else None)
        # the range the flag is checked by, said where it has one (`check_numbers`)
        help_text = spec.help + (f" Must be {RULES[spec.rule][1]}." if spec.rule else "")
        help_text = f"{help_text} {note}" if note else help_text
        if name in flag_values:  # a command module imported twice in one process (tests)
            continue
        if kind == "enum":
            flags.DEFINE_enum(name, default, list(spec.choices), help_text,
                              flag_values=flag_values)
        else:
            _DEFINE[kind](name, default, help_text, flag_values=flag_values)
    return names


def define_digit_comma(default: str | None, note: str) -> None:
    """--digit_comma, of the commands that write a vocabulary (train_vocab, convert): the form
    of the digit-comma re-split the written SentencePiece model records
    (`albert_tf.tokenization.DIGIT_COMMA_FORMS`)."""
    flags.DEFINE_enum("digit_comma", default, list(DIGIT_COMMA_FORMS),
                      "How a piece ending in digit + comma is re-split, recorded in the "
                      "SentencePiece model so that every tokenizer of ours uses it: official "
                      "(google-research/albert: '3,500,' is ▁3 , ▁500 ,; Google's released "
                      "models were trained so) or huggingface (XLNet's and Hugging Face's "
                      f"AlbertTokenizer: ▁3 , 500 ,). {note}".rstrip())


def require(*names) -> None:
    """Raises absl's UsageError naming the first of `names` that is not set; a name "a|b" is
    set when either flag is."""
    from absl import app

    for name in names:
        if not any(getattr(FLAGS, n) for n in name.split("|")):
            raise app.UsageError(" or ".join(f"--{n}" for n in name.split("|"))
                                 + " is required.")


def refuse_alone(name: str, others, message: str) -> None:
    """Raises absl's UsageError with `message` (its "{}": the flag's value) where the flag
    `name` is given and none of `others` is."""
    from absl import app

    if getattr(FLAGS, name) and not any(getattr(FLAGS, other) for other in others):
        raise app.UsageError(message.format(getattr(FLAGS, name)))


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


class UsageError(ValueError):
    """A command line a command with its own flags cannot run: one line, and the hint to
    --help (`parse_own`)."""


def parse_own(define_flags, argv, program: str) -> tuple[list[str], flags.FlagValues]:
    """(the words left, the parsed flags) of `argv` (without the program) for a command whose
    flags are its own set (`define_flags(flag_values)`), apart from absl's global FLAGS: its
    `main(argv)` can be called again in one process, and its names do not meet the other
    commands' (the client's --model is a served model's name, convert's a kind). --help/-h,
    --flagfile and the flags' types and choices are absl's, as in every command; a flag error
    is a UsageError."""
    flag_values = flags.FlagValues()
    flags.DEFINE_bool("help", False, "Show this help.", short_name="h", flag_values=flag_values)
    define_flags(flag_values)
    # the settings' ranges, as their help says (a command's own switch checks its own value)
    check_numbers(flag_values, names=[name for name in SETTINGS if name in flag_values])
    try:
        return flag_values([program, *argv])[1:], flag_values
    except flags.Error as e:
        raise UsageError(str(e)) from None


def own_flags_help(flag_values: flags.FlagValues) -> str:
    """The flags' part of such a command's --help (absl's lines without its heading, which is
    the path of the defining file)."""
    return "\n".join(line for line in flag_values.get_help(include_special_flags=False)
                     .splitlines() if line.startswith(" "))

