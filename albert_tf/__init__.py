"""albert_tf: ALBERT (A Lite BERT, Lan et al., ICLR 2020, arXiv 1909.11942) in TensorFlow 2 /
Keras 3.

The Keras models are imported on first use, so light modules (`albert_tf.config`,
`albert_tf.tokenization`, `albert_tf.features`) load without TensorFlow; the data-generation
workers rely on that.
"""

import os as _os

_os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from albert_tf.config import PRESETS, SHARING_MODES, AlbertConfig  # noqa: E402
from albert_tf.lazy import lazy_exports  # noqa: E402

_LAZY = {
    "AlbertBackbone": "albert_tf.models.backbone",
    "AlbertPretrainer": "albert_tf.models.pretrainer",
    "AlbertClassifier": "albert_tf.models.classifier",
    "AlbertTokenClassifier": "albert_tf.models.token_classifier",
    "AlbertSpanModel": "albert_tf.models.task_models",
    "AlbertSquadV2": "albert_tf.models.task_models",
    "AlbertMultipleChoice": "albert_tf.models.task_models",
    "AlbertTextClassifier": "albert_tf.api.text_classifier",
    "AlbertTextTagger": "albert_tf.api.text_tagger",
    "AlbertTextPreprocessor": "albert_tf.api.preprocessing",
    "load_pretrained": "albert_tf.checkpoints",
}

__all__ = ["AlbertConfig", "AlbertBackbone", "AlbertPretrainer", "AlbertClassifier",
           "AlbertTokenClassifier", "AlbertSpanModel", "AlbertSquadV2", "AlbertMultipleChoice",
           "AlbertTextClassifier", "AlbertTextTagger", "AlbertTextPreprocessor",
           "load_pretrained", "PRESETS", "SHARING_MODES"]
__version__ = "0.1.0"
__getattr__, __dir__ = lazy_exports(__name__, _LAZY, imports_tensorflow=True)
