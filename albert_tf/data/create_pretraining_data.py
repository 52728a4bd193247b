r"""Create ALBERT pretraining TFRecords: n-gram masked LM + sentence-order prediction.

Flag names follow the official google-research/albert `create_pretraining_data.py`, so an
official command line works with the module name changed:

    python -m albert_tf.data.create_pretraining_data --input_file 'corpus/*.txt' \
        --output_file out/train --num_output_shards 8 --spm_model_file 30k-clean.model \
        --max_seq_length 128 --max_predictions_per_seq 20 --dupe_factor 40 --num_workers 8

Input: one sentence per line, blank line between documents (`python -m
albert_tf.data.prepare_corpus` makes it from raw text). Output: the official feature format
(`albert_tf.features`), one JSON sidecar per file. Same seed and inputs give byte-identical
files for any --num_workers. A killed run restarted with the same flags resumes.
With `--vocab_file` and no `--spm_model_file` the text is tokenized with that WordPiece
vocabulary, as the official script does (the Chinese models' `vocab_chinese.txt`). See
`albert_tf/data/generator.py` and `albert_tf/data/pretraining.py` for the algorithm and its
documented differences from the official one.

On Apache Beam (`pip install .[beam]`), for corpora beyond one machine: the same flags plus
`--runner` and Beam's own pipeline flags, which are passed through; the files are byte-identical
to the local generator's (`albert_tf/data/beam_pipeline.py`):

    python -m albert_tf.data.create_pretraining_data --input_file 'corpus/*.txt' \
        --output_file out/train --num_output_shards 8 --spm_model_file 30k-clean.model \
        --runner FnApiRunner \
        --direct_running_mode multi_processing --direct_num_workers 8

    python -m albert_tf.data.create_pretraining_data --input_file 'gs://BUCKET/corpus/*.txt' \
        --output_file gs://BUCKET/tfrecords/train --num_output_shards 1000 \
        --spm_model_file 30k-clean.model --runner DataflowRunner --project PROJECT \
        --region us-central1 --temp_location gs://BUCKET/tmp \
        --extra_package dist/albert_tf-0.1.0-py3-none-any.whl

docs/data.md ("Data generation on Apache Beam") has the Flink and Spark commands.
"""

from albert_tf.quiet import entry_point  # noqa: E402

entry_point(__name__)  # run as a program: TF's start-up lines filtered (albert_tf.quiet)

import os
import sys

from absl import app, flags  # noqa: E402

from albert_tf.commands import flags as albert_flags  # noqa: E402
from albert_tf.commands.cli import run_command  # noqa: E402
from albert_tf.data.generator import generate, make_job
from albert_tf.data.text_io import InputError

albert_flags.define(
    "input_file", "output_file", "spm_model_file", "vocab_file", "do_lower_case",
    "max_seq_length", "max_predictions_per_seq", "random_seed",
    notes={"input_file": "Text files in the official format (a sentence a line, a blank line "
                         "between documents).",
           "output_file": "TFRecord files, comma-separated; or a prefix with "
                          "--num_output_shards.",
           "vocab_file": "With --spm_model_file, if given, it must list the model's pieces "
                         "(its .vocab file). Alone: a WordPiece vocabulary (one token a line, "
                         "e.g. the Chinese models' vocab_chinese.txt), tokenized as the "
                         "official FullTokenizer does without a SentencePiece model.",
           "random_seed": "Here a seed >= 0 only: it names the run (a killed run resumes "
                          "when rerun with it), so -1 is refused."})
flags.DEFINE_integer("num_output_shards", 1,
                     "Write PREFIX-0000i-of-0000N.tfrecord files (with a single --output_file).")
flags.DEFINE_float("masked_lm_prob", 0.15, "Fraction of tokens to mask.")
flags.DEFINE_integer("ngram", 3, "Maximum n-gram (in whole words) to mask.")
flags.DEFINE_bool("favor_shorter_ngram", True, "P(n) proportional to 1/n (else reversed).")
flags.DEFINE_bool("do_whole_word_mask", True, "Mask whole words (pieces of a word together).")
flags.DEFINE_integer("dupe_factor", 40, "Passes over the corpus, each with different masks.")
flags.DEFINE_float("short_seq_prob", 0.1,
                   "Probability of a shorter target length, drawn once per document and pass "
                   "(as the official script: every chunk of that document then aims at it).")
