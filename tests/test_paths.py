"""The one glob expander (text inputs of the data tools and TFRecords of training)."""

import os

import pytest

from albert_tf.input_pipeline import DataMismatchError, list_files
from albert_tf.paths import expand_patterns
from data.text_io import InputError, expand_input_patterns


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
