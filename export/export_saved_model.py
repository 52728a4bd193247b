"""Export an ALBERT model as a SavedModel for TensorFlow Serving (raw text in, predictions out).

    python -m export.export_saved_model --model_dir converted/albert_base \
        --export_dir exports/albert_base
    python -m export.export_saved_model --model_dir runs/pretrain --checkpoint best \
        --spm_model_file vocab/30k-clean.model --export_dir exports/albert_pretrained

writes `exports/albert_base/<next version>/` plus `models.config` and `batching_parameters.txt`
beside the versions. Signatures: serving_default (raw text), serve_text_pair, serve_tokens,
serve_examples, and classify / regress for classifiers; a SQuAD span model answers a question
about a context (serving_default: question, context), a RACE model picks an option
(serving_default: article, question, options) - see export/serving.py and BUILD.md.
Any process that loads the result must `import tensorflow_text` first (TF Serving links its ops).
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from absl import app, flags  # noqa: E402
from export.ops_check import UnsupportedOpError

flags.DEFINE_string("model_dir", None,
                    "Our model directory (albert_tf.convert output or a fine-tuned model), a "
                    ".keras file, or a pretraining --output_dir.")
flags.DEFINE_string("checkpoint", "latest",
                    "For a pretraining --output_dir: latest, best, or a checkpoint prefix.")
flags.DEFINE_string("spm_model_file", None,
                    "SentencePiece model (default: the one found in --model_dir).")
flags.DEFINE_string("export_dir", None, "BASE/NAME: versions are written under it.")
flags.DEFINE_integer("version", None, "Version number (default: the next integer).")
flags.DEFINE_integer("max_seq_length", None,
                     "Longest packed text sequence (default: min(512, max_position_embeddings)).")
flags.DEFINE_integer("top_k", 5, "Fill-mask candidates per [MASK].")
flags.DEFINE_bool("text_pair", False, "serving_default takes text and text_b.")
flags.DEFINE_bool("hidden_states", False, "Add hidden_state_<i> outputs.")
flags.DEFINE_list("labels", None, "Class names of a classifier (default 0, 1, ...).")
flags.DEFINE_bool("do_lower_case", True, "Lowercase in preprocessing (as the vocabulary was).")
flags.DEFINE_integer("doc_stride", 128, "SQuAD span model: stride between context windows.")
flags.DEFINE_integer("max_query_length", 64, "SQuAD span model: question pieces kept.")
flags.DEFINE_integer("n_best_size", 20, "SQuAD span model: start and end candidates per window.")
flags.DEFINE_integer("max_answer_length", 30, "SQuAD span model: longest answer, in pieces.")
flags.DEFINE_float("null_score_diff_threshold", None,
                   "SQuAD 2.0 span model: answer \"\" when the null odds exceed this (default: "
                   "always answer, as SQuAD 1.1).")
flags.DEFINE_integer("max_qa_length", 128, "RACE multiple-choice model: question + option "
                     "pieces kept (the last).")
flags.DEFINE_bool("remove_padding", True,
                  "The encoder's matmuls run on a batch's real tokens only (a batch of mixed "
                  "lengths costs its tokens, not batch x longest); --noremove_padding keeps the "
                  "padded computation.")
flags.DEFINE_string("allowed_ops", None,
                    "Op list of the target server (default: TF Serving 2.20, "
                    "export/serving_ops_tf2.20.json).")
flags.DEFINE_string("serving_base_path", None,
                    "base_path written to models.config (default /models/NAME).")
flags.mark_flags_as_required(["model_dir", "export_dir"])
FLAGS = flags.FLAGS


def main(argv):
    del argv
    from albert_tf.checkpoints import CheckpointError
    from export.saved_model import ExportError, export_saved_model, load_for_export

    try:
        model, spm, source = load_for_export(FLAGS.model_dir, FLAGS.checkpoint,
                                             FLAGS.spm_model_file)
        max_seq_length = FLAGS.max_seq_length or min(512, model.config.max_position_embeddings)
        from albert_tf.checkpoints import model_kind

        options = {"span": {"doc_stride": FLAGS.doc_stride,
                            "max_query_length": FLAGS.max_query_length,
                            "n_best_size": FLAGS.n_best_size,
                            "max_answer_length": FLAGS.max_answer_length,
                            "null_score_diff_threshold": FLAGS.null_score_diff_threshold},
                   "multiple_choice": {"max_qa_length": FLAGS.max_qa_length}}.get(
                       model_kind(model))
        path = export_saved_model(
            model, FLAGS.export_dir, spm, version=FLAGS.version, max_seq_length=max_seq_length,
            top_k=FLAGS.top_k, text_pair=FLAGS.text_pair, hidden_states=FLAGS.hidden_states,
            labels=FLAGS.labels or source.get("labels"), do_lower_case=FLAGS.do_lower_case,
            allowed_ops=FLAGS.allowed_ops, serving_base_path=FLAGS.serving_base_path,
            source=source, options=options, remove_padding=FLAGS.remove_padding)
    except (ExportError, CheckpointError, UnsupportedOpError, ValueError,
            FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    with open(os.path.join(path, "assets.extra", "albert_export.json"), encoding="utf-8") as f:
        record = json.load(f)
    print(json.dumps({"export": path, "model": record["model"],
                      "signatures": record["signatures"],
                      "max_seq_length": record["max_seq_length"]}, indent=2))
    return 0


def cli():
    """The command (`python -m` and the console script in pyproject.toml)."""
    sys.exit(app.run(main))


if __name__ == "__main__":
    cli()
