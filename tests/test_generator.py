"""End-to-end TFRecord generation: determinism, resume, invariants on real text, bad input."""

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from albert_tf import features as F
from albert_tf.input_pipeline import parse_fn
from albert_tf.tokenization import CLS_ID, MASK_ID, PAD_ID, SEP_ID, Tokenizer, file_sha256
from conftest import GENERATION_KW, ROOT, SHARED_DIR
from albert_tf.data.generator import generate, make_job, tokenize_parts
from albert_tf.data.text_io import InputError, document_parts, read_documents
from albert_tf.data.token_cache import TokenStore, tokenize_file


def _records(path):
    return [r.numpy() for r in tf.data.TFRecordDataset(path)]


def _parsed(path, seq=64, preds=10):
    parse = parse_fn(seq, preds)
    return [{k: v.numpy() for k, v in parse(r).items()} for r in tf.data.TFRecordDataset(path)]


def _bytes(paths):
    return [open(p, "rb").read() for p in paths]


def test_outputs_and_sidecars(generated_data):
    files, summary = generated_data["files"], generated_data["summary"]
    assert [os.path.basename(f) for f in files] == [
        f"wiki-0000{i}-of-00003.tfrecord" for i in range(3)]
    total = 0
    for shard, path in enumerate(files):
        meta = json.load(open(F.sidecar_path(path)))
        n = len(_records(path))
        assert meta["num_examples"] == n > 500
        assert meta["shard_index"] == shard and meta["num_shards"] == 3
        assert (meta["max_seq_length"], meta["max_predictions_per_seq"]) == (64, 10)
        assert meta["vocab_size"] == 8000 and len(meta["spm_model_sha256"]) == 64
        assert meta["generation"]["random_seed"] == 17 and meta["run_hash"] == summary["run_hash"]
        # The vocabulary lies beside the shards, named relative to the sidecar, with the
        # checksum the sidecar records (training follows no path out of the dataset).
        assert meta["spm_model_file"] == "sample8k.model"
        assert file_sha256(os.path.join(os.path.dirname(path), meta["spm_model_file"])) \
            == meta["spm_model_sha256"]
        total += n
    assert total == summary["total_examples"] == summary["counts"]["examples"]
    # Round-robin dealing keeps shards balanced.
    sizes = [json.load(open(F.sidecar_path(p)))["num_examples"] for p in files]
    assert max(sizes) - min(sizes) <= 2 * 14  # at most one per unit (2 passes x 7 blocks)
    # No work directory, lock or temporary file is left behind.
    assert sorted(os.listdir(os.path.dirname(files[0]))) == sorted(
        [os.path.basename(f) for f in files] + [os.path.basename(F.sidecar_path(f)) for f in files]
        + ["sample8k.model"])


