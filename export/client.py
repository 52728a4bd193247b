"""`python -m export.client` in a checkout (the earlier form): runs
`python -m albert_tf.export.client`."""

import runpy

if __name__ == "__main__":
    runpy.run_module("albert_tf.export.client", run_name="__main__", alter_sys=True)
