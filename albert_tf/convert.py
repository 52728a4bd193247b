r"""Convert ALBERT checkpoints: Google's TF1 checkpoints / TF-Hub modules and Hugging Face folders
to our format, and any of them to an official name-based TF1 checkpoint or a Hugging Face folder.

    python -m albert_tf.convert --source tf1 --input albert_base/model.ckpt-best \
        --output converted/albert_base
    python -m albert_tf.convert --source hf --input hf_albert_base_v2/ --output converted/base
    python -m albert_tf.convert --source albert_tf --input converted/base --target tf1 \
        --output tf1_export/
    python -m albert_tf.convert --source albert_tf --input runs/sst2_model --target hf \
        --output hf_sst2/     # transformers.AlbertForSequenceClassification.from_pretrained
    python -m albert_tf.convert --input model.keras --target hf --output hf_clf/
                              # clf.save("model.keras"): its SentencePiece model and labels too

TF-Hub modules are read, not written: `--target tf1` writes the checkpoint and
albert_config.json that the official export_to_tfhub.py turns into a module.

Then `albert_tf.load_pretrained("converted/albert_base")`.
"""

from albert_tf.quiet import entry_point  # noqa: E402

entry_point(__name__)  # run as a program: TF's start-up lines filtered (albert_tf.quiet)

import json
import sys

from absl import flags  # noqa: E402

from albert_tf.commands import flags as albert_flags  # noqa: E402
from albert_tf.checkpoints import MODEL_KINDS, CheckpointError, convert  # noqa: E402
from albert_tf.commands.cli import run_command  # noqa: E402
from albert_tf.commands.flags import FLAGS  # noqa: E402


def define_flags():
    flags.DEFINE_enum("source", "auto", ["auto", "tf1", "hf", "albert_tf"],
                      "Input format: official TF1 checkpoint or TF-Hub module, Hugging Face "
                      "save_pretrained folder, or albert_tf's (our directory, a .keras file "
                      "of AlbertTextClassifier / AlbertTextTagger or of a model, a training "
                      "run's --output_dir, DIR:best, RUN/ckpt-N). auto: from what is there.")
    flags.DEFINE_string("input", None, "Checkpoint prefix, file or directory to read.")
    albert_flags.define("output", "albert_config_file", "overwrite", "do_lower_case",
                        "spm_model_file", do_lower_case=None,
                        notes={"output": "A directory (must be new or empty).",
                               "spm_model_file": "Default: the source's (a .keras model's, "
                                                 "the .model in its directory); copied into "
                                                 "every target. Given, it must have the "
                                                 "model's vocab_size pieces.",
                               "overwrite": "Here: an earlier conversion at --output, "
                                            "replaced whole (a directory holding other "
                                            "files is refused).",
                               "albert_config_file": "Default: albert_config.json beside a TF1 "
                                                     "checkpoint; config.json of a Hugging Face "
                                                     "folder.",
                               "do_lower_case": "Here: the casing recorded by --target "
                                                "albert_tf (albert_tf.json) and hf "
                                                "(tokenizer_config.json). Default: the "
                                                "casing the source records (a .keras "
                                                "model, a run's config.yaml, our "
                                                "directory, a Hugging Face folder), else "
                                                "true."})
    flags.DEFINE_enum("target", "albert_tf", ["albert_tf", "tf1", "hf"],
                      "Output format: our directory format, an official name-based TF1 "
                      "checkpoint (model.ckpt + albert_config.json), or a Hugging Face folder "
                      "(config.json, model.safetensors, spiece.model, tokenizer_config.json) "
                      "for AlbertModel / AlbertForPreTraining / "
                      "AlbertForSequenceClassification.from_pretrained.")
    flags.DEFINE_enum("model", "auto", ["auto", *MODEL_KINDS],
                      "Model to build (a registered kind). auto: from the checkpoint (Hugging "
                      "Face: its architectures; otherwise the heads present). backbone drops "
                      "the heads (reported as skipped).")
    albert_flags.define_digit_comma(None, "Default: the form the source's vocabulary records "
                                    "(official where it records none); huggingface for a "
                                    "model fine-tuned with AlbertTokenizer.")
    flags.mark_flags_as_required(["input", "output"])


def main(argv):
    del argv
    try:
        summary = convert(FLAGS.source, FLAGS.input, FLAGS.output, target=FLAGS.target,
                          albert_config_file=FLAGS.albert_config_file, model=FLAGS.model,
                          overwrite=FLAGS.overwrite, do_lower_case=FLAGS.do_lower_case,
                          spm_model_file=FLAGS.spm_model_file, digit_comma=FLAGS.digit_comma)
    except (CheckpointError, ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    skipped, notes = summary.pop("skipped"), summary.pop("notes")
    print(json.dumps(summary, indent=2))
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if skipped:
        reasons = {}
        for reason in skipped.values():
            reasons[reason] = reasons.get(reason, 0) + 1
        print("skipped: " + ", ".join(f"{n} {r}" for r, n in sorted(reasons.items())))
    return 0


def cli():
    """The command (`python -m` and the console script in pyproject.toml)."""
    run_command(main, define_flags)


if __name__ == "__main__":
    cli()