@pytest.mark.slow
def test_examples_are_real_text_with_masks_undone(generated_data, prepared_corpus, sample_vocab,
                                                  tmp_path):
    """Undoing the masks gives segments that occur verbatim in the tokenized corpus; segment
    ids, [SEP] positions and padding agree; no special token is masked or inserted."""
    tokenizer = Tokenizer(sample_vocab)
    tokenize_file(prepared_corpus["wiki"], tokenizer, str(tmp_path / "wiki"))
    store = TokenStore([str(tmp_path / "wiki")])
    corpus = {}
    for d in range(len(store)):
        doc = np.concatenate([store.sentence(d, j) for j in range(store.num_sentences(d))])
        corpus[d] = doc.astype(np.int32).tobytes()

    def occurs(segment):
        needle = segment.astype(np.int32).tobytes()
        for doc in corpus.values():
            at = doc.find(needle)
            while at >= 0:
                if at % 4 == 0:
                    return True
                at = doc.find(needle, at + 1)
        return False

    examples = _parsed(generated_data["files"][0])
    for ex in examples[:400]:
        n = int(ex["input_mask"].sum())
        assert (ex["input_mask"][:n] == 1).all() and (ex["input_mask"][n:] == 0).all()
        ids = ex["input_ids"].copy()
        assert (ids[n:] == PAD_ID).all() and (ex["segment_ids"][n:] == 0).all()
        k = int(ex["masked_lm_weights"].sum())
        positions = ex["masked_lm_positions"][:k]
        assert (ex["masked_lm_positions"][k:] == 0).all() and (ex["masked_lm_ids"][k:] == 0).all()
        assert (positions < n).all()
        assert not np.isin(ex["masked_lm_ids"][:k], [CLS_ID, SEP_ID, PAD_ID]).any()
        ids[positions] = ex["masked_lm_ids"][:k]
        seps = np.flatnonzero(ids[:n] == SEP_ID)
        assert ids[0] == CLS_ID and len(seps) == 2 and seps[1] == n - 1
        assert (ex["segment_ids"][: seps[0] + 1] == 0).all()
        assert (ex["segment_ids"][seps[0] + 1:n] == 1).all()
        a, b = ids[1:seps[0]], ids[seps[0] + 1:n - 1]
        assert len(a) >= 1 and len(b) >= 1
        assert occurs(a) and occurs(b)
        masked_now = ex["input_ids"][positions]
        assert not np.isin(masked_now, [CLS_ID, SEP_ID, PAD_ID]).any()
    mask_share = np.mean([(ex["input_ids"][ex["masked_lm_positions"][:int(ex[
        "masked_lm_weights"].sum())]] == MASK_ID).mean() for ex in examples])
    assert 0.75 < mask_share < 0.85


@pytest.mark.slow
def test_byte_identical_for_any_worker_count(generated_data, prepared_corpus, sample_vocab,
                                             tmp_path):
    job = make_job(prepared_corpus["wiki"], str(tmp_path / "wiki"), sample_vocab,
                   num_output_shards=3, **GENERATION_KW)
    # Two workers tokenize the file in pieces cut at document boundaries; one, whole.
    assert len(tokenize_parts([prepared_corpus["wiki"]], 2)[0]) == 4
    assert tokenize_parts([prepared_corpus["wiki"]], 1) == [[(0, None)]]
    generate(job, num_workers=1, progress=False)
    assert _bytes(job.output_files) == _bytes(generated_data["files"])  # made with 2 workers
    for a, b in zip(job.output_files, generated_data["files"]):
        meta_a, meta_b = json.load(open(F.sidecar_path(a))), json.load(open(F.sidecar_path(b)))
        assert meta_a == meta_b
    other = make_job(prepared_corpus["wiki"], str(tmp_path / "seed18"), sample_vocab,
                     num_output_shards=3, **dict(GENERATION_KW, random_seed=18))
    generate(other, num_workers=1, progress=False)
    assert all(x != y for x, y in zip(_bytes(other.output_files), _bytes(job.output_files)))
    again = generate(job, num_workers=2, progress=False)  # same job again: nothing to do
    assert again["already_complete"]


def test_a_file_cut_at_document_boundaries_reads_as_the_whole_file(tmp_path):
    """`document_parts` cuts only right after a blank line: the parts' documents, read one
    after another, are the file's, for any number of parts (a BOM, CRLF, whitespace-only and
    NBSP-only lines, runs of blank lines, a long document without any, no final newline); an
    invalid line in a later part is named by its line in the file."""
    docs = [[f"Sentence {d}.{j} of document {d}." for j in range(1 + d % 4)] for d in range(120)]
    docs[17] = [f"A long document, line {j}." for j in range(150)]
    text = ""
    for d, doc in enumerate(docs):
        text += "\r\n".join(doc) + "\r\n" + ["\n", " \t\n\n", "\u00a0\n", "\n\n\n"][d % 4]
    path = tmp_path / "corpus.txt"
    path.write_bytes(b"\xef\xbb\xbf" + text.rstrip("\n").encode("utf-8"))
    whole = list(read_documents(str(path)))
    assert len(whole) == 120 and whole[0] == docs[0]
    counts = set()
    for parts in range(1, 13):
        ranges = document_parts(str(path), parts)
        counts.add(len(ranges))
        assert ranges[0][0] == 0 and ranges[-1][1] is None
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
        assert [doc for part in ranges for doc in read_documents(str(path), part)] == whole
    assert max(counts) >= 8
    lines = path.read_bytes().split(b"\n")
    lines[-5] = b"caf\xe9 au lait"
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(InputError) as whole_error:
        list(read_documents(str(path)))
    with pytest.raises(InputError) as part_error:
        for part in document_parts(str(path), 6):
            list(read_documents(str(path), part))
    assert str(part_error.value) == str(whole_error.value)
    assert f"line {len(lines) - 4} is not valid UTF-8" in str(whole_error.value)


