"""The exporter a training command hands its run (`TrainingRun.run(exporter)`,
`albert_tf.training.actions.export_models`): SavedModels through the one exporter
(`albert_tf.export.saved_model.export_saved_model`) of the models a run delivers. The entry
points (`albert_tf.run_*`) build it and pass it down, so the command layer and the library never
import the serving package.
"""

from __future__ import annotations

import glob
import os

from albert_tf.commands.experiment import ExperimentConfig
from albert_tf.export.saved_model import ExportError, export_saved_model


def make_exporter(export_dir, output_dir, spm_model_file, max_seq_length, labels=None,
                  text_pair=False, source_type="run_pretraining", options=None,
                  do_lower_case=True, best_suffix="_best", threshold=None, vocab_file=None):
    """exporter(model, which) for `TrainingRun.run`: SavedModels through the one exporter
    (`albert_tf.export.saved_model`), final to `export_dir`, best to `export_dir + best_suffix`.
    `labels`, `text_pair` and `threshold` are a classifier's (class names, sentence-pair
    `serving_default`, the official --threshold_to_export served with its answers); `options`
    a SQuAD or RACE model's decoding and packing settings (`export_saved_model`). Without
    `spm_model_file`, a WordPiece `vocab_file` is the vocabulary."""

    def exporter(model, which, step=None):
        spm = spm_model_file or next(iter(sorted(glob.glob(os.path.join(output_dir,
                                                                       "*.model")))), None)
        if not spm_model_file and vocab_file:
            spm = None
        elif not spm:
            raise ExportError(f"No SentencePiece model in {output_dir} (the data had no "
                              "sidecar naming one); pass --spm_model_file.")
        target = export_dir.rstrip("/") + ("" if which == "final" else best_suffix)
        source = {"type": source_type, "output_dir": output_dir, "which": which}
        if step is not None:
            source["step"] = step
        path = export_saved_model(model, target, spm, max_seq_length=max_seq_length,
                                  labels=labels, text_pair=text_pair, options=options,
                                  do_lower_case=do_lower_case, source=source,
                                  threshold=threshold, vocab_file=vocab_file)
        print(f"exported the {which} model" + (f" (step {step})" if step is not None else "")
              + f" to {path}", flush=True)
        return path

    return exporter


def task_exporter(exp: ExperimentConfig, source_type, **kwargs):
    """`make_exporter` for a fine-tuning run's --export_dir (None without it): the one model
    that `model_for_prediction` chooses goes to EXPORT_DIR, as the official runners export
    `model.ckpt-best`."""
    if not exp.export_dir:
        return None
    return make_exporter(exp.export_dir, exp.output_dir, exp.spm_model_file,
                         exp.max_seq_length, source_type=source_type,
                         do_lower_case=exp.do_lower_case, best_suffix="",
                         vocab_file=exp.get("vocab_file"), **kwargs)
