"""The training loop and its parts: the trainer (one step under any tf.distribute strategy),
the controller (when to save, evaluate, stop), the run directory, actions after training,
LAMB and the schedules, float16 loss scaling, strategies, signals and the progress display (the
input pipeline, read by the tasks too, is `albert_tf.input_pipeline`)."""