@pytest.mark.slow
def test_a_rerun_that_cuts_a_file_otherwise_does_not_reuse_other_pieces(
        prepared_corpus, sample_vocab, tmp_path, monkeypatch):
    """A killed run's token caches of file pieces are reused only for the same byte range: a
    rerun with another --num_workers cuts the file into as many pieces at other places, and
    its output is still one worker's (pieces were named by their count: the rerun took them
    for its own and dropped or repeated a part of the corpus, silently)."""
    from albert_tf.data import generator

    wiki = prepared_corpus["wiki"]
    reference = make_job(wiki, str(tmp_path / "one" / "train"), sample_vocab, **GENERATION_KW)
    generate(reference, num_workers=1, progress=False)
    cuts = [end for _, end in document_parts(wiki, 6)[:-1]]
    job = make_job(wiki, str(tmp_path / "two" / "train"), sample_vocab, **GENERATION_KW)

    def stop(*args):
        raise RuntimeError("killed after the tokenization")

    for cut in (cuts[1], cuts[3]):  # two pieces each time, cut at other places
        monkeypatch.setattr(generator, "tokenize_parts",
                            lambda files, workers, cut=cut: [[(0, cut), (cut, None)]])
        if cut == cuts[1]:
            monkeypatch.setattr(generator, "_map_phase", stop)
            with pytest.raises(RuntimeError, match="killed after the tokenization"):
                generate(job, num_workers=2, progress=False)
            monkeypatch.undo()
        else:
            generate(job, num_workers=2, progress=False)
    assert _bytes(job.output_files) == _bytes(reference.output_files)


def test_two_workers_name_the_first_bad_line_of_a_file_cut_in_pieces(sample_vocab, tmp_path,
                                                                    monkeypatch):
    """Pieces of a file are tokenized in parallel; an invalid line at the end of a long first
    piece and one at the start of a short last piece are both found, and the error names the
    first, as one worker does (the piece that failed first was named before)."""
    from albert_tf.data import generator

    lines = [f"Sentence number {i} of a long file." for i in range(40_000)]
    text = "\n\n".join("\n".join(lines[i:i + 4]) for i in range(0, len(lines), 4)).encode()
    path = tmp_path / "bad.txt"
    path.write_bytes(text)
    cut = document_parts(str(path), 10)[-1][0]  # the first piece: 90% of the file
    monkeypatch.setattr(generator, "tokenize_parts",
                        lambda files, workers: [[(0, cut), (cut, None)]] if workers > 1
                        else [[(0, None)]])
    raw = bytearray(text)
    first, last = cut - 40, cut + 5  # the first piece's last sentence, the last's first
    raw[first], raw[last] = 0xFF, 0xFE
    path.write_bytes(bytes(raw))
    first_line = raw[:first].count(b"\n") + 1
    for workers in (1, 2):
        job = make_job(str(path), str(tmp_path / f"out{workers}" / "d"), sample_vocab,
                       **GENERATION_KW)
        with pytest.raises(InputError, match=rf"bad.txt: line {first_line} is not valid UTF-8 "
                                             rf"\(byte 0xff at file offset {first}\)"):
            generate(job, num_workers=workers, progress=False)
        out = tmp_path / f"out{workers}"
        assert not out.exists() or os.listdir(out) == []  # the work directory removed


