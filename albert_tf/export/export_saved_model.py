r"""Export an ALBERT model as a SavedModel for TensorFlow Serving (raw text in, predictions out).

    python -m albert_tf.export.export_saved_model --model_dir converted/albert_base \
        --export_dir exports/albert_base
    python -m albert_tf.export.export_saved_model --model_dir runs/pretrain --checkpoint best \
        --spm_model_file vocab/30k-clean.model --export_dir exports/albert_pretrained
    python -m albert_tf.export.export_saved_model --model_dir converted/albert_base_zh \
        --vocab_file albert_base_zh/vocab_chinese.txt --export_dir exports/albert_base_zh

writes `exports/albert_base/<next version>/` plus `models.config` and `batching_parameters.txt`
beside the versions. Signatures: serving_default (raw text), serve_text_pair, serve_tokens,
serve_examples, and classify / regress and official_serving_default (the official
run_classifier.py export's tf.Example contract) for classifiers; a SQuAD span model answers a
question about a context (serving_default: question, context), a RACE model picks an option
(serving_default: article, question, options) - see albert_tf/export/serving.py (the signatures),
albert_tf/export/serving_tasks.py and docs/serving.md.
Any process that loads the result must `import tensorflow_text` first (TF Serving links its ops).
"""

from albert_tf.quiet import entry_point  # noqa: E402

entry_point(__name__)  # run as a program: TF's start-up lines filtered (albert_tf.quiet)

import json
import os
import sys

from absl import flags  # noqa: E402

from albert_tf.commands import flags as albert_flags  # noqa: E402
from albert_tf.commands import experiment  # noqa: E402
from albert_tf.checkpoints import CheckpointError  # noqa: E402
from albert_tf.checkpoints.runs import training_run  # noqa: E402
from albert_tf.commands.cli import run_command  # noqa: E402
from albert_tf.commands.flags import FLAGS  # noqa: E402
from albert_tf.export.ops_check import UnsupportedOpError  # noqa: E402
from albert_tf.export.saved_model import (ExportError, export_saved_model,  # noqa: E402
                                           load_for_export, lower_case)
from albert_tf.export.registry import serving_module_class  # noqa: E402


def define_flags():
    albert_flags.define(
        albert_flags.EXPORT_SOURCE, albert_flags.SQUAD_DECODING, "export_dir", "max_qa_length",
        "null_score_diff_threshold", "remove_padding", "vocab_file", "jit_compile",
        max_seq_length=None, null_score_diff_threshold=None, do_lower_case=None,
        notes={"remove_padding": "Here --jit_compile does not ignore it: requests of "
                                 "several rows still remove the padding, and a one-row "
                                 "request is padded to its compiled length (same answers).",
               "jit_compile": "One-row requests run the backbone compiled at a fixed padded "
                              "length (backbones, pretrainers, classifiers; docs/serving.md); "
                              "TF Serving must then be started with "
                              "--xla_cpu_compilation_enabled=true (without it the version's "
                              "warmup fails and it does not load).",
               "max_seq_length": "Default: a .keras model's sequence_length, else the "
                                 "training run's (its config.yaml: a run directory, or a "
                                 "model converted from one), else min(512, "
                                 "max_position_embeddings). The export record's "
                                 "source.max_seq_length_from says which.",
               "do_lower_case": "Default: the casing the source records (a .keras model, a "
                                "run's config.yaml, our directory, a Hugging Face "
                                "folder), else true.",
               "null_score_diff_threshold": "Default: always answer, as SQuAD 1.1.",
               "model_dir": "Any saved form: our model directory, a .keras file of "
                            "AlbertTextClassifier / AlbertTextTagger, a training run's "
                            "--output_dir or DIR:best, an official TF1 checkpoint, a Hugging "
                            "Face folder.",
               "spm_model_file": "Default: the one --model_dir carries (a .keras model's, the "
                                 ".model beside it).",
               "vocab_file": "Without --spm_model_file: the WordPiece vocabulary the graph "
                             "tokenizes with (the Chinese models' vocab_chinese.txt)."})
    flags.DEFINE_integer("version", None, "Version number (default: the next integer).")
    flags.DEFINE_bool("hidden_states", False, "Add hidden_state_<i> outputs.")
    flags.DEFINE_string("allowed_ops", None,
                        "Op list of the target server (default: TF Serving 2.20, "
                        "albert_tf/export/serving_ops_tf2.20.json).")
    flags.DEFINE_string("serving_base_path", None,
                        "base_path written to models.config (default /models/NAME).")
    flags.mark_flags_as_required(["model_dir", "export_dir"])


