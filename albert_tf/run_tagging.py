r"""Token classification (named entities, part of speech) through the one training loop:

    python -m albert_tf.run_tagging --train_file wnut17/train.conll \
        --dev_file wnut17/dev.conll --test_file wnut17/test.conll \
        --albert_config_file albert_base/albert_config.json \
        --spm_model_file albert_base/30k-clean.model \
        --init_checkpoint albert_base/model.ckpt-best --output_dir runs/wnut17 \
        --do_train --do_eval --do_predict --max_seq_length 128 --train_batch_size 32 \
        --learning_rate 5e-5 --train_step 2000 --warmup_step 200 --export_dir exports/wnut17

Files are CoNLL (word first, tag last; tab- or space-separated) or CoNLL-U (UPOS), detected
from the file (`albert_tf.tasks.conll`); a `--test_file` may hold words only (or be CoNLL-U
with UPOS `_`: unannotated), and `-DOCSTART-` document separators are skipped (no sentence).
The tag set is the training file's (kept as OUTPUT_DIR/labels.json, so a later --do_eval or
--do_predict without --do_train uses the same); a dev or test tag outside it is an error
naming the file and line. Each word is tagged by its first SentencePiece piece; long sentences are
split into windows (`albert_tf.tasks.tagging`).

Writes `eval_results.json` (token accuracy; for BIO/IOB2 tags entity precision, recall and F1
as seqeval's default mode computes them, micro average; the best evaluated checkpoint's, the
last evaluation as `last`), `predictions.conll` for --do_predict
(the test file's lines with the predicted tag appended as the last column; and
`test_results.json` when the test file has tags), and with --export_dir a SavedModel whose
`serving_default` takes a sentence and returns one tag per whitespace-separated word
(`albert_tf.export.serving_tagging`). Rerun the same command to resume.
"""

from albert_tf.quiet import entry_point  # noqa: E402

entry_point(__name__)  # run as a program: TF's start-up lines filtered (albert_tf.quiet)

import os  # noqa: E402

from albert_tf.commands import flags as albert_flags  # noqa: E402
from albert_tf.commands.runner import (PRETRAINED, command,  # noqa: E402
                                       model_and_tokenizer, run_labels, run_task,
                                       training_config)
from albert_tf.export.run_exporter import task_exporter  # noqa: E402
from albert_tf.paths import write_json  # noqa: E402
from albert_tf.tasks import conll  # noqa: E402
from albert_tf.tasks.tagging import (TaggingPreprocessor, TaggingTask,  # noqa: E402
                                     score_sentences, write_examples)


def define_flags():
    """Command-line flags (defined only when run as a program)."""
    albert_flags.define(albert_flags.MODEL, albert_flags.VOCAB, albert_flags.RUN,
                        albert_flags.EVAL, albert_flags.FINETUNING, albert_flags.CLUSTER,
                        albert_flags.PERFORMANCE, "train_step", "warmup_step", "train_file",
                        "dev_file", "test_file",
                        max_seq_length=128,
                        notes={"train_file": "run_tagging: a CoNLL or CoNLL-U file (its tags "
                                             "are the model's tag set).",
                               "dev_file": "run_tagging: CoNLL or CoNLL-U.",
                               "test_file": "run_tagging: CoNLL or CoNLL-U; its tags, if it "
                                            "has any, are scored."})
    albert_flags.define("classifier_dropout_prob")


def tag_set(exp, output_dir: str, train_sentences) -> list:
    """The tag set: the training file's (written to OUTPUT_DIR/labels.json), else the one a
    training run left there (`run_labels`)."""
    return run_labels(output_dir, None if train_sentences is None
                      else conll.label_list(train_sentences), exp.train_file, kind="tag set")