def _cli(args, **kwargs):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.Popen([sys.executable, "-m", "albert_tf.data.create_pretraining_data", *args],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **kwargs)


@pytest.mark.slow
def test_killed_run_resumes_to_identical_output(prepared_corpus, sample_vocab, tmp_path):
    args = ["--input_file", prepared_corpus["wiki"], "--spm_model_file", sample_vocab,
            "--num_output_shards", "2", "--max_seq_length", "64", "--max_predictions_per_seq",
            "10", "--dupe_factor", "8", "--tokens_per_unit", "40000", "--random_seed", "3",
            "--num_workers", "1", "--progress=false"]
    clean = _cli(args + ["--output_file", str(tmp_path / "clean" / "d")])
    killed = _cli(args + ["--output_file", str(tmp_path / "killed" / "d")],
                  start_new_session=True)
    work = None
    deadline = time.time() + 240
    while time.time() < deadline:  # wait until a few units are spilled, then SIGKILL
        dirs = [d for d in os.listdir(tmp_path / "killed")] if (tmp_path / "killed").exists() \
            else []
        work = next((tmp_path / "killed" / d for d in dirs if d.startswith(".albert")), None)
        if work and len(list((work / "units").glob("*.idx"))) >= 3:
            break
        time.sleep(0.05)
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait()
    assert work is not None
    finals = [p for p in os.listdir(tmp_path / "killed") if not p.startswith(".")]
    assert finals == []  # nothing under a final name
    done_units = len(list((work / "units").glob("*.idx")))
    assert 3 <= done_units < 7 * 8
    resumed = _cli(args + ["--output_file", str(tmp_path / "killed" / "d")])
    out, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err
    clean.communicate(timeout=600)
    names = [f"d-0000{i}-of-00002.tfrecord" for i in range(2)]
    assert _bytes([tmp_path / "killed" / n for n in names]) == \
        _bytes([tmp_path / "clean" / n for n in names])
    # the shards, their sidecars and the SentencePiece model the sidecars name; no temporaries
    assert sorted(os.listdir(tmp_path / "killed")) == sorted(
        names + [n + ".json" for n in names] + [os.path.basename(sample_vocab)])


@pytest.mark.slow
def test_failure_while_writing_shards_resumes(prepared_corpus, sample_vocab, tmp_path,
                                              monkeypatch):
    import albert_tf.data.generator as generator

    job = make_job(prepared_corpus["wiki"], str(tmp_path / "a" / "d"), sample_vocab,
                   num_output_shards=3, **GENERATION_KW)
    real_dump = json.dump

    def failing_dump(obj, *args, **kwargs):
        if isinstance(obj, dict) and obj.get("shard_index") == 1:  # the second shard's sidecar
            raise OSError("disk full (injected)")
        return real_dump(obj, *args, **kwargs)

    monkeypatch.setattr(generator.json, "dump", failing_dump)
    with pytest.raises(OSError, match="injected"):
        generate(job, num_workers=1, progress=False)
    monkeypatch.setattr(generator.json, "dump", real_dump)
    assert os.path.exists(job.output_files[0]) and not os.path.exists(job.output_files[1])
    generate(job, num_workers=1, progress=False)
    reference = make_job(prepared_corpus["wiki"], str(tmp_path / "b" / "d"), sample_vocab,
                         num_output_shards=3, **GENERATION_KW)
    generate(reference, num_workers=1, progress=False)
    assert _bytes(job.output_files) == _bytes(reference.output_files)


