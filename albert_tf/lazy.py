"""Package exports loaded on first use (PEP 562), so that importing a package (its light
modules: the config, the readers, the metrics) does not load TensorFlow."""

from __future__ import annotations

import importlib
import sys

from albert_tf import quiet


def lazy_exports(package: str, exports: dict, imports_tensorflow: bool = False):
    """(`__getattr__`, `__dir__`) for `package` that load each of `exports` ({name: module})
    from its module on first access and keep it. `imports_tensorflow`: every export needs
    TensorFlow, which is then imported without its start-up lines (`quiet.import_tensorflow`:
    the Python API prints what the commands print)."""

    def __getattr__(name):
        if name in exports:
            if imports_tensorflow:
                quiet.import_tensorflow()
            value = getattr(importlib.import_module(exports[name]), name)
            setattr(sys.modules[package], name, value)
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__():
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
