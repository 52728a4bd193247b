"""`python -m export.export_tflite` in a checkout (the earlier form): runs
`python -m albert_tf.export.export_tflite`."""

import runpy

if __name__ == "__main__":
    runpy.run_module("albert_tf.export.export_tflite", run_name="__main__", alter_sys=True)
