"""The one glob expander (text inputs of the data tools and TFRecords of training)."""

import os
import re

import pytest

from albert_tf.input_pipeline import DataMismatchError, list_files
from albert_tf.paths import expand_patterns
from albert_tf.data.text_io import InputError, expand_input_patterns


def test_patterns_expand_in_order_without_duplicates(tmp_path):
    for name in ("b.txt", "a.txt", "c.tfrecord", "c.tfrecord.json", "d.tfrecord"):
        (tmp_path / name).write_text("x")
    (tmp_path / "sub").mkdir()
    d = str(tmp_path)
    # Pattern order, each pattern's matches sorted, a file named twice kept once.
    assert expand_patterns(f"{d}/*.txt, {d}/a.txt,{d}/d.tfrecord") == [
        f"{d}/a.txt", f"{d}/b.txt", f"{d}/d.tfrecord"]
    assert expand_patterns([f"{d}/d.tfrecord", f"{d}/*.txt"]) == [
        f"{d}/d.tfrecord", f"{d}/a.txt", f"{d}/b.txt"]
    # TFRecords: sorted overall, sidecars excluded.
    assert list_files(f"{d}/d.tfrecord,{d}/c.*") == [f"{d}/c.tfrecord", f"{d}/d.tfrecord"]
    with pytest.raises(InputError, match=r"Input pattern '.*/none\*' matches no file\."):
        expand_input_patterns(f"{d}/a.txt,{d}/none*")
    with pytest.raises(InputError, match=r"Input pattern '.*/missing.txt' matches no file\."):
        expand_input_patterns(f"{d}/missing.txt")
    with pytest.raises(InputError, match=r"Input '.*/sub' is a directory, not a file"):
        expand_input_patterns(f"{d}/s*")
    with pytest.raises(InputError, match=r"No input files given"):
        expand_input_patterns(" , ")
    with pytest.raises(DataMismatchError, match=r"'.*/c.tfrecord.json' matches no TFRecord file"):
        list_files(f"{d}/c.tfrecord.json")


def test_atomic_write_keeps_the_old_file_until_the_new_one_is_whole(tmp_path):
    """During the write only a hidden temporary exists beside the old file (no `*.json` glob
    sees it); an error leaves the old file byte for byte and no temporary; success replaces
    it."""
    from albert_tf.paths import atomic_write

    path = tmp_path / "results.json"
    path.write_text('{"old": 1}')
    with pytest.raises(RuntimeError):
        with atomic_write(str(path)) as f:
            f.write('{"new": ')
            assert sorted(p.name for p in tmp_path.glob("*.json")) == ["results.json"]
            assert len(list(tmp_path.glob(".results.json.tmp-*"))) == 1
            raise RuntimeError("killed mid-write")
    assert path.read_text() == '{"old": 1}' and sorted(os.listdir(tmp_path)) == ["results.json"]
    with atomic_write(str(path), "wb") as f:
        f.write('{"new": "é"}'.encode())
    assert path.read_text(encoding="utf-8") == '{"new": "é"}'
    assert sorted(os.listdir(tmp_path)) == ["results.json"]


def test_atomic_write_through_a_filesystem_with_a_scheme_and_the_record_files_on_it(tmp_path):
    """A path with a scheme (`gs://` on a cluster; TensorFlow's in-memory `ram://` here) goes
    through `tf.io.gfile` with the same promise: an error keeps the old file and leaves no
    temporary. TFRecord files and their sidecars written there hold the bytes of the local
    writer, which frames records as `tf.io.TFRecordWriter` does."""
    import tensorflow as tf

    from albert_tf.paths import atomic_copy, atomic_write
    from albert_tf.records import write_file

    root = f"ram://{tmp_path.name}"
    tf.io.gfile.makedirs(root)
    path = f"{root}/results.json"
    with atomic_write(path) as f:
        f.write('{"old": 1}')
    with pytest.raises(RuntimeError):
        with atomic_write(path) as f:
            f.write('{"new": ')
            assert len([n for n in tf.io.gfile.listdir(root) if n.startswith(".results")]) == 1
            raise RuntimeError("killed mid-write")
    assert tf.io.gfile.listdir(root) == ["results.json"]
    assert tf.io.gfile.GFile(path).read() == '{"old": 1}'
    records = [b"first", b"", "é".encode() * 300]
    write_file(records, f"{root}/train.tfrecord", {"num_examples": 3})
    write_file(records, str(tmp_path / "train.tfrecord"), {"num_examples": 3})
    with tf.io.TFRecordWriter(str(tmp_path / "tf.tfrecord")) as writer:
        for record in records:
            writer.write(record)
    assert sorted(tf.io.gfile.listdir(root)) == ["results.json", "train.tfrecord",
                                                 "train.tfrecord.json"]
    remote = tf.io.gfile.GFile(f"{root}/train.tfrecord", "rb").read()
    assert remote == (tmp_path / "train.tfrecord").read_bytes() == (
        tmp_path / "tf.tfrecord").read_bytes()
    assert tf.io.gfile.GFile(f"{root}/train.tfrecord.json").read() == (
        tmp_path / "train.tfrecord.json").read_text()
    # a copy into place, from the filesystem with a scheme to a local disk and back
    atomic_copy(f"{root}/train.tfrecord", str(tmp_path / "copy.tfrecord"))
    atomic_copy(str(tmp_path / "copy.tfrecord"), f"{root}/copy.tfrecord")
    assert tf.io.gfile.GFile(f"{root}/copy.tfrecord", "rb").read() == remote


def test_atomic_files_rename_together_in_order_or_not_at_all(tmp_path, monkeypatch):
    """A TFRecord file and its sidecar (or a TFLite file and its record) are written together:
    an error in the block renames neither; otherwise they are renamed in the order given, the
    marker of completeness last."""
    from albert_tf.paths import atomic_files

    data, sidecar = str(tmp_path / "d.tfrecord"), str(tmp_path / "d.tfrecord.json")
    with pytest.raises(OSError, match="disk full"):
        with atomic_files([(data, "wb"), (sidecar, "w")]) as (f, g):
            f.write(b"\x00" * 10)
            raise OSError("disk full")
    assert os.listdir(tmp_path) == []
    renamed = []
    real = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (renamed.append(os.path.basename(b)),
                                                    real(a, b)))
    with atomic_files([(data, "wb"), (sidecar, "w")], durable=False) as (f, g):
        f.write(b"\x01\x02")
        g.write('{"num_examples": 1}')
        hidden = sorted(os.listdir(tmp_path))
        assert [re.sub(r"tmp-\d+-[0-9a-f]{8}$", "tmp-ID", n) for n in hidden] == [
            ".d.tfrecord.json.tmp-ID", ".d.tfrecord.tmp-ID"]
        assert hidden[0].endswith(hidden[1].rsplit("tmp-", 1)[1])  # one writer's pair
    assert renamed == ["d.tfrecord", "d.tfrecord.json"]
    assert open(data, "rb").read() == b"\x01\x02" and sorted(os.listdir(tmp_path)) == [
        "d.tfrecord", "d.tfrecord.json"]
