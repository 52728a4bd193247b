"""Export an ALBERT model as a TensorFlow Lite file that takes raw text (or token ids).

    python -m export.export_tflite --model_dir exports/sst2 --output sst2.tflite
    python -m export.export_tflite --model_dir exports/sst2 --output sst2_int8.tflite \
        --quantize dynamic_int8
    python -m export.export_tflite --model_dir converted/albert_base --output albert.tflite \
        --inputs tokens

--model_dir: one of our SavedModel exports (BASE/NAME for its newest version, or BASE/NAME/N;
the usual source for a fine-tuned classifier, whose sequence length, labels and text pair
setting are then the defaults), our model directory, a .keras file, or a pretraining
--output_dir. Writes FILE.tflite and FILE.json (signature, input and output names, sizes, the
agreement with the TensorFlow graph measured at export). An interpreter needs tensorflow-text's
ops registered; see export/tflite.py and BUILD.md for a runnable example.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from absl import app, flags  # noqa: E402

flags.DEFINE_string("model_dir", None,
                    "A SavedModel export of ours (BASE/NAME or BASE/NAME/VERSION), our model "
                    "directory, a .keras file, or a pretraining --output_dir.")
flags.DEFINE_string("checkpoint", "latest",
                    "For a pretraining --output_dir: latest, best, or a checkpoint prefix.")
flags.DEFINE_string("spm_model_file", None,
                    "SentencePiece model (default: the one found with --model_dir).")
flags.DEFINE_string("output", None, "The .tflite file to write (never overwritten).")
flags.DEFINE_enum("quantize", "none", ["none", "float16", "dynamic_int8"],
                  "Weights as float32 (none), float16, or int8 with dynamic-range kernels.")
flags.DEFINE_enum("inputs", "text", ["text", "tokens"],
                  "text: raw text tokenized in the model; tokens: input_ids, input_mask, "
                  "segment_ids.")
flags.DEFINE_integer("max_seq_length", None,
                     "Longest packed text sequence (default: the SavedModel's, else "
                     "min(512, max_position_embeddings)).")
flags.DEFINE_integer("top_k", 5, "Fill-mask candidates per [MASK] (pretrained models).")
flags.DEFINE_bool("text_pair", None,
                  "The text signature takes text and text_b (default: as the SavedModel).")
flags.DEFINE_list("labels", None, "Class names of a classifier (default: the source's, else "
                  "0, 1, ...).")
flags.DEFINE_bool("do_lower_case", True, "Lowercase in preprocessing (as the vocabulary was).")
flags.mark_flags_as_required(["model_dir", "output"])
FLAGS = flags.FLAGS


def main(argv):
    del argv
    if os.path.exists(FLAGS.output):  # before loading anything
        print(f"error: {FLAGS.output} exists; choose another --output (or delete it).",
              file=sys.stderr)
        return 1
    from albert_tf.checkpoints import CheckpointError
    from export.saved_model import ExportError, load_for_export
    from export.tflite import TFLiteExportError, export_tflite

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
                               do_lower_case=FLAGS.do_lower_case, source=source)
    except (ExportError, TFLiteExportError, CheckpointError, ValueError,
            FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(json.dumps({"tflite": os.path.abspath(FLAGS.output),
                      **{k: record[k] for k in ("model", "inputs", "quantize", "size_bytes",
                                                "input_names", "output_names",
                                                "check_max_abs_difference")}}, indent=2))
    return 0


def cli():
    """The command (`python -m` and the console script in pyproject.toml)."""
    sys.exit(app.run(main))


if __name__ == "__main__":
    cli()
