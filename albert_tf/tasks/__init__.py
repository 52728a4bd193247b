"""The tasks the one training loop runs (`albert_tf.training.train_lib.TrainingRun`): what each
plugs into it (`base.Task`: its model, records, loss, metrics, prediction), one module (or package)
per task family:

- `pretraining`: masked LM + sentence order (`PretrainingTask`);
- `glue` (readers, labels, metrics; your own files' task, `custom_task`), `tables` (CSV, TSV
  and JSON Lines files of your own) and `classification` (records, `ClassificationTask`);
- `squad/`: `features` (alignment, windows, records), `decoding`, `task` (`SquadTask`),
  `in_graph` (the same in TensorFlow ops, for serving), `evaluation` (the official scripts);
- `race`: readers, records, `RaceTask`.

TFRecords of every task are written by `albert_tf.records`. The classes load on first use
(PEP 562), so the readers and metrics (`glue`, `squad.evaluation`) import without TensorFlow.
"""

from albert_tf import lazy_exports

_LAZY = {"SUM": "albert_tf.tasks.base", "Task": "albert_tf.tasks.base",
         "LabelledTask": "albert_tf.tasks.base", "PretrainingTask": "albert_tf.tasks.pretraining"}
__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
