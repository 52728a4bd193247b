r"""Train an ALBERT SentencePiece vocabulary (unigram) with the official special ids.

    python -m albert_tf.data.train_vocab --input_file 'corpus/*.txt' \
        --model_prefix vocab/30k-clean --vocab_size 30000 --do_lower_case

Writes `<prefix>.model`, `<prefix>.vocab` and `<prefix>.json` (inputs with checksums, settings,
sentence counts). Text goes through the official ALBERT preprocessing first (the same
`albert_tf.tokenization.preprocess_text` used at encoding time), so training and encoding see the
same normalized text. Ids: pad 0, unk 1, control symbols [CLS] 2, [SEP] 3, [MASK] 4; no BOS/EOS.
Large corpora are sampled: `--input_sentence_size` sentences drawn uniformly (reservoir) with
`--random_seed`. The sentences reach SentencePiece in a seeded random order, never in the file's:
its seed-piece search (the "Extracting frequent sub strings" step) walks every repeated context
to its end, across line ends, so text repeated as blocks of lines (licence texts copied into
many files) cost it time quadratic in the block's length; in a shuffled order a repeat ends with
its line. The command prints what it is doing (reading, training, still training every 30 s) on
stderr; `--sentencepiece_log` passes SentencePiece's own log through as well. As the official
`spm_train` command, the pieces `( ) " - . – £ €` are user-defined symbols (always pieces of
their own); `--nouser_defined_symbols` leaves them out.
"""

from __future__ import annotations

from albert_tf.quiet import entry_point  # noqa: E402

entry_point(__name__)  # run as a program: TF's start-up lines filtered (albert_tf.quiet)

import datetime
import json
import os
import random
import re
import shutil
import sys
import tempfile
import threading
import time

import sentencepiece as spm
from absl import app, flags
from albert_tf.commands.cli import run_command

from albert_tf.commands import flags as albert_flags

from albert_tf.tokenization import (CLS_PIECE, DIGIT_COMMA_FORMS, MASK_PIECE, PAD_ID, PAD_PIECE,
                                    SEP_PIECE, UNK_ID, UNK_PIECE, check_special_ids, file_sha256,
                                    preprocess_text, with_digit_comma_form)
from albert_tf.ownership import OutputLock
from albert_tf.data.text_io import expand_input_patterns, read_text_lines


# The official `spm_train --user_defined_symbols="(,),\",-,.,–,£,€"` (google-research/albert README).
OFFICIAL_USER_DEFINED_SYMBOLS = ("(", ")", '"', "-", ".", "\u2013", "\u00a3", "\u20ac")


class VocabularyError(ValueError):
    """Bad input or settings for vocabulary training; the message names the file or flag."""


# Settings a description written before they existed leaves out, as they were then.
SETTINGS_BEFORE = {"digit_comma": "official"}


def _train(sentences, model_prefix: str, counts: dict, source: str = "the input",
           minloglevel: int = 2, **settings) -> None:
    """SentencePiece's unigram trainer with the official special pieces and ids; its errors as
    `VocabularyError`s that name the flag to change."""
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=sentences, model_prefix=model_prefix, model_type="unigram",
            pad_id=PAD_ID, unk_id=UNK_ID, bos_id=-1, eos_id=-1, pad_piece=PAD_PIECE,
            unk_piece=UNK_PIECE, control_symbols=[CLS_PIECE, SEP_PIECE, MASK_PIECE],
            shuffle_input_sentence=True, minloglevel=minloglevel, **settings)
    except RuntimeError as e:
        if counts["lines"] == 0:
            raise VocabularyError(f"No text in {source}: every line is empty after "
                                  "preprocessing.") from None
        m = re.search(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)",
                      str(e))
        if m:
            raise VocabularyError(
                f"--vocab_size={m.group(1)} is too large for this corpus ({counts['lines']} "
                f"lines): at most {m.group(2)} pieces can be learned. Lower --vocab_size or "
                "add text.") from None
        raise VocabularyError(f"SentencePiece training failed: {e}") from None


