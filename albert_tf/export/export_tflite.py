r"""Export an ALBERT model as a TensorFlow Lite file that takes raw text (or token ids).

    python -m albert_tf.export.export_tflite --model_dir exports/sst2 --output sst2.tflite
    python -m albert_tf.export.export_tflite --model_dir exports/sst2 --output sst2_int8.tflite \
        --quantize dynamic_int8
    python -m albert_tf.export.export_tflite --model_dir converted/albert_base \
        --output albert.tflite --inputs tokens

--model_dir: one of our SavedModel exports (BASE/NAME for its newest version, or BASE/NAME/N;
the usual source for a fine-tuned classifier, whose sequence length, labels and text pair
setting are then the defaults), our model directory, a .keras file, or a pretraining
--output_dir. Writes FILE.tflite and FILE.json (signature, input and output names, sizes, the
agreement with the TensorFlow graph measured at export). An interpreter needs tensorflow-text's
ops registered; see albert_tf/export/tflite.py and docs/tflite.md for a runnable example.
"""

from albert_tf.quiet import entry_point  # noqa: E402

entry_point(__name__)  # run as a program: TF's start-up lines filtered (albert_tf.quiet)

import json
import os
import sys

from absl import flags  # noqa: E402

from albert_tf.commands import flags as albert_flags  # noqa: E402
from albert_tf.checkpoints import CheckpointError  # noqa: E402
from albert_tf.commands.cli import run_command  # noqa: E402
from albert_tf.commands.flags import FLAGS  # noqa: E402
from albert_tf.export.saved_model import ExportError, load_for_export, lower_case  # noqa: E402
from albert_tf.export.tflite import TFLiteExportError, export_tflite  # noqa: E402


def define_flags():
    albert_flags.define(
        albert_flags.EXPORT_SOURCE, "output", max_seq_length=None, text_pair=None,
        do_lower_case=None,
        notes={"model_dir": "Or one of our SavedModel exports (BASE/NAME or "
                            "BASE/NAME/VERSION), a .keras file of AlbertTextClassifier, a "
                            "training run's --output_dir or DIR:best, an official TF1 "
                            "checkpoint, a Hugging Face folder.",
               "do_lower_case": "Default: the casing the source records (a .keras model, a "
                                "run's config.yaml, our directory, a Hugging Face "
                                "folder), else true.",
               "output": "The .tflite file.",
               "max_seq_length": "Default: the SavedModel's, else min(512, "
                                 "max_position_embeddings).",
               "text_pair": "Default: as the SavedModel.",
               "spm_model_file": "Default: the one --model_dir carries."})
    flags.DEFINE_enum("quantize", "none", ["none", "float16", "dynamic_int8"],
                      "Weights as float32 (none), float16, or int8 with dynamic-range kernels.")
    flags.DEFINE_enum("inputs", "text", ["text", "tokens"],
                      "text: raw text tokenized in the model; tokens: input_ids, input_mask, "
                      "segment_ids.")
    flags.DEFINE_integer("check_texts", 100, "Held-out texts (bundled WikiText-2 test lines) a "
                         "quantized file is measured on against float32 (its record's "
                         "`quality`).")
    flags.DEFINE_float("min_agreement", 0.95, "A quantized file whose answers (label, top "
                       "fill-mask piece) agree with float32's on fewer held-out texts is "
                       "refused.")
    flags.mark_flags_as_required(["model_dir", "output"])


def main(argv):
    del argv
    if os.path.exists(FLAGS.output):  # before loading anything
        print(f"error: {FLAGS.output} exists; choose another --output (or delete it).",
              file=sys.stderr)
        return 1
    try:
        model, spm, source = load_for_export(FLAGS.model_dir, FLAGS.checkpoint,
                                             FLAGS.spm_model_file)
        max_seq_length = (FLAGS.max_seq_length or source.get("max_seq_length")
                          or min(512, model.config.max_position_embeddings))
        text_pair = FLAGS.text_pair if FLAGS.text_pair is not None else bool(
            source.get("text_pair"))
        record = export_tflite(model, FLAGS.output, spm, quantize=FLAGS.quantize,
                               inputs=FLAGS.inputs, max_seq_length=max_seq_length,
                               top_k=FLAGS.top_k, text_pair=text_pair,
                               labels=FLAGS.labels or source.get("labels"),
                               do_lower_case=lower_case(source), source=source,
                               check_texts=FLAGS.check_texts,
                               min_agreement=FLAGS.min_agreement)
    except (ExportError, TFLiteExportError, CheckpointError, ValueError,
            FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(json.dumps({"tflite": os.path.abspath(FLAGS.output),
                      **{k: record[k] for k in ("model", "inputs", "quantize", "size_bytes",
                                                "input_names", "output_names",
                                                "check_max_abs_difference", "quality")}},
                     indent=2))
    return 0


def cli():
    """The command (`python -m` and the console script in pyproject.toml)."""
    run_command(main, define_flags)


if __name__ == "__main__":
    cli()
