"""`python -m data.prepare_corpus` in a checkout (the earlier form): runs
`python -m albert_tf.data.prepare_corpus`."""

import runpy

if __name__ == "__main__":
    runpy.run_module("albert_tf.data.prepare_corpus", run_name="__main__", alter_sys=True)
