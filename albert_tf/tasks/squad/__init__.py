"""SQuAD v1.1 / v2.0: `features` (pieces aligned to the context's characters, windows,
records), `decoding` (n-best spans, answers, null odds), `task` (`SquadTask`), `in_graph` (the
same alignment, windows and decoding as TensorFlow ops, for SavedModels), `evaluation` (the
official v1.1 and v2.0 scripts)."""

from albert_tf import lazy_exports

_MODULES = {"decoding": ("best_beam_spans", "best_spans", "predict_answers",
                         "predict_answers_v2"),
            "features": ("AlignedContext", "END_POSITIONS", "START_POSITIONS", "UNIQUE_IDS",
                         "align_context", "build_features", "features_digest", "question_features",
                         "squad_schema", "windows", "write_features"),
            "in_graph": ("align_context_in_graph", "decode_beam_in_graph", "decode_in_graph",
                         "windows_in_graph"),
            "task": ("SquadTask", "SquadV2Task")}
_LAZY = {name: f"albert_tf.tasks.squad.{module}" for module, names in _MODULES.items()
         for name in names}
_LAZY["AlbertSpanModel"] = _LAZY["AlbertSquadV2"] = "albert_tf.models.task_models"
__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