# ---------------------------------------------------------------------------------------------
def test_bad_inputs_leave_nothing_behind(prepared_corpus, sample_vocab, tmp_path):
    out = tmp_path / "out"
    kw = dict(GENERATION_KW)
    with pytest.raises(InputError, match=r"Input pattern '.*missing\*.txt' matches no file"):
        make_job(str(tmp_path / "missing*.txt"), str(out / "d"), sample_vocab, **kw)
    (tmp_path / "blank.txt").write_text("\n \n\n")
    job = make_job(f"{prepared_corpus['wiki']},{tmp_path / 'blank.txt'}", str(out / "d"),
                   sample_vocab, **kw)
    with pytest.raises(InputError, match=r"blank.txt holds no documents"):
        generate(job, progress=False)
    assert not out.exists() or os.listdir(out) == []
    # Two workers tokenize a large blank file in pieces: no piece has a document, and the
    # file is named as with one worker, after its pieces ran.
    (tmp_path / "blank.txt").write_text("\n \n\n" * 200_000)
    with pytest.raises(InputError, match=r"blank.txt holds no documents"):
        generate(job, num_workers=2, progress=False)
    assert not out.exists() or os.listdir(out) == []
    # Many small files and an empty one, two workers: the error comes while other files are
    # still being tokenized; they are waited for before the work directory is removed (it was
    # left behind, half removed, in 4 of 5 runs).
    for i in range(30):
        (tmp_path / "tiny" / f"{i:02d}.txt").parent.mkdir(exist_ok=True)
        (tmp_path / "tiny" / f"{i:02d}.txt").write_text(f"Sentence {i}.\nAnother one.\n")
    (tmp_path / "empty.txt").write_text("")
    job = make_job(f"{tmp_path / 'tiny' / '*.txt'},{tmp_path / 'empty.txt'}", str(out / "d"),
                   sample_vocab, **kw)
    with pytest.raises(InputError, match=r"empty.txt holds no documents"):
        generate(job, num_workers=2, progress=False)
    assert not out.exists() or os.listdir(out) == []
    (tmp_path / "latin1.txt").write_bytes("d\u00e9j\u00e0 vu.\n\nnext doc.\n".encode("latin-1"))
    job = make_job(str(tmp_path / "latin1.txt"), str(out / "d"), sample_vocab, **kw)
    with pytest.raises(InputError, match=r"latin1.txt: line 1 is not valid UTF-8"):
        generate(job, progress=False)
    assert not out.exists() or os.listdir(out) == []
    with pytest.raises(ValueError, match=r"--max_predictions_per_seq=70 must be in \[1, "
                                         r"max_seq_length - 3 = 61\]"):
        make_job(prepared_corpus["wiki"], str(out / "d"), sample_vocab,
                 **dict(kw, max_predictions_per_seq=70))
    with pytest.raises(ValueError, match="--dupe_factor must be at least 1"):
        make_job(prepared_corpus["wiki"], str(out / "d"), sample_vocab, **dict(kw, dupe_factor=0))
    with pytest.raises(ValueError, match="--num_output_shards needs a single --output_file"):
        make_job(prepared_corpus["wiki"], f"{out}/a,{out}/b", sample_vocab, num_output_shards=2,
                 **kw)


def test_vocabulary_without_special_ids_is_refused(prepared_corpus, tmp_path):
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(input=prepared_corpus["wiki"], vocab_size=500,
                                   model_prefix=str(tmp_path / "plain"), minloglevel=2)
    job = make_job(prepared_corpus["wiki"], str(tmp_path / "out" / "d"),
                   str(tmp_path / "plain.model"), **GENERATION_KW)
    with pytest.raises(ValueError, match="plain.model lacks the official ALBERT special ids"):
        generate(job, progress=False)
    assert not (tmp_path / "out").exists()


def test_existing_files_are_never_overwritten(generated_data, prepared_corpus, sample_vocab,
                                              tmp_path):
    target = tmp_path / "d.tfrecord"
    target.write_bytes(b"precious")
    job = make_job(prepared_corpus["wiki"], str(target), sample_vocab, **GENERATION_KW)
    with pytest.raises(InputError, match="already exists and was not written by this run"):
        generate(job, progress=False)
    assert target.read_bytes() == b"precious"
    # Outputs of a different run (another seed) are refused too.
    changed = dataclasses.replace(generated_data["job"], random_seed=99)
    before = _bytes(generated_data["files"])
    with pytest.raises(InputError, match="already exists from a different run"):
        generate(changed, progress=False)
    assert _bytes(generated_data["files"]) == before