def train_vocab(input_patterns, model_prefix, vocab_size=30000, do_lower_case=True,
                input_sentence_size=1_000_000, character_coverage=0.99995, random_seed=12345,
                max_sentence_length=16384, num_threads=None,
                user_defined_symbols=OFFICIAL_USER_DEFINED_SYMBOLS, overwrite=False,
                progress=None, sentencepiece_log=False, heartbeat_seconds=30.0,
                digit_comma="official") -> dict:
    """Trains the model and returns the description written to `<model_prefix>.json`.

    The prefix is locked while it is written (`albert_tf.ownership`). A vocabulary already at
    `model_prefix` from the same inputs and settings is kept (returned with
    `already_complete`); one from other inputs or settings is an error unless `overwrite`.

    Args:
        input_patterns: file globs (or a comma-separated string of them).
        model_prefix: output path prefix.
        vocab_size: number of pieces, special ones included.
        do_lower_case: lowercase during preprocessing (released v2 vocabularies: True).
        input_sentence_size: sample this many sentences when the corpus has more (0: use all).
        character_coverage: fraction of characters the vocabulary must cover.
        random_seed: seed of SentencePiece's sampling.
        max_sentence_length: longer lines (bytes, preprocessed) are left out of training;
            their number and the first (file, line) are reported through `progress`.
        num_threads: trainer threads (default: all cores).
        user_defined_symbols: pieces always kept whole (default: the official ones; () for none).
        overwrite: replace a vocabulary of other inputs or settings at `model_prefix`.
        progress: called with a line of text at each phase (reading, sampling, training) and
            every `heartbeat_seconds` while SentencePiece trains; None: silent.
        sentencepiece_log: let SentencePiece print its own log (its phases) to stderr.
        digit_comma: the re-split of a piece ending in digit + comma the model records
            (`albert_tf.tokenization.DIGIT_COMMA_FORMS`): "official" (google-research/albert)
            or "huggingface" (XLNet's and Hugging Face's `AlbertTokenizer`).
    """
    files = expand_input_patterns(input_patterns)
    if not os.path.basename(model_prefix) or os.path.isdir(model_prefix):
        raise VocabularyError(f"--model_prefix {model_prefix!r} names a directory; end it in a "
                              "file name prefix (e.g. vocab/30k-clean writes "
                              "vocab/30k-clean.model).")
    if vocab_size <= 5:
        raise VocabularyError(f"--vocab_size must exceed the 5 special pieces; got {vocab_size}")
    if digit_comma not in DIGIT_COMMA_FORMS:
        raise VocabularyError(f"--digit_comma {digit_comma!r}: one of "
                              f"{', '.join(DIGIT_COMMA_FORMS)}.")
    settings = {"vocab_size": vocab_size, "do_lower_case": do_lower_case,
                "digit_comma": digit_comma,
                "input_sentence_size": input_sentence_size,
                "character_coverage": character_coverage, "random_seed": random_seed,
                "user_defined_symbols": list(user_defined_symbols)}
    with OutputLock(model_prefix, "--model_prefix", is_dir=False):
        existing = _existing_vocabulary(model_prefix, files, settings, overwrite,
                                        max_sentence_length)
        if existing is not None:
            return dict(existing, already_complete=True)
        return _train_into(files, model_prefix, settings, max_sentence_length, num_threads,
                           progress or (lambda line: None), sentencepiece_log,
                           heartbeat_seconds)