def recorded_max_seq_length(model_dir: str) -> tuple[int | None, str | None]:
    """(max_seq_length, the file that records it) of the training run `model_dir` comes from:
    the run itself (its --output_dir, `DIR:best`, `RUN/ckpt-N`), or a directory converted from
    one whose record names it (our model directory's albert_tf.json `source`), or a TF1
    checkpoint / Hugging Face folder with the run's config.yaml beside it; (None, None) where
    no run's config.yaml is there."""
    def run_of(path):
        run = training_run(path)
        if run:
            return run[0]
        return path if os.path.isdir(path) else os.path.dirname(path)

    directories = [run_of(model_dir)]
    record = os.path.join(directories[0], "albert_tf.json")
    if os.path.isfile(record):  # our model directory: the run it was converted from
        try:
            with open(record, encoding="utf-8") as f:
                origin = (json.load(f).get("source") or {}).get("path")
        except (OSError, ValueError, AttributeError):
            origin = None
        if isinstance(origin, str) and origin:
            directories.append(run_of(origin))
    for directory in directories:
        file = os.path.join(directory, experiment.CONFIG_NAME)
        if not os.path.isfile(file):
            continue
        try:
            value = (experiment.read_config_file(file).get("model") or {}).get("max_seq_length")
        except (experiment.ConfigFileError, AttributeError):
            continue
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value, file
    return None, None


def export_max_seq_length(given: int | None, model, source: dict,
                          model_dir: str) -> tuple[int, str]:
    """(max_seq_length, where it came from) of the export: `given` (--max_seq_length), else
    the source's (a .keras model's sequence_length, an export's), else the training run's (its
    config.yaml, `recorded_max_seq_length`), else min(512, max_position_embeddings)."""
    if given:
        return given, "--max_seq_length"
    if source.get("max_seq_length"):
        return source["max_seq_length"], "the source's sequence_length"
    value, file = recorded_max_seq_length(model_dir)
    if value:
        return value, f"the training run's {file}"
    return (min(512, model.config.max_position_embeddings),
            "default: min(512, max_position_embeddings)")


def main(argv):
    del argv
    try:
        model, spm, source = load_for_export(FLAGS.model_dir, FLAGS.checkpoint,
                                             FLAGS.spm_model_file, FLAGS.vocab_file)
        max_seq_length, origin = export_max_seq_length(FLAGS.max_seq_length, model, source,
                                                       FLAGS.model_dir)
        source = dict(source, max_seq_length=max_seq_length, max_seq_length_from=origin)
        options = {name: getattr(FLAGS, name)
                   for name in serving_module_class(model).EXPORT_FLAGS} or None
        path = export_saved_model(
            model, FLAGS.export_dir, spm, version=FLAGS.version, max_seq_length=max_seq_length,
            top_k=FLAGS.top_k, text_pair=FLAGS.text_pair, hidden_states=FLAGS.hidden_states,
            labels=FLAGS.labels or source.get("labels"), do_lower_case=lower_case(source),
            allowed_ops=FLAGS.allowed_ops, serving_base_path=FLAGS.serving_base_path,
            source=source, options=options, remove_padding=FLAGS.remove_padding,
            vocab_file=FLAGS.vocab_file, jit_compile=FLAGS.jit_compile)
    except (ExportError, CheckpointError, UnsupportedOpError, ValueError,
            FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    with open(os.path.join(path, "assets.extra", "albert_export.json"), encoding="utf-8") as f:
        record = json.load(f)
    read = {"checkpoint": source["checkpoint"]} if source.get("checkpoint") else {}
    print(json.dumps({"export": path, "model": record["model"], **read,
                      "signatures": record["signatures"],
                      "max_seq_length": record["max_seq_length"],
                      "max_seq_length_from": origin}, indent=2))
    return 0


def cli():
    """The command (`python -m` and the console script in pyproject.toml)."""
    run_command(main, define_flags)


if __name__ == "__main__":
    cli()
