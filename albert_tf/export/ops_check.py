r"""Keeping exported graphs loadable by the TF Serving release users run.

A SavedModel that uses an op (or an op attribute) newer than the server's TensorFlow fails at load
with "Op type not registered" (tensorflow/serving#2267). The newest TF Serving release, 2.20, is
built with TensorFlow 2.20 and tensorflow-text 2.20.0; `serving_ops_tf2.20.json` beside this file
lists every op those two register, with each op's attribute names. The exporter checks every node
of the graph and of its function library against it and refuses, naming the op, a graph that
leaves it.

Regenerate the list in an environment with the server's versions (see docs/serving.md):

    python -m venv /tmp/tf220 && /tmp/tf220/bin/pip install tensorflow==2.20.0 \
        tensorflow-text==2.20.0
    /tmp/tf220/bin/python albert_tf/export/ops_check.py > albert_tf/export/serving_ops_tf2.20.json

(This file runs there as a plain script, where albert_tf is not installed: it needs nothing
of this project; with albert_tf at hand, TF's start-up lines are filtered as in every command.)
"""

from __future__ import annotations

try:
    from albert_tf.quiet import entry_point  # noqa: E402
except ImportError:  # a plain script in the server's environment (tools/tf_serving_compat.sh)
    def entry_point(name):
        return None

entry_point(__name__)  # run as a program: TF's start-up lines filtered (albert_tf.quiet)

import functools
import glob
import json
import os
import sys

ALLOWED_OPS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "serving_ops_tf2.20.json")


class UnsupportedOpError(ValueError):
    """The graph uses an op or attribute that the target TF Serving release does not have."""


def registered_ops() -> dict:
    """{op name: sorted attribute names} of every op registered in this process, after loading
    every tensorflow-text op library (TF Serving links all of them)."""
    import tensorflow as tf
    from tensorflow.core.framework import op_def_pb2
    from tensorflow.python.client import pywrap_tf_session as c_api

    import tensorflow_text

    for library in sorted(glob.glob(os.path.join(os.path.dirname(tensorflow_text.__file__),
                                                 "python", "ops", "_*.so"))):
        tf.load_op_library(library)
    ops = op_def_pb2.OpList.FromString(c_api.TF_GetBuffer(c_api.TF_GetAllOpList()))
    return {op.name: sorted(attr.name for attr in op.attr) for op in ops.op}


@functools.lru_cache(maxsize=None)
def load_allowed_ops(path: str = ALLOWED_OPS_FILE) -> dict:
    with open(path, encoding="utf-8") as f:
        record = json.load(f)
    return record


def graph_ops(saved_model_proto) -> dict:
    """{op name: set of attribute names used} over the graphs and function libraries of a
    `SavedModel` proto; calls of library functions are not ops and are left out."""
    used = {}
    for meta_graph in saved_model_proto.meta_graphs:
        library = meta_graph.graph_def.library
        functions = {f.signature.name for f in library.function}
        nodes = list(meta_graph.graph_def.node)
        for function in library.function:
            nodes.extend(function.node_def)
        for node in nodes:
            if node.op in functions:
                continue
            # Attributes named "_..." are runtime annotations, not part of the op's definition.
            used.setdefault(node.op, set()).update(a for a in node.attr if not a.startswith("_"))
    return used


def check_saved_model_ops(export_dir: str, allowed: dict | None = None) -> dict:
    """Raises `UnsupportedOpError` naming every op or attribute of the SavedModel at
    `export_dir` that the allowed list lacks; returns {op: attrs} used."""
    from tensorflow.core.protobuf import saved_model_pb2

    record = allowed or load_allowed_ops()
    allowed_ops = record["ops"]
    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(export_dir, "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    used = graph_ops(proto)
    target = (f"TensorFlow {record.get('tensorflow', '?')} + tensorflow-text "
              f"{record.get('tensorflow_text', '?')} (TF Serving {record.get('serving', '?')})")
    missing_ops = sorted(op for op in used if op not in allowed_ops)
    missing_attrs = sorted(f"{op}.{attr}" for op, attrs in used.items() if op in allowed_ops
                           for attr in attrs - set(allowed_ops[op]))
    if missing_ops or missing_attrs:
        parts = []
        if missing_ops:
            parts.append(f"ops {missing_ops}")
        if missing_attrs:
            parts.append(f"op attributes {missing_attrs}")
        raise UnsupportedOpError(
            f"The exported graph uses {' and '.join(parts)}, which {target} does not register, so "
            "that server would fail to load it ('Op type not registered'). Avoid the op in the "
            "serving graph, or target a newer server by regenerating the list "
            "(albert_tf/export/ops_check.py)"
            " and passing it as --allowed_ops.")
    return used


def main() -> int:
    import tensorflow as tf
    import tensorflow_text

    record = {"tensorflow": tf.__version__, "tensorflow_text": tensorflow_text.__version__,
              "serving": ".".join(tf.__version__.split(".")[:2]),
              "generated_by": "python albert_tf/export/ops_check.py", "ops": registered_ops()}
    json.dump(record, sys.stdout, indent=0, sort_keys=True)
    sys.stdout.write("\n")
    return 0


def cli():
    """The command (`python -m` and the console script in pyproject.toml)."""
    if any(arg in ("-h", "--help", "-help") for arg in sys.argv[1:]):
        print(__doc__.strip())  # no flags: it writes the JSON list to standard output
        sys.exit(0)
    if sys.argv[1:]:
        print(f"error: unexpected argument(s) {' '.join(sys.argv[1:])}: this command takes "
              "none (it writes the op list to standard output).", file=sys.stderr)
        sys.exit(1)
    sys.exit(main())


if __name__ == "__main__":
    cli()
