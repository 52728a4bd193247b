"""The command layer: flags (each defined once), --config_file and config.yaml, the shared
runner of the fine-tuning commands, the console scripts and the filter of TensorFlow's
start-up lines. The entry points (`python -m albert_tf.run_*`) are thin modules over it."""
