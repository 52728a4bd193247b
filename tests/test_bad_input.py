"""Mistaken and hostile input, found by a production engineer's review (issue 40): each gets the
right result or one clear error, and nothing already written is lost. Flags, arguments,
overwrites, resumes with other settings, non-finite updates, hostile sidecars, checkpoints
named by the help and export refusals."""

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import types

import numpy as np
import pytest
import tensorflow as tf
from absl import flags

from albert_tf import AlbertClassifier, AlbertConfig, AlbertPretrainer
from albert_tf.checkpoints import CheckpointMismatchError
from albert_tf.training.controller import non_finite_advice
from albert_tf.commands.flags import NUMBER_RULES, check_numbers
from albert_tf.ownership import OutputPathError
from albert_tf.records import SidecarError, read_sidecar, write_file
from albert_tf.tokenization import file_sha256
from albert_tf.training.train_lib import NonFiniteLossError, OutputDirMismatchError, PretrainingRun
from conftest import ROOT, export_config, pretraining_config, randomize, tiny_config

TINY = dict(vocab_size=8000, embedding_size=8, hidden_size=16, num_hidden_layers=2,
            num_hidden_groups=1, num_attention_heads=2, intermediate_size=20,
            max_position_embeddings=64)


def _command(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=ROOT), **kwargs)


# The loop settings of this file's pretraining runs (a test changes some).
RUN = dict(albert_config=AlbertConfig(**TINY), train_batch_size=4, num_train_steps=2,
           num_warmup_steps=0, learning_rate=1e-3, save_checkpoints_steps=2,
           iterations_per_loop=1, seed=3, shuffle_window=16)


def _config(tmp_path, files, **changes):
    return pretraining_config(files, tmp_path / "run", **dict(RUN, **changes))


# ---------------------------------------------------------------------------------------------
# Numeric flags: refused at parse time, before anything is read or written.
BAD_NUMBERS = [
    ("learning_rate", "nan", "a finite number > 0"), ("learning_rate", "inf", "> 0"),
    ("learning_rate", "-1e-3", "> 0"), ("learning_rate", "0", "> 0"),
    ("num_warmup_steps", "-5", ">= 0"), ("poly_power", "-1", ">= 0"),
    ("poly_power", "nan", ">= 0"), ("warmup_proportion", "1.5", "between 0 and 1"),
    ("dropout_prob", "1", "below 1"), ("masked_lm_prob", "0", "above 0"),
    ("masked_lm_prob", "nan", "above 0"), ("short_seq_prob", "-0.1", "between 0 and 1"),
    ("train_batch_size", "0", "> 0"), ("random_seed", "-2", r"-1 \(a fresh seed\)"),
    ("null_score_diff_threshold", "nan", "a finite number"),
    ("num_train_epochs", "inf", "> 0"), ("dupe_factor", "0", "> 0"),
    ("max_seq_length", "2", r"at least 3 \(\[CLS\], a piece, \[SEP\]\)"),
    ("export_max_seq_length", "0", "at least 3"),
]


@pytest.mark.parametrize("name,value,expected", BAD_NUMBERS,
                         ids=[f"{n}={v}" for n, v, _ in BAD_NUMBERS])
def test_numeric_flags_out_of_range_are_refused_at_parse_time(name, value, expected):
    values = flags.FlagValues()
    integer = name in ("num_warmup_steps", "train_batch_size", "random_seed", "dupe_factor",
                       "max_seq_length", "export_max_seq_length")
    (flags.DEFINE_integer if integer else flags.DEFINE_float)(name, None, "", flag_values=values)
    check_numbers(values)
    with pytest.raises(flags.IllegalFlagValueError, match=f"--{name} must be .*{expected}"):
        values(["prog", f"--{name}={value}"])
    fresh = flags.FlagValues()
    (flags.DEFINE_integer if integer else flags.DEFINE_float)(name, None, "", flag_values=fresh)
    check_numbers(fresh)
    ordinary = "8" if "seq_length" in name else "1" if integer else "0.5"
    fresh(["prog", f"--{name}={ordinary}"])  # an ordinary value passes
    assert getattr(fresh, name) == float(ordinary)


@pytest.mark.slow
def test_every_numeric_flag_of_every_command_has_a_range():
    """A numeric flag added to any command without a rule in NUMBER_RULES fails here."""
    script = """
import importlib, sys
sys.path.insert(0, %r)
from absl import app, flags
from albert_tf.commands.cli import COMMANDS
from albert_tf.commands.flags import NUMBER_RULES

class Defined(Exception):
    pass

def stop(*args, **kwargs):  # the command has defined its flags and is about to parse them
    raise Defined

app.run = stop
FLAGS, missing = flags.FLAGS, []
before = set(FLAGS)
for module in sorted(set(COMMANDS.values())):
    sys.argv = [module, "--help"]
    try:
        importlib.import_module(module).cli()
    except (Defined, SystemExit):
        pass
    for name in sorted(set(FLAGS) - before):
        parser = type(FLAGS[name].parser).__name__
        ours = FLAGS.find_module_defining_flag(name, "").split(".")[0] == "albert_tf"
        if ours and parser in ("FloatParser", "IntegerParser") and name not in NUMBER_RULES:
            missing.append(f"{module} --{name}")
        delattr(FLAGS, name)  # the next command defines its own
print(missing)
""" % ROOT
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"
    assert len(NUMBER_RULES) > 50