def _existing_vocabulary(model_prefix, files, settings, overwrite,
                         max_sentence_length=16384) -> dict | None:
    """The description of a vocabulary already at `model_prefix` made from the same inputs and
    settings (nothing to do), None when there is none or `overwrite`; else refuses: datasets,
    checkpoints and exports name a `.model` by path and checksum, so one is never replaced
    silently."""
    present = [model_prefix + ext for ext in (".model", ".vocab", ".json")
               if os.path.exists(model_prefix + ext)]
    if not present or overwrite:
        return None
    try:
        with open(model_prefix + ".json", encoding="utf-8") as f:
            description = json.load(f)
        if not isinstance(description, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError):
        changed = [f"its description {model_prefix}.json is missing or unreadable"]
    else:
        try:
            changed = _changes(description, model_prefix, files,
                               dict(settings, max_sentence_length=max_sentence_length))
        except FileNotFoundError as e:  # the .model beside it, removed
            changed = [f"{e.filename} is missing"]
        except (AttributeError, TypeError):  # a description of another shape
            changed = [f"its description {model_prefix}.json is not one this version wrote"]
    if not changed:
        return description
    raise VocabularyError(
        f"{present[0]} already exists and was not made from these inputs and settings "
        f"({'; '.join(changed)}); datasets, checkpoints and exports name a vocabulary by path "
        "and checksum. Choose another --model_prefix, or pass --overwrite to replace it.")


def _changes(description: dict, model_prefix: str, files, settings: dict) -> list[str]:
    """What differs between the vocabulary `description` records and this command: each
    setting with both values, the input files, a .model changed since it was written."""
    recorded = dict(SETTINGS_BEFORE, max_sentence_length=16384)
    recorded.update((k, v) for k, v in description.items() if k in settings)
    changed = [f"--{k} {recorded.get(k)!r} then, {v!r} now" for k, v in settings.items()
               if recorded.get(k) != v]
    inputs = [i.get("path", "?") for i in description.get("input_files", [])]
    if [i.get("sha256") for i in description.get("input_files", [])] \
            != [file_sha256(p) for p in files]:
        same_paths = [os.path.abspath(p) for p in inputs] == [os.path.abspath(p) for p in files]
        changed.append("the input files' contents changed" if same_paths else
                       f"the input files: {len(inputs)} then ({', '.join(inputs[:3])}"
                       f"{', ...' if len(inputs) > 3 else ''}), {len(files)} now")
    if description.get("model_sha256") != file_sha256(model_prefix + ".model"):
        changed.append(f"{model_prefix}.model changed since it was written")
    return changed


def _sample(files, do_lower_case, input_sentence_size, random_seed, max_sentence_length,
            counts, progress) -> list:
    """The preprocessed non-empty lines of `files`, at most `input_sentence_size` of them (0: all)
    drawn uniformly (reservoir, seeded), in a seeded random order. SentencePiece gets them in
    this order, not the files': its seed-piece search walks each repeated context to its end
    across line ends (SentencePiece 0.2.x), so blocks of lines repeated in the corpus (the same
    licence in many files) made it quadratic in the block's length (a 2 MB corpus of
    /usr/share/doc text: over 10 minutes; shuffled: 40 s)."""
    rng = random.Random(random_seed)
    sample, too_long = [], None
    for path in files:
        progress(f"reading {path}")
        for number, line in enumerate(read_text_lines(path), start=1):
            text = preprocess_text(line, do_lower_case)
            if not text:
                continue
            counts["lines"] += 1
            counts["characters"] += len(text)
            if len(text.encode("utf-8")) > max_sentence_length:
                counts["too_long"] += 1
                too_long = too_long or f"{path}, line {number}"
            if not input_sentence_size or len(sample) < input_sentence_size:
                sample.append(text)
            else:
                k = rng.randrange(counts["lines"])
                if k < input_sentence_size:
                    sample[k] = text
            if counts["lines"] % 1_000_000 == 0:
                progress(f"read {counts['lines']:,} lines")
    if too_long:
        progress(f"{counts['too_long']:,} line(s) longer than --max_sentence_length="
                 f"{max_sentence_length} bytes are left out by SentencePiece (the first: "
                 f"{too_long}).")
    rng.shuffle(sample)
    return sample