flags.DEFINE_bool("random_next_sentence", False,
                  "Negatives from random documents (NSP) instead of swapped segments (SOP). The "
                  "official help text says the opposite of what its code does; this follows "
                  "the code.")
flags.DEFINE_bool("sentence_order_pairs_only", False,
                  "Not official; for evaluation sets. Every example is two segments of one "
                  "document, in order or swapped with probability 1/2: chunks take at least two "
                  "sentences and a lone last sentence is dropped, so no segment comes from "
                  "another document. The sentence-order labels are then balanced and cannot "
                  "be told by topic (the official algorithm completes one-sentence chunks from "
                  "a random document, always label 1).")
flags.DEFINE_string("input_file_mode", "r",
                    "Official flag: the mode the official script opens inputs with "
                    "(tf.gfile.GFile). Only 'r' (the default): inputs are read as UTF-8 text.")
flags.DEFINE_bool("do_permutation", False,
                  "Official flag of an unfinished experiment (extra permuted-token targets, "
                  "twice max_predictions_per_seq values per example, which no ALBERT training "
                  "reads). Only false (the default) is accepted.")
flags.DEFINE_integer("num_workers", 1, "Worker processes.")
flags.DEFINE_integer("tokens_per_unit", 1_000_000,
                     "Tokens per work unit (part of what determines the output; num_workers "
                     "is not).")
flags.DEFINE_bool("progress", True, "Show a progress line.")
flags.DEFINE_string("runner", None,
                    "Run on Apache Beam with this runner (FnApiRunner, DirectRunner, dask, "
                    "DataflowRunner, FlinkRunner, SparkRunner, PortableRunner); flags this "
                    "command does not define are passed to Beam. Needs `pip install .[beam]`.")
flags.DEFINE_string("dask_address", None,
                    "With --runner dask: the Dask scheduler to run on (tcp://HOST:PORT); its "
                    "workers need this package and read the inputs and write the outputs at "
                    "the paths given (a shared file system or gs://, s3://).")
flags.DEFINE_integer("dask_workers", None,
                     "With --runner dask and no --dask_address: start a local Dask cluster of "
                     "this many worker processes for the run (default: one per core) and stop "
                     "it after.")
FLAGS = flags.FLAGS


def _check_vocab_file(vocab_file, spm_model_file):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=spm_model_file)
    with open(vocab_file, encoding="utf-8") as f:
        pieces = [line.split("\t")[0] for line in f if line.strip()]
    expected = [sp.IdToPiece(i) for i in range(sp.GetPieceSize())]
    if pieces != expected:
        raise ValueError(f"--vocab_file {vocab_file} does not list the pieces of "
                         f"--spm_model_file {spm_model_file}; pass the matching .vocab file or "
                         "omit --vocab_file.")


def _unsupported_official_value():
    """Why an official flag has a value this generator does not run (None when none has)."""
    if FLAGS.input_file_mode != "r":
        return (
            f"--input_file_mode={FLAGS.input_file_mode!r}: only 'r' (the default) is supported: "
            "inputs are read as UTF-8 text, a line that is not UTF-8 being an error that names "
            "it, as the official script's 'r' fails on it. The official script passes the mode "
            "to tf.gfile.GFile: with 'rb' its SentencePiece path fails on the first line "
            "(TypeError in preprocess_text, bytes where text is expected) and its WordPiece path "
            "drops the bytes that are not UTF-8; to do that, clean the file first (e.g. iconv -c "
            "-f UTF-8 -t UTF-8).")
    if FLAGS.do_permutation:
        return (
            "--do_permutation is not supported. In the official script it is an unfinished "
            "experiment: after masking it picks up to as many positions again (n-grams not "
            "masked), shuffles their tokens among them and appends them as masked-LM targets, "
            "so masked_lm_positions, masked_lm_ids and masked_lm_weights hold twice "
            "max_predictions_per_seq values, which neither the official run_pretraining.py "
            "nor albert_tf.run_pretraining reads at the same --max_predictions_per_seq, and no "
            "ALBERT recipe uses it. Leave it false (the default).")
    return None


