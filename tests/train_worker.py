"""Subprocess entry for the distributed training tests (TensorFlow's devices must be configured
before it starts, and multi-worker needs one process per worker).

    python tests/train_worker.py --strategy mirrored --logical_cpus 2 --files PATTERN \
        --output_dir DIR --weights OUT.npz [--steps 4] [--grad_accum_steps 1] \
        [--input_shards N] [--save_every K] [--kill_at_step S]

Trains the tiny test model for --steps steps with a fixed seed and saves its weights (keyed by
variable path) to --weights. --kill_at_step S: the process SIGKILLs itself as soon as its
checkpoint of step S is written (a preemption at a known point; nothing is cleaned up).
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from albert_tf import quiet  # noqa: E402

quiet.skip_exit_collection()  # as our commands: the exit does not traverse TensorFlow's heap

TINY = dict(vocab_size=8000, embedding_size=16, hidden_size=32, num_hidden_layers=3,
            num_hidden_groups=1, num_attention_heads=4, intermediate_size=40,
            max_position_embeddings=64)


def run(strategy_name, files, output_dir, steps=4, grad_accum_steps=1, batch=8,
        iterations_per_loop=2, clip_norm=0.1, jit_compile=False, seed=11, export_dir=None,
        input_shards=0, save_every=None):
    import keras
    import tensorflow as tf

    from albert_tf import AlbertConfig
    from albert_tf.training.distribute import get_strategy
    from albert_tf.training.train_lib import PretrainingConfig, PretrainingRun

    tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(seed)
    strategy = get_strategy(strategy_name, collective_timeout_s=120)
    cfg = PretrainingConfig(
        albert_config=AlbertConfig(**TINY), input_file=files, output_dir=output_dir,
        max_seq_length=64, max_predictions_per_seq=10, train_batch_size=batch,
        num_train_steps=steps, num_warmup_steps=1, learning_rate=1e-2,
        save_checkpoints_steps=save_every or steps, iterations_per_loop=iterations_per_loop,
        grad_accum_steps=grad_accum_steps, clip_norm=clip_norm, jit_compile=jit_compile,
        seed=seed, shuffle_window=64, input_shards=input_shards, verbose=False)
    exporter = None
    if export_dir:  # the run_pretraining --export_dir path
        from albert_tf.export.run_exporter import make_exporter

        exporter = make_exporter(export_dir, output_dir, None, 32)
    PretrainingRun(cfg, strategy).run(exporter=exporter)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--strategy", required=True)
    parser.add_argument("--logical_cpus", type=int, default=0)
    parser.add_argument("--files", required=True)
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--weights", required=True)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--grad_accum_steps", type=int, default=1)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--export_dir", default=None)
    parser.add_argument("--input_shards", type=int, default=0)
    parser.add_argument("--tf_config", default=None, help="TF_CONFIG for multi-worker runs.")
    parser.add_argument("--save_every", type=int, default=None)
    parser.add_argument("--kill_at_step", type=int, default=None)
    args = parser.parse_args()
    if args.tf_config:
        os.environ["TF_CONFIG"] = args.tf_config

    import tensorflow as tf

    if args.logical_cpus:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * args.logical_cpus)
    import numpy as np

    from albert_tf.training.train_lib import PretrainingRun

    captured = {}
    original_run = PretrainingRun.run

    def capture(self, exporter=None):
        result = original_run(self, exporter=exporter)
        captured["weights"] = {v.path: np.asarray(v.numpy()) for v in self.model.weights}
        captured["replicas"] = self.replicas
        captured["losses"] = [h["loss"] for h in result.get("history", [])]
        captured["start"], captured["first_step"] = result["start"], (
            result["history"][0]["step"] if result.get("history") else None)
        return result

    PretrainingRun.run = capture
    if args.kill_at_step is not None:
        import signal

        original_save = tf.train.CheckpointManager.save

        def save_then_die(self, checkpoint_number=None, **kwargs):
            path = original_save(self, checkpoint_number=checkpoint_number, **kwargs)
            if checkpoint_number == args.kill_at_step:
                print(f"killed after saving {path}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            return path

        tf.train.CheckpointManager.save = save_then_die
    # as the commands report errors: one line, status 1
    from albert_tf.commands.runner import guarded

    code = guarded(run, args.strategy, args.files, args.output_dir, steps=args.steps,
                   grad_accum_steps=args.grad_accum_steps, batch=args.batch,
                   export_dir=args.export_dir, input_shards=args.input_shards,
                   save_every=args.save_every)
    if code:
        sys.exit(code)
    np.savez(args.weights, **{k.replace("/", "|"): v for k, v in captured["weights"].items()},
             __replicas__=np.array(captured["replicas"]),
             __losses__=np.array(captured["losses"]))
    print(f"start={captured['start']} first_logged_step={captured['first_step']} "
          f"replicas={captured['replicas']} losses={captured['losses']}", flush=True)


if __name__ == "__main__":
    main()
