"""`python -m export.cc_loader` in a checkout (the earlier form): runs
`python -m albert_tf.export.cc_loader`."""

import runpy

if __name__ == "__main__":
    runpy.run_module("albert_tf.export.cc_loader", run_name="__main__", alter_sys=True)