def test_commands_refuse_extra_arguments_and_bad_numbers_in_one_line(tmp_path):
    text = tmp_path / "a.txt"
    text.write_text("One sentence here. Another one.\n")
    other = tmp_path / "b.txt"
    other.write_text("More.\n")
    out = tmp_path / "out.txt"
    # An unquoted glob the shell expanded: the second file would be dropped; it is refused.
    proc = _command("albert_tf.data.prepare_corpus", "--input_file", str(text), str(other),
                    "--output_file", str(out))
    assert proc.returncode == 1 and not out.exists()
    assert f"Unexpected argument(s) {other}: this command takes flags only" in proc.stderr
    assert "quote a glob" in proc.stderr
    proc = _command("albert_tf.data.prepare_corpus", "--input_file", str(text), "--output_file",
                    str(out),
                    "--heldout_every=-2")
    assert proc.returncode == 1 and "--heldout_every must be a finite number >= 0" in proc.stderr
    proc = _command("albert_tf.data.create_pretraining_data", "--input_file", str(text),
                    "--output_file",
                    str(tmp_path / "d"), "--spm_model_file", "x.model", "--random_seed=-1")
    assert proc.returncode == 1 and "--random_seed=-1: data generation needs a seed >= 0" \
        in proc.stderr
    proc = _command("albert_tf.data.create_pretraining_data", "--input_file", str(text),
                    "--output_file",
                    str(tmp_path / "d"), "--spm_model_file", "x.model", "--masked_lm_prob=nan")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("FATAL Flags parsing error: flag --masked_lm_prob=nan: "
                                  "--masked_lm_prob must be above 0 and at most 1")
    proc = _command("albert_tf.data.create_pretraining_data", "--input_file", str(text), str(other),
                    "--output_file", str(tmp_path / "d"), "--spm_model_file", "x.model")
    assert proc.returncode == 1 and "quote a glob (--input_file 'corpus/*.txt')" in proc.stderr
    assert not (tmp_path / "d").exists()