def read_splits(exp) -> dict:
    """{split: (path, [Sentence])} of the files the actions need."""
    wanted = {"train": ("train_file", "do_train"), "dev": ("dev_file", "do_eval"),
              "test": ("test_file", "do_predict")}
    out = {}
    for split, (flag, action) in wanted.items():
        path = getattr(exp, flag)
        if not getattr(exp, action):
            continue
        if not path:
            raise ValueError(f"--{action} needs --{flag}.")
        read = conll.read_tagged(path, require_tags=split != "test")
        conll.check_sentences(read.sentences, path)
        if read.document_starts:
            print(f"{split}: skipped {read.document_starts:,} -DOCSTART- document separator "
                  f"line(s) of {path} (not sentences)", flush=True)
        out[split] = (path, read.sentences)
    return out


def write_features(exp, splits, preprocessor, cache_dir) -> dict:
    """{split: sidecar with `files` and `windows`} of the splits' TFRecords."""
    written = {}
    for split, (path, sentences) in splits.items():
        if split != "train":
            conll.check_known_tags(sentences, preprocessor.labels, path)
        batch = {"train": 1, "dev": exp.eval_batch_size, "test": exp.predict_batch_size}
        meta = write_examples(sentences, preprocessor,
                              os.path.join(cache_dir, f"{split}.tfrecord"), path,
                              shuffle_seed=(exp.seed() or 0) if split == "train"
                              else None, pad_to_multiple=batch[split])
        written[split] = meta
        print(f"{split}: {meta['sentences']:,} sentences, {meta['real_examples']:,} windows "
              f"({meta['split_sentences']} sentences split, {meta['padding_examples']} "
              f"padding) -> {meta['files'][0]}", flush=True)
    return written


def predict(exp, task, model, preprocessor, splits, written) -> None:
    """predictions.conll (and test_results.json for a tagged test file)."""
    path, sentences = splits["test"]
    tags = task.predict_tags(model, written["test"]["files"][0], exp.predict_batch_size,
                             preprocessor, written["test"]["windows"])
    out = os.path.join(exp.output_dir, "predictions.conll")
    conll.write_predictions(out, sentences, tags)
    print(f"tagged {len(sentences):,} sentences of {path}: {out}")
    if all(s.tags is not None for s in sentences):
        scores = score_sentences(task.labels, [s.tags for s in sentences], tags)
        write_json(os.path.join(exp.output_dir, "test_results.json"),
                   dict(scores, sentences=len(sentences), file=path))
        print("test: " + ", ".join(f"{k} {v:.4f}" for k, v in scores.items()))


def run(exp):
    config, tokenizer = model_and_tokenizer(exp)
    splits = read_splits(exp)
    labels = tag_set(exp, exp.output_dir, splits["train"][1] if "train" in splits else None)
    preprocessor = TaggingPreprocessor(tokenizer, labels, exp.max_seq_length)
    written = write_features(exp, splits, preprocessor, exp.output_dir)
    task = TaggingTask(config, labels, exp.max_seq_length,
                       dropout_rate=exp.classifier_dropout_prob)
    cfg = None
    if exp.do_train or exp.do_eval:
        any_file = next(iter(written.values()))["files"][0]
        cfg = training_config(exp,
            config, input_file=written["train"]["files"][0] if "train" in written else any_file,
            eval_input_file=written["dev"]["files"][0] if "dev" in written else None,
            max_eval_steps=10 ** 9)
    exporter = task_exporter(exp, "run_tagging", labels=labels)
    model, _ = run_task(exp, task, cfg, exporter, predict=exp.do_predict)
    if exp.do_predict and model is not None:
        predict(exp, task, model, preprocessor, splits, written)


def cli():
    """The command (`python -m albert_tf.run_tagging`)."""
    command(run, define_flags, required=(f"albert_config_file|{PRETRAINED}",
                                         f"spm_model_file|vocab_file|{PRETRAINED}",
                                         "output_dir"),
            check=lambda exp: albert_flags.require_an_action(export=True))


if __name__ == "__main__":
    cli()