OFFICIAL_SCRIPT = os.path.join(SHARED_DIR, "official_albert", "albert",
                               "create_pretraining_data.py")


@pytest.mark.needs_shared("official_albert")
@pytest.mark.slow
def test_command_line_with_official_flags(prepared_corpus, sample_vocab, tmp_path):
    """Every flag the official script defines is one of ours (plus --num_workers here)."""
    vocab_file = sample_vocab[: -len(".model")] + ".vocab"
    official = ["--input_file", prepared_corpus["wiki"], "--output_file",
                f"{tmp_path}/x.tfrecord,{tmp_path}/y.tfrecord", "--spm_model_file",
                sample_vocab, "--vocab_file", vocab_file, "--input_file_mode", "r",
                "--do_lower_case", "--max_seq_length", "32", "--max_predictions_per_seq", "5",
                "--masked_lm_prob", "0.15", "--ngram", "2", "--favor_shorter_ngram=false",
                "--do_whole_word_mask", "--do_permutation=false", "--dupe_factor", "1",
                "--short_seq_prob", "0.2", "--random_next_sentence=false", "--random_seed", "1"]
    with open(OFFICIAL_SCRIPT, encoding="utf-8") as f:
        defined = set(re.findall(r'DEFINE_\w+\(\s*"(\w+)"', f.read()))
    given = {a[2:].split("=")[0].removeprefix("no") for a in official if a.startswith("--")}
    assert len(defined) == 17 and defined == given
    run = _cli(official + ["--num_workers", "2"])
    out, err = run.communicate(timeout=600)
    assert run.returncode == 0, err
    assert "wrote" in out and "[examples]" in err  # summary and progress line with examples/s
    assert "examples/s" in err
    meta = json.load(open(tmp_path / "x.tfrecord.json"))
    assert meta["generation"]["ngram"] == 2 and meta["generation"]["favor_shorter_ngram"] is False
    bad = _cli(["--input_file", prepared_corpus["wiki"], "--output_file", f"{tmp_path}/z",
                "--spm_model_file", sample_vocab, "--vocab_file", prepared_corpus["wiki"]])
    out, err = bad.communicate(timeout=600)
    assert bad.returncode == 1 and "does not list the pieces of --spm_model_file" in err
    # The official flags' other values this generator does not run: refused with the reason,
    # before anything is written.
    for flag, reason in (("--input_file_mode=rb", "only 'r' (the default) is supported"),
                         ("--do_permutation", "--do_permutation is not supported")):
        bad = _cli(["--input_file", prepared_corpus["wiki"], "--output_file",
                    f"{tmp_path}/refused/d", "--spm_model_file", sample_vocab, flag])
        out, err = bad.communicate(timeout=600)
        assert bad.returncode == 1 and reason in err and "Traceback" not in err, err
        assert not (tmp_path / "refused").exists()


def test_the_run_identity_holds_the_digit_comma_form_where_the_vocabulary_has_such_pieces(
        sample_vocab, digit_comma_vocab, tmp_path, monkeypatch):
    """Data made by the version that re-split digit-comma pieces in the Hugging Face form (its
    run hash had no form) is another run's: with a vocabulary holding such pieces the hash
    names the form, so that data is neither resumed into nor reused. A vocabulary without
    them keeps its hash: its data is byte for byte what this version writes."""
    from albert_tf.data import generator

    def hashes(vocab):
        job = make_job(str(tmp_path / "corpus.txt"), str(tmp_path / "out"), vocab)
        now = generator.compute_run_hash(job, ["x"], file_sha256(vocab))
        with monkeypatch.context() as m:  # the hash as the previous version computed it
            m.setattr(generator, "_digit_comma_form", lambda *args: None)
            return now, generator.compute_run_hash(job, ["x"], file_sha256(vocab))

    (tmp_path / "corpus.txt").write_text("a line\n")
    now, before = hashes(digit_comma_vocab)
    assert now != before
    now, before = hashes(sample_vocab)
    assert now == before