class _Heartbeat:
    """Calls `progress` every `seconds` with the time elapsed until the block ends (SentencePiece
    releases the GIL while it trains)."""

    def __init__(self, progress, what, seconds):
        self.progress, self.what, self.seconds = progress, what, seconds
        self.done = threading.Event()

    def _run(self):
        started = time.time()
        while not self.done.wait(self.seconds):
            self.progress(f"{self.what}: still training ({time.time() - started:.0f} s)")

    def __enter__(self):
        if self.seconds:
            threading.Thread(target=self._run, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.done.set()


def _train_into(files, model_prefix, settings, max_sentence_length, num_threads, progress,
                sentencepiece_log=False, heartbeat_seconds=30.0) -> dict:
    """Trains into a hidden temporary directory beside `model_prefix` and renames the files
    into place (the .json last). Temporary directories a killed run left for this prefix are
    removed first (this process holds the prefix's lock)."""
    vocab_size, do_lower_case = settings["vocab_size"], settings["do_lower_case"]
    input_sentence_size = settings["input_sentence_size"]
    character_coverage, random_seed = settings["character_coverage"], settings["random_seed"]
    user_defined_symbols = settings["user_defined_symbols"]
    counts = {"lines": 0, "characters": 0, "too_long": 0}

    out_dir = os.path.dirname(os.path.abspath(model_prefix))
    os.makedirs(out_dir, exist_ok=True)
    tmp_name = f".train_vocab-{os.path.basename(model_prefix)}-"
    stale = re.compile(re.escape(tmp_name) + r"[a-z0-9_]{8}")  # mkdtemp's suffix
    for name in os.listdir(out_dir):
        if stale.fullmatch(name):
            shutil.rmtree(os.path.join(out_dir, name), ignore_errors=True)
    tmp = tempfile.mkdtemp(prefix=tmp_name, dir=out_dir)
    started = time.time()
    try:
        spm.set_random_generator_seed(random_seed)
        tmp_prefix = os.path.join(tmp, os.path.basename(model_prefix))
        sample = _sample(files, do_lower_case, input_sentence_size, random_seed,
                         max_sentence_length, counts, progress)
        what = f"SentencePiece unigram, {vocab_size:,} pieces"
        progress(f"{what}: training on {len(sample):,} of {counts['lines']:,} lines "
                 "(suffix array, seed pieces, then EM rounds)")
        with _Heartbeat(progress, what, heartbeat_seconds):
            _train(iter(sample), tmp_prefix, counts, ", ".join(files),
                   minloglevel=0 if sentencepiece_log else 2, vocab_size=vocab_size,
                   user_defined_symbols=list(user_defined_symbols),
                   input_sentence_size=0, character_coverage=character_coverage,
                   max_sentence_length=max_sentence_length,
                   num_threads=num_threads or os.cpu_count())
        del sample
        if counts["lines"] == 0:
            raise VocabularyError(f"No text in {files}: every line is empty after preprocessing.")
        if settings["digit_comma"] != "official":
            with open(tmp_prefix + ".model", "rb") as f:
                proto = with_digit_comma_form(f.read(), settings["digit_comma"])
            with open(tmp_prefix + ".model", "wb") as f:
                f.write(proto)
        processor = spm.SentencePieceProcessor(model_file=tmp_prefix + ".model")
        check_special_ids(processor, tmp_prefix + ".model")
        description = {
            "model_file": os.path.abspath(model_prefix + ".model"),
            "model_sha256": file_sha256(tmp_prefix + ".model"),
            "vocab_size": processor.GetPieceSize(),
            "model_type": "unigram",
            "do_lower_case": do_lower_case,
            "digit_comma": settings["digit_comma"],
            "special_ids": {PAD_PIECE: PAD_ID, UNK_PIECE: UNK_ID, CLS_PIECE: 2, SEP_PIECE: 3,
                            MASK_PIECE: 4},
            "input_files": [{"path": os.path.abspath(p), "sha256": file_sha256(p)} for p in files],
            "lines_read": counts["lines"],
            "characters_read": counts["characters"],
            "max_sentence_length": max_sentence_length,
            "lines_too_long": counts["too_long"],
            "input_sentence_size": input_sentence_size,
            "character_coverage": character_coverage,
            "random_seed": random_seed,
            "user_defined_symbols": list(user_defined_symbols),
            "sentencepiece_version": spm.__version__,
            "seconds": round(time.time() - started, 2),
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        }
        with open(tmp_prefix + ".json", "w", encoding="utf-8") as f:
            json.dump(description, f, indent=2)
        for ext in (".model", ".vocab", ".json"):  # the .json last: it marks a finished run
            os.replace(tmp_prefix + ext, model_prefix + ext)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return description


def define_flags():
    """Command-line flags (defined only when run as a program)."""
    albert_flags.define("input_file", "do_lower_case", "random_seed", "overwrite",
                        kinds={"input_file": "list"},
                        notes={"random_seed": "Here: the sentence sampling's.",
                               "overwrite": "Here: a vocabulary at --model_prefix made from "
                                            "other inputs or settings (one made from the same "
                                            "is kept)."})
    flags.DEFINE_string("model_prefix", None, "Output prefix: writes PREFIX.model/.vocab/.json.")
    flags.DEFINE_integer("vocab_size", 30000, "Number of pieces, the 5 special ones included.")
    flags.DEFINE_integer("input_sentence_size", 1_000_000,
                         "Sample at most this many sentences for training (0: all).")
    flags.DEFINE_integer("max_sentence_length", 16384,
                         "Lines longer than this (bytes, after preprocessing) are left out of "
                         "training; their number and the first are reported.")
    flags.DEFINE_float("character_coverage", 0.99995, "Character coverage of the vocabulary.")
    flags.DEFINE_integer("num_threads", None, "Trainer threads (default: all cores).")
    flags.DEFINE_bool("sentencepiece_log", False,
                      "Pass SentencePiece's own log (its phases and EM rounds) through to stderr.")
    albert_flags.define_digit_comma("official", "")
    flags.DEFINE_bool("user_defined_symbols", True,
                      "Keep the official user-defined symbols ( ) \" - . – £ € as pieces of "
                      "their own, as the official spm_train command does.")


def main(argv):
    del argv
    FLAGS = flags.FLAGS
    if not FLAGS.input_file or not FLAGS.model_prefix:
        raise app.UsageError("--input_file and --model_prefix are required.")
    try:
        description = train_vocab(
            FLAGS.input_file, FLAGS.model_prefix, vocab_size=FLAGS.vocab_size,
            do_lower_case=FLAGS.do_lower_case, input_sentence_size=FLAGS.input_sentence_size,
            character_coverage=FLAGS.character_coverage, random_seed=FLAGS.random_seed,
            num_threads=FLAGS.num_threads, max_sentence_length=FLAGS.max_sentence_length,
            user_defined_symbols=OFFICIAL_USER_DEFINED_SYMBOLS if FLAGS.user_defined_symbols
            else (), overwrite=FLAGS.overwrite, sentencepiece_log=FLAGS.sentencepiece_log,
            digit_comma=FLAGS.digit_comma,
            progress=lambda line: print(f"train_vocab: {line}", file=sys.stderr, flush=True))
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if description.get("already_complete"):
        print(f"{FLAGS.model_prefix}.model exists from the same inputs and settings "
              f"({description['vocab_size']} pieces): kept")
        return 0
    print(f"wrote {FLAGS.model_prefix}.model ({description['vocab_size']} pieces from "
          f"{description['lines_read']} lines in {description['seconds']} s)")
    return 0


def cli():
    """The command (`python -m` and the console script in pyproject.toml)."""
    run_command(main, define_flags)


if __name__ == "__main__":
    cli()
