#!/usr/bin/env bash
# Checks an export against what TF Serving 2.20 (the newest release) runs: TensorFlow 2.20.0 and
# tensorflow-text 2.20.0, in a separate virtual environment.
#   1. regenerates the op list there and compares it with albert_tf/export/serving_ops_tf2.20.json;
#   2. builds albert_tf/export/serving_loader.cc against that TensorFlow wheel and loads the export the way
#      the server does (LoadSavedModel, tag "serve", Session::Run of serving_default on text).
#
#   tools/tf_serving_compat.sh exports/albert/1 [VENV]        (VENV default /tmp/venv-tf220)
set -euo pipefail
cd "$(dirname "$0")/.."
EXPORT=${1:?usage: tools/tf_serving_compat.sh EXPORT_VERSION_DIR [VENV]}
VENV=${2:-/tmp/venv-tf220}
PY=${PYTHON:-.venv/bin/python}
if [ ! -x "$VENV/bin/python" ]; then
  python3.11 -m venv "$VENV"
  "$VENV/bin/pip" install -q tensorflow==2.20.0 tensorflow-text==2.20.0
fi
TF_CPP_MIN_LOG_LEVEL=3 "$VENV/bin/python" albert_tf/export/ops_check.py > "$VENV/serving_ops.json" 2>/dev/null
"$PY" - "$VENV/serving_ops.json" <<'PYEOF'
import json, sys
new = json.load(open(sys.argv[1])); shipped = json.load(open("albert_tf/export/serving_ops_tf2.20.json"))
same = new["ops"] == shipped["ops"]
print(f"op list of TF {new['tensorflow']} + tf-text {new['tensorflow_text']}: {len(new['ops'])} ops; "
      f"{'identical to' if same else 'DIFFERS from'} albert_tf/export/serving_ops_tf2.20.json")
sys.exit(0 if same else 1)
PYEOF
"$PY" -m albert_tf.export.cc_loader --python "$VENV/bin/python" --saved_model "$EXPORT" \
    --text "The capital of France is [MASK]." --text "ALBERT shares one block across layers." \
    2> >(grep -v -E "^(I0000|W0000|E0000|WARNING: All|To enable)" >&2)
