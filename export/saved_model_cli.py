"""`python -m export.saved_model_cli` in a checkout (the earlier form): runs
`python -m albert_tf.export.saved_model_cli`."""

import runpy

if __name__ == "__main__":
    runpy.run_module("albert_tf.export.saved_model_cli", run_name="__main__", alter_sys=True)
