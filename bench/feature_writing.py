"""Feature writing beside training, in examples per second on the same machine.

    python -m bench.feature_writing                            # a few minutes
    python -m bench.feature_writing --doc docs/benchmarks.md   # and rewrite its generated section

Writers, timed in this process (every call writes a fresh directory: nothing is cached), with an
8k SentencePiece vocabulary trained here on the bundled novels (`bench.novels_vocab`):

- tagging: `albert_tf.tasks.tagging.write_examples` (what `run_tagging` runs) on WNUT-17 train,
  sentences per second at `--max_seq_length`; beside it `per_sentence`, the writer's structure
  before issue 57 (the window ops run eagerly once per sentence, one `to_example` per record) on
  the first `--old_sentences` sentences (it is slow), its bytes checked equal to the writer's on
  them. The two alternate, the order reversed every other round.
- GLUE: `albert_tf.tasks.classification.write_examples` on SST-2 train, examples per second.
- SQuAD: `build_features` + `write_features` of `albert_tf.tasks.squad` (what `run_squad_v1`
  runs for training) on SQuAD v1.1 dev at 384 (doc stride 128), questions per second.

Data: the bundled `albert_tf/sample_data` (WNUT-17's first 300 training sentences, 20,000 SST-2
training rows); where `../shared/data` is beside the repository (this project's machines, not a
user's clone) the whole WNUT-17 train file (3,394 sentences) and SQuAD v1.1 dev (10,570
questions; SQuAD is skipped without it).

Training, at each writer's sequence length, on the same data: the command itself (`run_tagging`,
`run_classifier --task_name sst-2`, `run_squad_v1`), the main job's model
(`albert_config_small.json`, randomly initialized, the 8k vocabulary), batch 32, float32, the
median examples/s of its progress lines after the first (tracing). Writes
`OUTPUT_DIR/feature_writing.{json,md}`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

from bench import ROOT, machine, novels_vocab, write_results  # noqa: E402

flags.DEFINE_integer("rounds", 3, "Rounds; each times every writer once.")
flags.DEFINE_integer("max_seq_length", 128, "Sequence length of the tagging and GLUE features.")
flags.DEFINE_integer("old_sentences", 200, "Sentences the per-sentence writer is timed on.")
flags.DEFINE_list("training", ["tagging", "glue", "squad"], "Training rates to measure "
                  "(empty: none).")
flags.DEFINE_integer("train_step", 12, "Training steps per rate (progress every 2).")
flags.DEFINE_string("output_dir", os.path.join("bench_results", "feature_writing"), "Results.")
flags.DEFINE_string("doc", None, "A Markdown file whose generated section to rewrite.")
FLAGS = flags.FLAGS

SAMPLE = os.path.join(ROOT, "albert_tf", "sample_data")
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "data")
CONFIG = os.path.join(SAMPLE, "albert_config_small.json")
SQUAD_SEQ, DOC_STRIDE, QUERY, BATCH = 384, 128, 64, 32
RATE = re.compile(r"\| ([0-9,.]+) examples/s")


def squad_training_file(dev: str) -> str:
    """The SQuAD dev set `dev` as a training file: the first answer of each question only (the
    official reader trains on exactly one per question), written once beside the temp dir."""
    from albert_tf.paths import atomic_write
    from albert_tf.tasks.squad import evaluation as squad_eval

    path = os.path.join(tempfile.gettempdir(), "albert_bench_squad_train-v1.1.json")
    if not os.path.exists(path):
        data = [dict(article, paragraphs=[
            dict(p, qas=[dict(qa, answers=qa["answers"][:1]) for qa in p["qas"]])
            for p in article["paragraphs"]]) for article in squad_eval.load_dataset(dev)]
        with atomic_write(path) as f:
            json.dump({"version": "1.1", "data": data}, f)
    return path


def data_files() -> dict:
    wnut = os.path.join(SHARED, "tagging", "wnut17", "train.conll")
    squad = os.path.join(SHARED, "squad", "dev-v1.1.json.zip")
    return {"tagging": wnut if os.path.exists(wnut)
            else os.path.join(SAMPLE, "tagging", "wnut17", "train.conll"),
            "glue": os.path.join(SAMPLE, "glue", "SST-2"),
            "squad": squad_training_file(squad) if os.path.exists(squad) else None}


def sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def per_sentence_records(sentences, preprocessor, path: str, source: str) -> str:
    """The tagging writer's structure before issue 57 (the same records): the window ops run
    once per sentence (`TaggingPreprocessor.windows`), one `to_example` per record. Returns
    the file."""
    import numpy as np

    from albert_tf import features as F
    from albert_tf.records import to_example, write_records
    from albert_tf.tasks.tagging import WINDOW_INDEX, tagging_schema

    schema = tagging_schema(preprocessor.max_seq_length)
    windows = [preprocessor.windows(s.words, s.tags, f"{source}, line {s.line_numbers[0]}")
               for s in sentences]
    flat = [w for ws in windows for w in ws]
    order = np.random.default_rng([0, 0x7A6]).permutation(len(flat))
    records = [to_example(dict(flat[i].features, **{F.IS_REAL_EXAMPLE: [1],
                                                    WINDOW_INDEX: [flat[i].index]}), schema)
               for i in order.tolist()]
    return write_records(records, path, {"num_examples": len(records)}, 1)[0]


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure_writers(work: str, spm: str, files: dict) -> dict:
    """{writer: {"items": n, "seconds": [per round]}} and the byte check."""
    from albert_tf.tasks import classification, conll, glue
    from albert_tf.tasks.squad import evaluation as squad_eval
    from albert_tf.tasks.squad import features as squad
    from albert_tf.tasks.tagging import TaggingPreprocessor, write_examples
    from albert_tf.tokenization import Tokenizer

    tokenizer = Tokenizer(spm)
    sentences, _ = conll.read_tagged_file(files["tagging"])
    old = sentences[:FLAGS.old_sentences]
    pre = TaggingPreprocessor(tokenizer, conll.label_list(sentences), FLAGS.max_seq_length)
    task = glue.get_task("sst-2")
    examples = glue.load_split(task, files["glue"], "train")
    calls = 0

    def out(name):
        nonlocal calls
        calls += 1
        return os.path.join(work, "out", f"{name}-{calls}", "train.tfrecord")

    writers = {
        "tagging": (len(sentences), lambda: write_examples(
            sentences, pre, out("tagging"), files["tagging"], shuffle_seed=0)),
        "tagging_per_sentence": (len(old), lambda: per_sentence_records(
            old, pre, out("per_sentence"), files["tagging"])),
        "glue": (len(examples), lambda: classification.write_examples(
            examples, task, tokenizer, FLAGS.max_seq_length, out("glue"), shuffle_seed=0))}
    if files["squad"]:
        def write_squad():
            _, features, _ = squad.build_features(
                files["squad"], tokenizer, SQUAD_SEQ, DOC_STRIDE, QUERY, True, seed=0)
            squad.write_features(features, out("squad"), SQUAD_SEQ)

        questions = sum(len(p["qas"]) for a in squad_eval.load_dataset(files["squad"])
                        for p in a["paragraphs"])
        writers["squad"] = (questions, write_squad)
    # the byte check: the writer and the per-sentence structure on the same sentences
    new = write_examples(old, pre, out("check"), files["tagging"], shuffle_seed=0)["files"][0]
    same = sha256(new) == sha256(per_sentence_records(old, pre, out("check_old"),
                                                      files["tagging"]))
    print(f"tagging records of the first {len(old)} sentences identical: {same}", flush=True)
    results = {name: {"items": n, "seconds": []} for name, (n, _) in writers.items()}
    names = list(writers)
    for r in range(FLAGS.rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            seconds = timed(writers[name][1])
            results[name]["seconds"].append(seconds)
            print(f"round {r + 1} {name:22s} {writers[name][0] / seconds:10,.1f} per s "
                  f"({seconds:.2f} s)", flush=True)
        shutil.rmtree(os.path.join(work, "out"), ignore_errors=True)
    return {"writers": results, "identical_bytes": same, "old_sentences": len(old),
            "glue_examples": len(examples)}


def training_rate(kind: str, work: str, spm: str, files: dict) -> dict:
    """The command's median examples/s after its first progress line."""
    seq = SQUAD_SEQ if kind == "squad" else FLAGS.max_seq_length
    out = os.path.join(work, f"train-{kind}")
    common = ["--albert_config_file", CONFIG, "--spm_model_file", spm, "--output_dir", out,
              "--do_train", "--max_seq_length", str(seq), "--train_batch_size", str(BATCH),
              "--iterations_per_loop", "2", "--save_checkpoints_steps", str(FLAGS.train_step),
              "--learning_rate", "1e-4"]
    if kind == "tagging":
        cmd = ["albert_tf.run_tagging", "--train_file", files["tagging"],
               "--train_step", str(FLAGS.train_step), "--warmup_step", "1", *common]
    elif kind == "glue":
        cmd = ["albert_tf.run_classifier", "--task_name", "sst-2", "--data_dir", files["glue"],
               "--train_step", str(FLAGS.train_step), "--warmup_step", "1", *common]
    else:
        cmd = ["albert_tf.run_squad_v1", "--train_file", files["squad"],
               "--num_train_epochs", str(FLAGS.train_step * BATCH / 12000),
               "--warmup_proportion", "0.1", *common]
    proc = subprocess.run([sys.executable, "-m", *cmd], cwd=ROOT, capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=ROOT))
    shutil.rmtree(out, ignore_errors=True)
    if proc.returncode:
        raise SystemExit(f"{cmd[0]} failed:\n{proc.stderr[-3000:]}")
    rates = [float(m.replace(",", "")) for m in RATE.findall(proc.stdout + proc.stderr)]
    if len(rates) < 2:
        raise SystemExit(f"{cmd[0]}: fewer than two progress lines\n{proc.stdout[-2000:]}")
    return {"seq": seq, "examples_per_s": statistics.median(rates[1:]), "progress": rates}


