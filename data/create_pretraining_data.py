"""`python -m data.create_pretraining_data` in a checkout (the earlier form): runs
`python -m albert_tf.data.create_pretraining_data`."""

import runpy

if __name__ == "__main__":
    runpy.run_module("albert_tf.data.create_pretraining_data", run_name="__main__", alter_sys=True)
