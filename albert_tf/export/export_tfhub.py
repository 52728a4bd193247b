r"""Export an ALBERT model as a TF Hub pair: a preprocessing SavedModel and a trainable encoder.

    python -m albert_tf.export.export_tfhub --init_checkpoint albert_base/model.ckpt-best \
        --spm_model_file albert_base/30k-clean.model --export_dir hub/albert_base
    python -m albert_tf.export.export_tfhub --init_checkpoint runs/pretrain:best \
        --export_dir hub/mine

writes `hub/albert_base/preprocess/` and `hub/albert_base/encoder/`, loaded as TF Hub's BERT
models are (`hub.KerasLayer(DIR/preprocess)`, `hub.KerasLayer(DIR/encoder, trainable=True)`;
albert_tf/export/tfhub.py, docs/serving.md "TF Hub pair"). `--init_checkpoint` is any source the
project reads: an official TF1 checkpoint or TF-Hub module, a Hugging Face folder, our model
directory or `.keras` file (of AlbertTextClassifier / AlbertTextTagger too), a training
`--output_dir` (DIR:best) or one of its checkpoints;
only the backbone is exported (heads are dropped). Any process that loads the preprocessor must
`import tensorflow_text` first.
"""

from albert_tf.quiet import entry_point  # noqa: E402

entry_point(__name__)  # run as a program: TF's start-up lines filtered (albert_tf.quiet)

import json  # noqa: E402
import sys  # noqa: E402

from absl import flags  # noqa: E402

from albert_tf.commands import flags as albert_flags  # noqa: E402
from albert_tf.checkpoints import CheckpointError  # noqa: E402
from albert_tf.checkpoints.conversion import carried_tokenizer  # noqa: E402
from albert_tf.commands.cli import run_command  # noqa: E402
from albert_tf.commands.flags import FLAGS  # noqa: E402
from albert_tf.export.tfhub import ExportError, export_tfhub, load_backbone  # noqa: E402

DEFAULT_SEQ_LENGTH = 128  # TF Hub's BERT preprocessors'


def define_flags():
    albert_flags.define(
        "init_checkpoint", "albert_config_file", "spm_model_file", "do_lower_case",
        "max_seq_length", "export_dir", max_seq_length=DEFAULT_SEQ_LENGTH, do_lower_case=None,
        notes={"init_checkpoint": "Its backbone is exported.",
               "albert_config_file": "Default: the one the checkpoint carries (config.json, "
                                     "albert_config.json beside it or in its assets/).",
               "spm_model_file": "Default: the one --init_checkpoint carries (a .keras "
                                 "model's, the .model beside it or in its assets/).",
               "do_lower_case": "Default: the casing the source records (a .keras model, a "
                                "run's config.yaml, our directory, a Hugging Face "
                                "folder), else true.",
               "max_seq_length": "Here: the preprocessor's seq_length (its call's, and "
                                 "bert_pack_inputs' default).",
               "export_dir": "Here: the directory that receives preprocess/ and encoder/; it "
                             "must not exist or be empty."})
    flags.mark_flags_as_required(["init_checkpoint", "export_dir"])


def main(argv):
    del argv
    try:
        backbone, spm, report = load_backbone(FLAGS.init_checkpoint, FLAGS.albert_config_file,
                                              FLAGS.spm_model_file)
        lower = FLAGS.do_lower_case
        if lower is None:
            lower = carried_tokenizer(FLAGS.init_checkpoint)["do_lower_case"] is not False
        record = export_tfhub(backbone, FLAGS.export_dir, spm, seq_length=FLAGS.max_seq_length,
                              do_lower_case=lower,
                              source=dict(report["source"], skipped=sorted(report["skipped"])))
    except (ExportError, CheckpointError, ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(json.dumps({"preprocess": record["preprocess"], "encoder": record["encoder"],
                      "seq_length": record["seq_length"],
                      "parameters": backbone.count_params()}, indent=2))
    return 0


def cli():
    """The command (`python -m`)."""
    run_command(main, define_flags)


if __name__ == "__main__":
    cli()
