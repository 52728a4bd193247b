"""albert_tf: ALBERT (A Lite BERT, Lan et al., ICLR 2020, arXiv 1909.11942) in TensorFlow 2 /
Keras 3."""

import os as _os

_os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from albert_tf.backbone import AlbertBackbone  # noqa: E402
from albert_tf.checkpoints import load_pretrained  # noqa: E402
from albert_tf.classifier import AlbertClassifier  # noqa: E402
from albert_tf.config import PRESETS, SHARING_MODES, AlbertConfig  # noqa: E402
from albert_tf.pretrainer import AlbertPretrainer  # noqa: E402

__all__ = ["AlbertConfig", "AlbertBackbone", "AlbertPretrainer", "AlbertClassifier",
           "load_pretrained", "PRESETS", "SHARING_MODES"]
__version__ = "0.1.0"
