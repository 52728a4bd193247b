"""`python -m export.ops_check` in a checkout (the earlier form): runs
`python -m albert_tf.export.ops_check`."""

import runpy

if __name__ == "__main__":
    runpy.run_module("albert_tf.export.ops_check", run_name="__main__", alter_sys=True)
