"""`python -m data.train_vocab` in a checkout (the earlier form): runs
`python -m albert_tf.data.train_vocab`."""

import runpy

if __name__ == "__main__":
    runpy.run_module("albert_tf.data.train_vocab", run_name="__main__", alter_sys=True)
