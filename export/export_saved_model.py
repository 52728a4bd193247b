"""`python -m export.export_saved_model` in a checkout (the earlier form): runs
`python -m albert_tf.export.export_saved_model`."""

import runpy

if __name__ == "__main__":
    runpy.run_module("albert_tf.export.export_saved_model", run_name="__main__", alter_sys=True)