def test_an_unwritable_output_is_one_line(tmp_path):
    text = tmp_path / "a.txt"
    text.write_text("One sentence here. Another one.\n")
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a directory is needed")
    proc = _command("albert_tf.data.prepare_corpus", "--input_file", str(text), "--output_file",
                    str(blocker / "corpus" / "out.txt"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("error: ")
    assert str(blocker) in proc.stderr and "Not a directory" in proc.stderr
    assert blocker.read_text() == "a file where a directory is needed"


# ---------------------------------------------------------------------------------------------
# Inputs and artefacts others name by path are never written over.
def test_corpus_never_overwrites_its_input_or_other_text(tmp_path):
    from albert_tf.data.prepare_corpus import prepare_corpus
    from albert_tf.data.text_io import InputError

    source = tmp_path / "raw.txt"
    original = "First document. It has sentences.\n\nSecond one. Here.\n"
    source.write_text(original)
    with pytest.raises(InputError, match="is also an input .* rewritten while it is read"):
        prepare_corpus(str(source), str(source))
    link = tmp_path / "link.txt"
    link.symlink_to(source)
    with pytest.raises(InputError, match="is also an input"):
        prepare_corpus(str(source), str(link))
    assert source.read_text() == original
    out = tmp_path / "corpus.txt"
    first = prepare_corpus(str(source), str(out), paragraphs="lines")
    assert first["documents"] == 1 and first["unchanged"] == []
    again = prepare_corpus(str(source), str(out), paragraphs="lines")  # the same text: kept
    assert again["unchanged"] == [str(out)]
    kept = out.read_text()
    with pytest.raises(InputError, match="already exists with other text .* --overwrite"):
        prepare_corpus(str(source), str(out), paragraphs="blank_lines",
                       document_marker_regex="^Second")
    assert out.read_text() == kept
    prepare_corpus(str(source), str(out), document_marker_regex="^Second", overwrite=True)
    assert out.read_text() != kept
    with pytest.raises(InputError, match=r"--drop_line_regex '\(' is not a valid regular "
                                         r"expression \(missing \)"):
        prepare_corpus(str(source), str(tmp_path / "x.txt"), drop_line_regex="(")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    stdout = tmp_path / "stdout"
    stdout.symlink_to("/proc/self/fd/1")  # /dev/stdout, whatever stdout is redirected to
    for target in (fifo, "/dev/null", "/dev/stdout", stdout):  # never turned into a file
        with pytest.raises(OutputPathError, match="is not a regular file .* name a file"):
            prepare_corpus(str(source), str(target), overwrite=True)
    assert os.path.islink("/dev/stdout") and not os.path.isfile("/dev/null")
    assert os.path.islink(stdout)
    # A link to a file is written through: the link stays, its file gets the text.
    kept = tmp_path / "kept.txt"
    kept.write_text("old\n")
    via = tmp_path / "via.txt"
    via.symlink_to(kept)
    prepare_corpus(str(source), str(via), paragraphs="lines", overwrite=True)
    assert os.path.islink(via) and kept.read_text().startswith("First document.")
    assert source.read_text() == original
    assert sorted(os.listdir(tmp_path)) == ["corpus.txt", "kept.txt", "link.txt", "pipe",
                                            "raw.txt", "stdout", "via.txt"]


def test_vocabulary_is_kept_or_refused_never_replaced_silently(prepared_corpus, tmp_path):
    from albert_tf.data.train_vocab import VocabularyError, train_vocab

    prefix = str(tmp_path / "spm")
    first = train_vocab(prepared_corpus["wiki"], prefix, vocab_size=300, num_threads=1)
    model = open(prefix + ".model", "rb").read()
    again = train_vocab(prepared_corpus["wiki"], prefix, vocab_size=300, num_threads=1)
    assert again["already_complete"] and again["model_sha256"] == first["model_sha256"]
    # A description written before --digit_comma existed is the official form's: kept.
    description = json.loads(open(prefix + ".json").read())
    assert description.pop("digit_comma") == "official"
    open(prefix + ".json", "w").write(json.dumps(description))
    assert train_vocab(prepared_corpus["wiki"], prefix, vocab_size=300,
                       num_threads=1)["already_complete"]
    with pytest.raises(VocabularyError, match=r"spm.model already exists and was not made "
                                              r"from these inputs and settings \(--digit_comma "
                                              r"'official' then, 'huggingface' now\);"):
        train_vocab(prepared_corpus["wiki"], prefix, vocab_size=300, num_threads=1,
                    digit_comma="huggingface")
    hf_prefix = str(tmp_path / "hf" / "spm")
    train_vocab(prepared_corpus["wiki"], hf_prefix, vocab_size=300, num_threads=1,
                digit_comma="huggingface")
    from albert_tf.tokenization import Tokenizer

    hf, official = Tokenizer(hf_prefix + ".model"), Tokenizer(prefix + ".model")
    assert (hf.digit_comma, official.digit_comma) == ("huggingface", "official")
    assert open(hf_prefix + ".vocab").read() == open(prefix + ".vocab").read()
    shutil.rmtree(tmp_path / "hf")
    with pytest.raises(VocabularyError, match=r"--digit_comma 'xlnet': one of official, "):
        train_vocab(prepared_corpus["wiki"], prefix, vocab_size=300, digit_comma="xlnet")
    with pytest.raises(VocabularyError, match=r"spm.model already exists and was not made from "
                                              r"these inputs and settings \(--vocab_size 300 "
                                              r"then, 400 now\);.*--overwrite"):
        train_vocab(prepared_corpus["wiki"], prefix, vocab_size=400, num_threads=1)
    (tmp_path / "other").mkdir()
    other = tmp_path / "other" / "other.txt"
    other.write_text("Another corpus.\n", encoding="utf-8")
    with pytest.raises(VocabularyError) as refused:  # the change named: it named none
        train_vocab([str(other)], prefix, vocab_size=300, num_threads=1)
    wiki = os.path.abspath(prepared_corpus["wiki"])
    assert f"these inputs and settings (the input files: 1 then ({wiki}), 1 now);" \
        in str(refused.value)
    shutil.rmtree(tmp_path / "other")
    assert open(prefix + ".model", "rb").read() == model
    replaced = train_vocab(prepared_corpus["wiki"], prefix, vocab_size=400, num_threads=1,
                           overwrite=True)
    assert replaced["vocab_size"] == 400 and not replaced.get("already_complete")
    os.remove(prefix + ".model")  # its .vocab and .json left: named (it blamed the .json)
    with pytest.raises(VocabularyError, match=r"spm.vocab already exists and was not made from "
                                              r"these inputs and settings \(.*spm.model is "
                                              r"missing\);"):
        train_vocab(prepared_corpus["wiki"], prefix, vocab_size=400, num_threads=1)
    with pytest.raises(VocabularyError, match=r"--model_prefix '.*/' names a directory"):
        train_vocab(prepared_corpus["wiki"], str(tmp_path) + "/", vocab_size=300)
    (tmp_path / "blank.txt").write_text("\n  \n")
    with pytest.raises(VocabularyError, match=r"No text in .*blank.txt: every line is empty"):
        train_vocab(str(tmp_path / "blank.txt"), str(tmp_path / "b"), vocab_size=300)
    assert sorted(os.listdir(tmp_path)) == ["blank.txt", "spm.json", "spm.vocab"]


def test_convert_overwrite_replaces_only_an_earlier_conversion(tmp_path):
    from albert_tf.checkpoints import CheckpointError
    from albert_tf.checkpoints.ours import save_albert_tf

    model = AlbertPretrainer(tiny_config())
    out = tmp_path / "converted"
    save_albert_tf(model, str(out))
    save_albert_tf(model, str(out), overwrite=True)  # an earlier conversion: replaced
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "src" / "code.py").write_text("print('mine')\n")
    (project / "NOTES.md").write_text("notes\n")
    with pytest.raises(CheckpointError, match=r"holds files a conversion does not write "
                                              r"\(NOTES.md, src\); --overwrite replaces only"):
        save_albert_tf(model, str(project), overwrite=True)
    assert (project / "src" / "code.py").read_text() == "print('mine')\n"


def test_data_generation_refuses_empty_shards(prepared_corpus, sample_vocab, tmp_path):
    from albert_tf.data.generator import generate, make_job
    from albert_tf.data.text_io import InputError

    text = tmp_path / "small.txt"
    with open(prepared_corpus["wiki"]) as f:
        text.write_text("".join(f.readlines()[:40]))
    job = make_job(str(text), str(tmp_path / "out" / "train"), sample_vocab,
                   num_output_shards=500, max_seq_length=64, max_predictions_per_seq=10,
                   dupe_factor=1)
    with pytest.raises(InputError, match=r"--num_output_shards 500 is too many for the \d+ "
                                         r"examples .* files would be empty .* nothing was "
                                         r"written"):
        generate(job, progress=False)
    assert not (tmp_path / "out").exists()  # no shard, no work directory, no lock


def test_data_generation_refuses_an_input_as_output(prepared_corpus, sample_vocab, tmp_path):
    from albert_tf.data.generator import generate, make_job
    from albert_tf.data.text_io import InputError

    corpus = tmp_path / "corpus.txt"
    shutil.copy(prepared_corpus["wiki"], corpus)
    before = corpus.read_bytes()
    job = make_job(str(corpus), str(corpus), sample_vocab, max_seq_length=64,
                   max_predictions_per_seq=10, dupe_factor=1)
    with pytest.raises(InputError, match="--output_file .*corpus.txt is also an input"):
        generate(job, progress=False)
    assert corpus.read_bytes() == before


# ---------------------------------------------------------------------------------------------
# Resume: every setting that changes the result is checked.
@pytest.mark.slow
def test_resume_with_other_settings_is_refused_naming_them(generated_data, tmp_path):
    files = generated_data["files"][0]
    PretrainingRun(_config(tmp_path, files)).run()
    for changes, named in [({"learning_rate": 3e-2}, "learning_rate: 0.001 there, 0.03 now"),
                           ({"optimizer": "adamw"}, "optimizer: 'lamb' there, 'adamw' now"),
                           ({"num_train_steps": 4, "save_checkpoints_steps": 4},
                            "num_train_steps (run_classifier, run_race, run_tagging: "
                            "--train_step): 2 there, 4 now"),
                           ({"mixed_precision": "bfloat16"},
                            "mixed_precision: 'float32' there, 'bfloat16' now"),
                           ({"num_warmup_steps": 1}, "num_warmup_steps (run_classifier, "
                                                     "run_race, run_tagging: --warmup_step): 0 "
                                                     "there, 1 now")]:
        with pytest.raises(OutputDirMismatchError, match=r"holds a run with other settings \("
                                                         + re.escape(named)):
            PretrainingRun(_config(tmp_path, files, **changes))
    # The same command resumes (finished: nothing more to do) and reports that run.
    summary = PretrainingRun(_config(tmp_path, files)).run()
    assert summary["start"] == "resumed" and summary["step"] == 2


def test_training_config_refuses_non_finite_and_negative_schedules(tmp_path):
    for changes, message in [({"learning_rate": float("nan")}, "--learning_rate must be a "
                                                               "finite number > 0; got nan"),
                             ({"learning_rate": math.inf}, "--learning_rate must be"),
                             ({"learning_rate": 0.0}, "--learning_rate must be"),
                             ({"num_warmup_steps": -1},
                              "--num_warmup_steps must be a finite number >= 0; got -1"),
                             ({"poly_power": -1.0}, "--poly_power must be a finite number >= 0")]:
        with pytest.raises(ValueError, match=message):
            _config(tmp_path, "unused", **changes)
    with pytest.raises(ValueError, match=r"--train_batch_size=100000000 x --max_seq_length=64 "
                                         r"tokens exceed what one batch can index"):
        _config(tmp_path, "unused", train_batch_size=100_000_000)
    # Under the indexing limit but far beyond this host's memory: refused before anything runs.
    with pytest.raises(ValueError, match=r"--train_batch_size=30000000 at --max_seq_length=64 "
                                         r"needs at least \d+ GiB of host memory"):
        PretrainingRun(_config(tmp_path, "unused", train_batch_size=30_000_000))
    assert not (tmp_path / "run").exists()


def test_a_float16_stop_with_grown_weights_is_not_told_to_restart_from_them():
    """The issue's float16 run stopped for overflow with max |w| 31,618: the advice names the
    weight and float16's range and restarts from the run's starting weights or in another
    precision, never from the saved model; small weights (or float32) keep the usual advice."""
    cfg = types.SimpleNamespace(mixed_precision="float16", init_checkpoint="pre/ckpt-9",
                                output_dir="run")
    message = non_finite_advice(cfg, 40, "run/ckpt-40", 31618.2, "encoder/ffn/kernel")
    assert message == (
        "Non-finite loss, gradient or updated weights at step 41 (updates are 1-based); that "
        "step was not applied. The model after step 40 is saved at run/ckpt-40. Its weights "
        "have grown to max |w| = 31,618 (encoder/ffn/kernel), near float16's largest value "
        "(65,504): a run from that model overflows again. Train with a lower --learning_rate "
        "into a new --output_dir from the run's starting weights (--init_checkpoint "
        "pre/ckpt-9), or use --mixed_precision=bfloat16 or float32 (there --init_checkpoint "
        "run can start from that model).")
    cfg.init_checkpoint = None
    assert "starting weights (random weights (no --init_checkpoint))" in non_finite_advice(
        cfg, 40, "run/ckpt-40", 300.0, "w")
    usual = ("Check the data, or train with a lower --learning_rate into a new --output_dir "
             "(--init_checkpoint run starts from that model).")
    assert non_finite_advice(cfg, 40, "run/ckpt-40", 12.5, "w").endswith(usual)
    cfg.mixed_precision = "float32"
    assert non_finite_advice(cfg, 40, "run/ckpt-40", 31618.2, "w").endswith(usual)


@pytest.mark.slow
def test_an_overflowing_update_is_never_applied_nor_saved(generated_data, tmp_path):
    """A finite but huge learning rate overflows the LAMB update at step 1: the gate sees the
    updated weights, so the step is not applied; the checkpoint saved is the initial model,
    finite. A checkpoint holding nan (an earlier version's) is refused on resume."""
    files = generated_data["files"][0]
    run = PretrainingRun(_config(tmp_path, files, learning_rate=3e38))
    initial = [w.numpy().copy() for w in run.model.weights]
    with pytest.raises(NonFiniteLossError, match=r"Non-finite loss, gradient or updated weights "
                                                 r"at step 1 .* after step 0 is saved"):
        run.run()
    assert run.weights_finite()
    for before, after in zip(initial, run.model.weights):
        np.testing.assert_array_equal(before, after.numpy())
    # An old run's non-finite checkpoint: refused, named.
    clean = PretrainingRun(_config(tmp_path / "b", files))
    clean.run()
    clean.model.weights[0].assign(tf.fill(clean.model.weights[0].shape, float("nan")))
    clean.manager.save(checkpoint_number=3)
    with pytest.raises(NonFiniteLossError, match=r"The checkpoint .*ckpt-3 holds non-finite "
                                                 r"weights"):
        PretrainingRun(_config(tmp_path / "b", files, num_train_steps=2)).run()


# ---------------------------------------------------------------------------------------------
# Sidecars: read strictly, and their paths never followed out of the dataset.
def test_malformed_sidecars_name_the_file(tmp_path):
    path = str(tmp_path / "train.tfrecord")
    write_file([b"x"], path, {"num_examples": 1, "max_seq_length": 64})
    assert read_sidecar(path, required=("num_examples",))["num_examples"] == 1
    with pytest.raises(SidecarError, match=r"train.tfrecord.json, the sidecar of .*train.tfrecord"
                                           r", lacks 'max_predictions_per_seq'"):
        read_sidecar(path, required=("max_predictions_per_seq",))
    with open(path + ".json", "w") as f:
        f.write('{"num_examples": -3}')
    with pytest.raises(SidecarError, match="has -3 for 'num_examples'"):
        read_sidecar(path, required=("num_examples",))
    with open(path + ".json", "w") as f:
        f.write('{"num_examples": 1,')
    with pytest.raises(SidecarError, match=r"train.tfrecord.json, the sidecar of .* is not valid "
                                           r"JSON"):
        read_sidecar(path)
    with open(path + ".json", "w") as f:
        f.write('[1, 2]')
    with pytest.raises(SidecarError, match="is not a JSON object"):
        read_sidecar(path)


def _dataset_with_sidecar(generated_data, directory, **sidecar_changes):
    """A copy of the first generated shard in `directory` with its sidecar edited."""
    os.makedirs(directory, exist_ok=True)
    source = generated_data["files"][0]
    target = os.path.join(directory, os.path.basename(source))
    shutil.copy(source, target)
    with open(source + ".json") as f:
        meta = json.load(f)
    meta.update(sidecar_changes)
    with open(target + ".json", "w") as f:
        json.dump(meta, f)
    return target, meta


@pytest.mark.slow
def test_a_sidecar_cannot_copy_a_file_from_outside_its_dataset(generated_data, tmp_path):
    secret = tmp_path / "home" / ".ssh" / "id_rsa"
    secret.parent.mkdir(parents=True)
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n")

    def run_without_copying(name, **sidecar):
        """A run on the dataset whose sidecar names `name` as its SentencePiece model: the file
        is not copied beside the run's checkpoints. Returns what the run wrote."""
        files, _ = _dataset_with_sidecar(generated_data, tmp_path / "data", spm_model_file=name,
                                         **sidecar)
        PretrainingRun(_config(tmp_path, files, num_train_steps=1, save_checkpoints_steps=1))
        assert not (tmp_path / "run" / os.path.basename(name)).exists()
        written = sorted(os.listdir(tmp_path / "run"))
        shutil.rmtree(tmp_path / "run")
        return written

    for name in (str(secret), "../home/.ssh/id_rsa"):
        assert run_without_copying(name) == ["albert_config.json", "train_input.json",
                                             "train_settings.json"]
    # A symbolic link inside the dataset that points out of it is not followed either.
    (tmp_path / "data" / "spm.model").symlink_to(secret)
    run_without_copying("spm.model")
    # Nor a hard link to the secret, even with the secret's checksum forged into the sidecar.
    os.link(secret, tmp_path / "data" / "hard.model")
    run_without_copying("hard.model", spm_model_sha256=file_sha256(str(secret)))
    # Nor a file with the recorded checksum that is not a SentencePiece model.
    shutil.copy(secret, tmp_path / "data" / "copy.model")
    run_without_copying("copy.model", spm_model_sha256=file_sha256(str(secret)))
    # The dataset's own model, with the checksum its sidecar records, is copied.
    files = generated_data["files"][0]
    PretrainingRun(_config(tmp_path, files, num_train_steps=1, save_checkpoints_steps=1))
    copied = tmp_path / "run" / "sample8k.model"
    assert copied.read_bytes() == open(os.path.join(os.path.dirname(files), "sample8k.model"),
                                       "rb").read()


# ---------------------------------------------------------------------------------------------
# --init_checkpoint of pretraining: every source the help lists (BERT's phase 2).
@pytest.mark.slow
def test_pretraining_continues_from_a_run_or_a_hugging_face_folder(generated_data, tmp_path):
    import torch  # noqa: F401 - transformers' PyTorch classes
    import transformers
    from hf_helpers import hf_config, randomize_torch

    files = generated_data["files"][0]
    first = PretrainingRun(_config(tmp_path / "phase1", files))
    first.run()
    second = PretrainingRun(_config(tmp_path / "phase2", files,
                                    init_checkpoint=str(tmp_path / "phase1" / "run")))
    summary = second.run()
    assert summary["start"] == "initialized"
    # The initial weights of phase 2 are phase 1's final ones: same training, one more run.
    check = PretrainingRun(_config(tmp_path / "check", files, num_train_steps=1,
                                   save_checkpoints_steps=1,
                                   init_checkpoint=str(tmp_path / "phase1" / "run")))
    report = check.task.initialize(check.model, str(tmp_path / "phase1" / "run"))
    assert len(report["assigned"]) == len(first.model.weights)
    for a, b in zip(first.model.weights, check.model.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    # A Hugging Face AlbertForPreTraining folder fills the pretrainer; values compared.
    cfg = AlbertConfig(**TINY)
    hf = transformers.AlbertForPreTraining(hf_config(cfg)).eval()
    randomize_torch(hf, seed=5)
    hf.tie_weights()
    hf.save_pretrained(tmp_path / "hf")
    pretrainer = AlbertPretrainer(cfg)
    report = check.task.initialize(pretrainer, str(tmp_path / "hf"))
    assert not report.get("skipped") or all("derived" in r for r in report["skipped"].values())
    embeddings = hf.albert.embeddings.word_embeddings.weight.detach().numpy()
    ours = next(w for w in pretrainer.weights if "word_embeddings" in w.path).numpy()
    np.testing.assert_array_equal(ours, embeddings)
    # A backbone-only folder lacks the pretraining heads: named, nothing assigned.
    backbone_only = transformers.AlbertModel(hf_config(cfg))
    backbone_only.save_pretrained(tmp_path / "hf_backbone")
    with pytest.raises(CheckpointMismatchError, match=r"nothing was assigned. model weights "
                                                      r"with no checkpoint entry: "
                                                      r"\['predictions.dense.weight'"):
        check.task.initialize(AlbertPretrainer(cfg), str(tmp_path / "hf_backbone"))


# ---------------------------------------------------------------------------------------------
# Export: no other model kind under a served name; modes follow the umask.
@pytest.mark.slow
def test_export_refuses_another_kind_and_follows_the_umask(exported, sample_vocab, tmp_path):
    from albert_tf.export.saved_model import ExportError, export_saved_model

    _, path, _ = exported["pretrainer"]
    base = str(tmp_path / "pretrainer")  # a copy: the fixture's exports are shared
    shutil.copytree(os.path.dirname(path), base)
    before = sorted(os.listdir(base))
    classifier = AlbertClassifier(export_config(), num_labels=2)
    with pytest.raises(ExportError, match=r"serves a pretrainer model \(version 1\); this is a "
                                          r"classifier model.*another model name"):
        export_saved_model(classifier, base, sample_vocab, max_seq_length=32)
    pretrainer = exported["pretrainer"][0]
    with pytest.raises(ExportError, match=r"label names \(--labels\) are a classifier's; a "
                                          r"pretrainer has no classes"):
        export_saved_model(pretrainer, base, sample_vocab, max_seq_length=32, labels=["a", "b"])
    with pytest.raises(ExportError, match=r"--version must be a positive integer below 2\^63"):
        export_saved_model(pretrainer, base, sample_vocab, max_seq_length=32, version=2 ** 63)
    assert sorted(os.listdir(base)) == before
    # A version a killed export left (hidden) is removed by the next export of that name.
    target = tmp_path / "private" / "sst2"
    (target / ".tmp-1-abcd1234" / "variables").mkdir(parents=True)
    randomize(classifier, seed=1)
    old = os.umask(0o077)
    try:
        version = export_saved_model(classifier, str(target), sample_vocab, max_seq_length=32)
    finally:
        os.umask(old)
    assert sorted(os.listdir(target)) == ["1", "batching_parameters.txt", "models.config"]
    modes = {os.stat(os.path.join(root, n)).st_mode & 0o777
             for root, dirs, names in os.walk(version) for n in dirs + names}
    assert os.stat(version).st_mode & 0o777 == 0o700 and modes == {0o700, 0o600}
    assert os.stat(target / "models.config").st_mode & 0o777 == 0o600


def test_a_quantized_model_is_refused_by_name_and_nothing_is_written(sample_vocab, tmp_path):
    """Keras's quantize() swaps a Dense kernel for int8 values and scales the official-name
    table does not cover: exports, TF1 and Hugging Face writers refuse the model naming the
    quantized layers and the fix, not with the table's internal coverage error."""
    import keras

    from albert_tf.checkpoints.hf import hf_state_dict
    from albert_tf.checkpoints.tf1 import write_tf1_checkpoint
    from albert_tf.export.saved_model import ExportError, export_saved_model

    model = AlbertClassifier(export_config(), num_labels=2)
    model.quantize("int8", filters=lambda layer: isinstance(layer, keras.layers.Dense))
    dense = len({id(layer) for layer in model._flatten_layers()
                 if isinstance(layer, keras.layers.Dense)})
    message = (rf"{dense} layers of the classifier model are quantized by Keras's quantize\(\) "
               r"\(.*\); checkpoints, conversions and SavedModel exports hold the float32 "
               r"weights\. Write, convert or export the model before quantizing it")
    with pytest.raises(ExportError, match="Cannot export the classifier model: " + message):
        export_saved_model(model, str(tmp_path / "sst2"), sample_vocab, max_seq_length=32)
    with pytest.raises(ValueError, match=message):
        write_tf1_checkpoint(model, str(tmp_path / "tf1"))
    with pytest.raises(ValueError, match=message):
        hf_state_dict(model)
    assert sorted(os.listdir(tmp_path)) == []
    # The same model unquantized is written: every weight under its official name.
    float_model = AlbertClassifier(export_config(), num_labels=2)
    prefix = write_tf1_checkpoint(float_model, str(tmp_path / "tf1"))
    assert len(tf.train.list_variables(prefix)) == len(float_model.weights) == 75


@pytest.mark.slow
def test_resume_on_regenerated_input_of_the_same_size_is_refused(prepared_corpus, sample_vocab,
                                                                  tmp_path):
    """The same file name and record count, generated with another masking rate: another
    input, refused on resume (the sidecar's run identity is part of the plan)."""
    from albert_tf.input_pipeline import DataMismatchError
    from albert_tf.data.generator import generate, make_job

    def dataset(directory, masked_lm_prob):
        job = make_job(prepared_corpus["wiki"], str(tmp_path / directory / "train.tfrecord"),
                       sample_vocab, max_seq_length=64, max_predictions_per_seq=10,
                       dupe_factor=1, masked_lm_prob=masked_lm_prob)
        generate(job, progress=False)
        return job.output_files[0]

    first, second = dataset("a", 0.15), dataset("b", 0.3)
    assert read_sidecar(first)["num_examples"] == read_sidecar(second)["num_examples"]
    PretrainingRun(_config(tmp_path, first)).run()
    shutil.copy(second, first)
    shutil.copy(second + ".json", first + ".json")
    with pytest.raises(DataMismatchError, match=r"same names and record counts but other "
                                                r"contents: \['train.tfrecord'\]"):
        PretrainingRun(_config(tmp_path, first))


_LONG_CALL = """
import signal, sys, time
import tensorflow as tf
from albert_tf.training.stop_signals import StopSignals

@tf.function(autograph=False)  # source given with -c: no AutoGraph
def loop(n):  # one long call into TensorFlow: no Python runs in the main thread meanwhile
    x = tf.fill([128, 128], 0.01)
    return tf.while_loop(lambda i, s: i < n,
                         lambda i, s: (i + 1, s + tf.reduce_sum(tf.matmul(x, x))),
                         (tf.constant(0), tf.constant(0.0)))

loop(tf.constant(1))
before = signal.getsignal(signal.SIGINT)  # SIG_IGN where the parent was started in background
with StopSignals() as stop:
    print("in the call", flush=True)
    start = time.time()
    loop(tf.constant(int(sys.argv[1])))
    print(f"call ended after {time.time() - start:.1f} s; requested {stop.requested}", flush=True)
print(f"handler restored: {signal.getsignal(signal.SIGINT) is before}")
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_second_signal_ends_the_process_inside_one_long_tensorflow_call(signum):
    """The first SIGINT/SIGTERM is acknowledged at once and recorded (the loop stops at its
    end); the second, sent while the same tf.function call still runs, ends the process with
    that signal's status: Python's own handler would run only after the call."""
    name = signal.Signals(signum).name
    proc = subprocess.Popen([sys.executable, "-c", _LONG_CALL, "100000000"], cwd=ROOT,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, PYTHONPATH=ROOT))
    watchdog = threading.Timer(120, proc.kill)  # a process that ignores both signals
    watchdog.start()
    try:
        assert proc.stdout.readline() == "in the call\n"
        time.sleep(1)
        proc.send_signal(signum)
        expected = "Ctrl-C: the run saves" if signum == signal.SIGINT else "SIGTERM: the run saves"
        for line in proc.stderr:  # the acknowledgement comes while the call still runs
            if line.startswith(expected):
                break
        else:
            pytest.fail(f"no acknowledgement of {name} before the process ended")
        sent = time.time()
        proc.send_signal(signum)
        out, _ = proc.communicate(timeout=60)
    finally:
        watchdog.cancel()
        proc.kill()
    assert proc.returncode == -signum and time.time() - sent < 10 and out == "", (name, out)


def test_one_signal_inside_a_long_call_is_recorded_and_the_handlers_restored():
    proc = subprocess.Popen([sys.executable, "-c", _LONG_CALL, "3000"], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.stdout.readline() == "in the call\n"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    assert "requested SIGINT" in out and "handler restored: True" in out
    assert err.count("Ctrl-C: the run saves a checkpoint at the end of this loop") == 1


@pytest.mark.slow
def test_ctrl_c_saves_and_exits_130_then_resumes(generated_data, tmp_path):
    config = tmp_path / "albert_config.json"
    config.write_text(json.dumps(dict(TINY, type_vocab_size=2)))
    args = ["albert_tf.run_pretraining", "--albert_config_file", str(config),
            "--input_file", generated_data["files"][0], "--output_dir", str(tmp_path / "run"),
            "--max_seq_length", "64", "--max_predictions_per_seq", "10",
            "--train_batch_size", "4", "--num_train_steps", "100000", "--num_warmup_steps", "0",
            "--save_checkpoints_steps", "100000", "--iterations_per_loop", "5"]
    proc = subprocess.Popen([sys.executable, "-m", *args], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, PYTHONPATH=ROOT))
    for line in proc.stdout:  # the first loop of steps has run
        if line.startswith("step 5/"):
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err[-2000:]
    assert "Ctrl-C: the run saves a checkpoint at the end of this loop" in err
    assert "stopped by SIGINT at step" in err and "Traceback" not in err
    step = int(err.split("stopped by SIGINT at step ")[1].split()[0])
    assert step % 5 == 0 and (tmp_path / "run" / f"ckpt-{step}.index").exists()
    # Resumed with long loops of steps: a second Ctrl-C ends the process at once, inside the
    # loop, without saving; the checkpoint of the first stop stays the latest.
    long_loops = [a if a != "5" or args[i - 1] != "--iterations_per_loop" else "100000"
                  for i, a in enumerate(args)]
    proc = subprocess.Popen([sys.executable, "-m", *long_loops], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, PYTHONPATH=ROOT))
    for line in proc.stdout:
        if line.startswith(f"Resumed from {tmp_path / 'run' / f'ckpt-{step}'}"):
            break
    time.sleep(5)  # inside the first loop of 100,000 steps
    proc.send_signal(signal.SIGINT)
    time.sleep(1)
    sent = time.time()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGINT and time.time() - sent < 30, err[-2000:]
    assert err.count("Ctrl-C: the run saves a checkpoint at the end of this loop") == 1
    assert tf.train.latest_checkpoint(str(tmp_path / "run")).endswith(f"ckpt-{step}")


def test_a_fine_tuning_run_directory_is_read_as_its_own_model(tmp_path):
    """export --model_dir and --init_checkpoint of a fine-tuning run (or one checkpoint of a
    run, RUN/ckpt-N) build the model the run trained, from the kind it recorded."""
    from albert_tf.checkpoints.conversion import (initialize_backbone, read_training_checkpoint,
                                                  split_run_checkpoint)

    run = tmp_path / "sst2"
    run.mkdir()
    cfg = tiny_config()
    classifier = AlbertClassifier(cfg, num_labels=3)
    randomize(classifier, seed=3)
    cfg.to_json_file(str(run / "albert_config.json"))
    (run / "train_settings.json").write_text(json.dumps({"kind": "classifier", "num_labels": 3}))
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=classifier), str(run),
                                         max_to_keep=2, checkpoint_name="ckpt")
    manager.save(checkpoint_number=10)
    model, prefix = read_training_checkpoint(str(run))
    assert type(model).__name__ == type(classifier).__name__ and model.num_labels == 3
    for a, b in zip(model.weights, classifier.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert split_run_checkpoint(str(run / "ckpt-10")) == (str(run), str(run / "ckpt-10"))
    assert split_run_checkpoint(str(run / "ckpt-11")) is None
    other = AlbertClassifier(cfg, num_labels=2)
    report = initialize_backbone(other.backbone, str(run / "ckpt-10"))
    assert report["skipped"] and all("classifier head" in r for r in report["skipped"].values())
    np.testing.assert_array_equal(other.backbone.weights[0].numpy(),
                                  classifier.backbone.weights[0].numpy())
