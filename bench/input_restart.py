"""What resuming the training input costs: the deterministic stream (`InputPlan`) against the
former checkpointed shuffle buffer and against reading up to the position.

    python -m bench.input_restart [--files 'data/train-*.tfrecord'] [--step 125000] \
        [--global_batch_size 4096] [--input_shards 1] [--shuffle_window 10000]

Without --files, pretraining TFRecords (seq 512, 20 predictions) are generated from the bundled
sample into a temporary directory. Prints, for one input shard (one host's stream):
- the seconds to the first record and to the first per-replica batch at step 0 and at --step
  (median of --repeats fresh pipelines), and the records a restart reads before it;
- the rate of reading and discarding records, and from it what reaching --step by reading every
  consumed record would take (computed: step x batch per shard / rate);
- the bytes a checkpoint needs for the input: the plan's JSON now, and the iterator checkpoint
  of a 10,000-record shuffle buffer (the former pipeline, rebuilt here to weigh it).
"""

import glob
import json
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

from bench import ROOT, call_times  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("files", None, "Pretraining TFRecords (default: generated from the sample).")
flags.DEFINE_integer("max_seq_length", 512, "Of --files (and of the generated data).")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Of --files (and of the generated data).")
flags.DEFINE_integer("step", 125000, "The step to restart at (the paper's run: 125,000).")
flags.DEFINE_integer("global_batch_size", 4096, "The paper's batch size.")
flags.DEFINE_integer("input_shards", 1, "Input shards; the figures are for shard 0.")
flags.DEFINE_integer("shuffle_window", 10000, "Shuffle window (records).")
flags.DEFINE_integer("repeats", 3, "Fresh pipelines per timing (median reported).")
flags.DEFINE_string("json", None, "Also write the figures here.")


def _generate(tmp):
    sys.path.insert(0, ROOT)
    from data.generator import generate, make_job
    from data.prepare_corpus import prepare_corpus
    from data.train_vocab import train_vocab

    corpus = os.path.join(tmp, "books.txt")
    prepare_corpus(os.path.join(ROOT, "albert_tf", "sample_data", "pretrain_text", "gutenberg", "*-0.txt"),
                   corpus)
    vocab = train_vocab(corpus, os.path.join(tmp, "v8k"), vocab_size=8000)["model_file"]
    job = make_job(corpus, os.path.join(tmp, "data", "train"), vocab, num_output_shards=8,
                   max_seq_length=FLAGS.max_seq_length,
                   max_predictions_per_seq=FLAGS.max_predictions_per_seq, dupe_factor=8)
    generate(job, num_workers=2, progress=False)
    return os.path.join(tmp, "data", "train-*.tfrecord")


def _timed(fn):
    return statistics.median(call_times(fn, 0, FLAGS.repeats))


def main(argv):
    del argv
    import tensorflow as tf

    from albert_tf.input_pipeline import InputPlan, training_dataset

    with tempfile.TemporaryDirectory() as tmp:
        pattern = FLAGS.files or _generate(tmp)
        plan = InputPlan.create(pattern, FLAGS.global_batch_size, FLAGS.input_shards, seed=1,
                                shuffle_window=FLAGS.shuffle_window)
        files, counts = plan.shard(0)
        context = tf.distribute.InputContext(FLAGS.input_shards, 0, FLAGS.input_shards)
        seq, preds = FLAGS.max_seq_length, FLAGS.max_predictions_per_seq
        figures = {"files_in_shard": len(files), "records_in_shard": sum(counts),
                   "max_records_per_file": max(counts), "step": FLAGS.step,
                   "global_batch_size": FLAGS.global_batch_size,
                   "input_shards": FLAGS.input_shards, "shuffle_window": FLAGS.shuffle_window}
        for name, step in (("start", 0), ("restart", FLAGS.step)):
            position = plan.position(0, step)
            figures[f"{name}_position"] = {k: v for k, v in position.items() if k != "file"}
            figures[f"{name}_first_record_s"] = _timed(
                lambda: next(iter(plan.records_dataset(0, step))))
            figures[f"{name}_first_batch_s"] = _timed(
                lambda: next(iter(training_dataset(plan, step, seq, preds, context))))
        start = time.perf_counter()
        read = sum(1 for _ in tf.data.Dataset.from_tensor_slices(files).flat_map(
            tf.data.TFRecordDataset))
        rate = read / (time.perf_counter() - start)
        consumed = FLAGS.step * plan.shard_batch_size
        figures.update(read_and_discard_records_per_s=rate, records_consumed_at_step=consumed,
                       read_to_position_s=consumed / rate)
        figures["plan_json_bytes"] = len(json.dumps(plan.to_dict(), indent=1))
        # The former pipeline: shuffled files, interleave, a 10,000-record shuffle buffer,
        # parse, batch; its iterator checkpoint holds the buffer.
        former = (tf.data.Dataset.from_tensor_slices(files).shuffle(len(files), seed=1).repeat()
                  .interleave(tf.data.TFRecordDataset, cycle_length=min(8, len(files)))
                  .shuffle(10000, seed=1)
                  .batch(FLAGS.global_batch_size // FLAGS.input_shards))
        iterator = iter(former)
        next(iterator)
        prefix = tf.train.Checkpoint(iterator=iterator).write(os.path.join(tmp, "iterator"))
        figures["former_iterator_checkpoint_bytes"] = sum(
            os.path.getsize(p) for p in glob.glob(prefix + "*"))

    print(f"shard 0 of {FLAGS.input_shards}: {len(files)} files, {sum(counts):,} records "
          f"(at most {max(counts):,} per file), seq {seq}, batch {FLAGS.global_batch_size}, "
          f"window {FLAGS.shuffle_window:,}")
    for name, step in (("start", 0), ("restart", FLAGS.step)):
        p = figures[f"{name}_position"]
        print(f"step {step:>7,}: first record {figures[f'{name}_first_record_s']:.2f} s, first "
              f"batch {figures[f'{name}_first_batch_s']:.2f} s; epoch {p['epoch']}, offset "
              f"{p['offset']:,}, reads {p['restart_reads']:,} records before the position")
    print(f"reading every consumed record instead: {consumed:,} records at "
          f"{rate:,.0f} records/s = {figures['read_to_position_s']:,.0f} s")
    print(f"input state per checkpoint: plan JSON {figures['plan_json_bytes']:,} bytes (once "
          f"per run) vs a 10,000-record shuffle-buffer iterator checkpoint "
          f"{figures['former_iterator_checkpoint_bytes']:,} bytes per worker")
    if FLAGS.json:
        with open(FLAGS.json, "w") as f:
            json.dump(figures, f, indent=2)


if __name__ == "__main__":
    sys.exit(app.run(main))
