"""What a SavedModel export costs: the time `export_saved_model` takes, the time
`tf.saved_model.load` takes, the size of saved_model.pb and of the variables, and how much of the
graph is the SentencePiece model, for each model kind of a preset (random weights).

    python -m bench.export_cost --preset albert-base --spm_model_file vocab.model

Each kind is exported `--repeats` times to a temporary directory (the best time is reported,
the first export of a process includes TensorFlow's warm-up). Prints a Markdown table and
writes JSON (`--output`).
"""

import json
import os
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

flags.DEFINE_string("preset", "tiny", "Model preset (albert_tf.config presets), or 'tiny'.")
flags.DEFINE_string("spm_model_file", None, "The SentencePiece model (its size is the vocab).")
flags.DEFINE_list("kinds", ["pretrainer", "classifier"], "Model kinds to export.")
flags.DEFINE_integer("max_seq_length", 128, "The export's max_seq_length.")
flags.DEFINE_integer("repeats", 2, "Exports per kind (the best time is kept).")
flags.DEFINE_string("output", None, "JSON results file.")
FLAGS = flags.FLAGS

TINY = dict(embedding_size=10, hidden_size=24, num_attention_heads=4, intermediate_size=37,
            num_hidden_layers=5, num_hidden_groups=2, inner_group_num=2,
            max_position_embeddings=128, type_vocab_size=3)


def main(argv):
    del argv
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 - the SentencePiece ops of the SavedModels

    from albert_tf.checkpoints import build_model
    from albert_tf.models.classifier import LabelledHeadModel
    from albert_tf.models.kinds import model_class
    from albert_tf.config import AlbertConfig
    from albert_tf.tokenization import Tokenizer
    from albert_tf.export.saved_model import export_saved_model

    if not FLAGS.spm_model_file:
        raise app.UsageError("--spm_model_file is required.")
    vocab = Tokenizer(FLAGS.spm_model_file).vocab_size
    config = (AlbertConfig(vocab_size=vocab, **TINY) if FLAGS.preset == "tiny"
              else AlbertConfig.from_preset(FLAGS.preset).replace(vocab_size=vocab))
    spm_bytes = os.path.getsize(FLAGS.spm_model_file)
    rows = []
    for kind in FLAGS.kinds:
        labelled = issubclass(model_class(kind), LabelledHeadModel)  # 2 labels; RACE: 4 choices
        model = build_model(kind, config, 2 if labelled else None)
        best_export, best_load = float("inf"), float("inf")
        for _ in range(FLAGS.repeats):
            with tempfile.TemporaryDirectory() as tmp:
                start = time.perf_counter()
                path = export_saved_model(model, os.path.join(tmp, kind), FLAGS.spm_model_file,
                                          max_seq_length=FLAGS.max_seq_length)
                best_export = min(best_export, time.perf_counter() - start)
                start = time.perf_counter()
                tf.saved_model.load(path)
                best_load = min(best_load, time.perf_counter() - start)
                graph = os.path.getsize(os.path.join(path, "saved_model.pb"))
                variables = sum(os.path.getsize(os.path.join(path, "variables", n))
                                for n in os.listdir(os.path.join(path, "variables")))
                with open(os.path.join(path, "saved_model.pb"), "rb") as f:
                    copies = f.read().count(open(FLAGS.spm_model_file, "rb").read())
        rows.append({"kind": kind, "export_s": round(best_export, 2),
                     "load_s": round(best_load, 2), "saved_model_pb_mb": round(graph / 1e6, 2),
                     "variables_mb": round(variables / 1e6, 2),
                     "sentencepiece_copies_in_graph": copies,
                     "sentencepiece_mb": round(spm_bytes / 1e6, 2)})
    print(f"| kind ({FLAGS.preset}, vocab {vocab}) | export | load | saved_model.pb | variables "
          "| SentencePiece in graph |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['kind']} | {r['export_s']} s | {r['load_s']} s | "
              f"{r['saved_model_pb_mb']} MB | {r['variables_mb']} MB | "
              f"{r['sentencepiece_copies_in_graph']} x {r['sentencepiece_mb']} MB |")
    if FLAGS.output:
        with open(FLAGS.output, "w") as f:
            json.dump({"preset": FLAGS.preset, "vocab_size": vocab, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    app.run(main)