def main(argv):
    pipeline_args = argv[1:]
    if pipeline_args and not FLAGS.runner:
        raise app.UsageError(f"Unknown arguments {pipeline_args}; flags other than this "
                             "command's are accepted only with --runner (Beam's flags). A value "
                             "goes with its flag (--flag=value); quote a glob (--input_file "
                             "'corpus/*.txt'), which the shell otherwise expands into several "
                             "arguments, or list files comma-separated.")
    dask = FLAGS.runner in ("dask", "DaskRunner")
    if (FLAGS.dask_address or FLAGS.dask_workers is not None) and not dask:
        raise app.UsageError("--dask_address and --dask_workers go with --runner dask.")
    if FLAGS.dask_address and FLAGS.dask_workers is not None:
        raise app.UsageError("--dask_address runs on an existing cluster, whose workers are its "
                             "own; --dask_workers starts a local one: give one of them.")
    if FLAGS.runner and FLAGS.num_workers != 1:
        raise app.UsageError("--num_workers is the local generator's; on Beam the runner's own "
                             "flags set the workers (e.g. --direct_num_workers, "
                             "--max_num_workers).")
    for name in ("input_file", "output_file"):
        if not getattr(FLAGS, name):
            raise app.UsageError(f"--{name} is required.")
    if not (FLAGS.spm_model_file or FLAGS.vocab_file):
        raise app.UsageError("--spm_model_file (a SentencePiece model) or --vocab_file alone (a "
                             "WordPiece vocabulary) is required.")
    unsupported = _unsupported_official_value()
    if unsupported:
        print(f"error: {unsupported}", file=sys.stderr)
        return 1
    if FLAGS.random_seed < 0:
        raise app.UsageError(f"--random_seed={FLAGS.random_seed}: data generation needs a seed "
                             ">= 0 (it names the run, and a killed run resumes when rerun with "
                             "it); give any number, e.g. the default 12345.")

    try:
        if FLAGS.vocab_file and FLAGS.spm_model_file:
            _check_vocab_file(FLAGS.vocab_file, FLAGS.spm_model_file)
        job = make_job(
            FLAGS.input_file, FLAGS.output_file, FLAGS.spm_model_file,
            num_output_shards=FLAGS.num_output_shards, do_lower_case=FLAGS.do_lower_case,
            max_seq_length=FLAGS.max_seq_length,
            max_predictions_per_seq=FLAGS.max_predictions_per_seq,
            masked_lm_prob=FLAGS.masked_lm_prob, short_seq_prob=FLAGS.short_seq_prob,
            ngram=FLAGS.ngram, favor_shorter_ngram=FLAGS.favor_shorter_ngram,
            do_whole_word_mask=FLAGS.do_whole_word_mask,
            random_next_sentence=FLAGS.random_next_sentence,
            sentence_order_pairs_only=FLAGS.sentence_order_pairs_only, dupe_factor=FLAGS.dupe_factor,
            random_seed=FLAGS.random_seed, tokens_per_unit=FLAGS.tokens_per_unit,
            vocab_file=FLAGS.vocab_file)
        if FLAGS.runner:
            from albert_tf.data.beam_pipeline import generate_with_beam

            if dask:
                from albert_tf.data.dask_runner import dask_cluster

                workers = FLAGS.dask_workers or os.cpu_count()
                with dask_cluster(FLAGS.dask_address, workers) as address:
                    summary = generate_with_beam(
                        job, ["--runner=dask", f"--dask_client_address={address}"]
                        + pipeline_args)
            else:
                summary = generate_with_beam(job, [f"--runner={FLAGS.runner}"] + pipeline_args)
        else:
            summary = generate(job, num_workers=FLAGS.num_workers, progress=FLAGS.progress)
    except (InputError, ValueError, FileNotFoundError, ImportError, ConnectionError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if summary["already_complete"]:
        print(f"already complete: {len(summary['outputs'])} file(s) from an identical run")
    else:
        c = summary["counts"]
        print(f"wrote {summary['total_examples']:,} examples to {len(summary['outputs'])} "
              f"file(s) in {summary['seconds']} s; SOP label 1: "
              f"{c['sentence_order_label_1'] / c['examples']:.1%}; masked positions: "
              f"{c['masked_positions']:,}")
        if "counters" in summary:
            print("Beam counters: " + ", ".join(f"{k} {v:,}"
                                                for k, v in summary["counters"].items()))
    return 0


def cli():
    """The command (`python -m` and the console script in pyproject.toml)."""
    run_command(main, flags_parser=lambda argv: FLAGS(argv, known_only=True))


if __name__ == "__main__":
    cli()
