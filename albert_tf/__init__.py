"""albert_tf: ALBERT (A Lite BERT, Lan et al., ICLR 2020, arXiv 1909.11942) in TensorFlow 2 /
Keras 3.

The Keras models are imported on first use, so light modules (`albert_tf.config`,
`albert_tf.tokenization`, `albert_tf.features`) load without TensorFlow; the data-generation
workers rely on that.
"""

import importlib as _importlib
import os as _os
import sys as _sys

_os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from albert_tf.config import PRESETS, SHARING_MODES, AlbertConfig  # noqa: E402
from albert_tf import quiet as _quiet  # noqa: E402


def lazy_exports(package: str, exports: dict, imports_tensorflow: bool = False):
    """(`__getattr__`, `__dir__`) for `package` that load each of `exports` ({name: module})
    from its module on first access and keep it (PEP 562), so that importing a package (its
    light modules: the config, the readers, the metrics) does not load TensorFlow; the
    sub-packages use it too. `imports_tensorflow`: every export needs TensorFlow, which is then
    imported without its start-up lines (`albert_tf.quiet.import_tensorflow`: the Python API
    prints what the commands print)."""

    def __getattr__(name):
        if name in exports:
            if imports_tensorflow:
                _quiet.import_tensorflow()
            value = getattr(_importlib.import_module(exports[name]), name)
            setattr(_sys.modules[package], name, value)
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__():
        return sorted(set(vars(_sys.modules[package])) | set(exports))

    return __getattr__, __dir__


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