def main(argv):
    del argv
    work = tempfile.mkdtemp(prefix="feature_writing-")
    spm = novels_vocab(work)
    files = data_files()
    results = {"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M"),
               "rounds": FLAGS.rounds, "max_seq_length": FLAGS.max_seq_length,
               "files": {k: os.path.relpath(v, os.path.dirname(ROOT)) if v else None
                         for k, v in files.items()}, "load_before": os.getloadavg()[0]}
    results.update(measure_writers(work, spm, files))
    results["training"] = {}
    for kind in FLAGS.training:
        if kind == "squad" and not files["squad"]:
            continue
        results["training"][kind] = training_rate(kind, work, spm, files)
        print(f"training {kind}: {results['training'][kind]['examples_per_s']:,.1f} examples/s",
              flush=True)
    results["load_after"] = os.getloadavg()[0]
    shutil.rmtree(work, ignore_errors=True)
    write_results(FLAGS.output_dir, "feature_writing", results, markdown(results), FLAGS.doc)
    return 0


def markdown(results) -> str:
    writers, training = results["writers"], results["training"]

    def rates(name):
        n = writers[name]["items"]
        return [n / s for s in writers[name]["seconds"]]

    def cell(values):
        return f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"

    seq = results["max_seq_length"]
    rows = [("tagging", f"tagging `write_examples`, {results['files']['tagging']}", "sentences",
             seq, "tagging"),
            ("tagging_per_sentence", f"tagging per sentence (the writer's structure before "
             f"issue 57), its first {results['old_sentences']} sentences", "sentences", seq,
             "tagging"),
            ("glue", f"GLUE `write_examples`, SST-2 train ({results['glue_examples']:,}, "
             "bundled)", "examples", seq, "glue"),
            ("squad", f"SQuAD `build_features` + `write_features`, {results['files']['squad']}",
             "questions", SQUAD_SEQ, "squad")]
    lines = [f"{results['machine']}, {results['date']}; load average {results['load_before']:.1f}"
             f" before, {results['load_after']:.1f} after (other work on the machine); "
             f"{results['rounds']} rounds, writers alternating; the 8k novels vocabulary. "
             f"Tagging records of the per-sentence structure and of the writer on the same "
             f"sentences byte-identical: **{results['identical_bytes']}**.", "",
             "| writer | seq | items | per second: median (rounds) | training at that seq, "
             "examples/s | writing / training |", "|---|---|---|---|---|---|"]
    for name, what, unit, length, train in rows:
        if name not in writers:
            continue
        rate = rates(name)
        trained = training.get(train, {}).get("examples_per_s")
        ratio = f"{statistics.median(rate) / trained:,.1f}x" if trained else "-"
        lines.append(f"| {what} | {length} | {writers[name]['items']:,} {unit} | {cell(rate)}"
                     f" | {f'{trained:,.1f}' if trained else '-'} | {ratio} |")
    speedup = [n / o for n, o in zip(rates("tagging"), rates("tagging_per_sentence"))]
    lines += ["", f"Tagging writer / per-sentence structure, per round: "
              f"{', '.join(f'{x:,.0f}x' for x in speedup)} (median "
              f"**{statistics.median(speedup):,.0f}x**)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(app.run(main))
