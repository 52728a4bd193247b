"""The one glob expander (text inputs of the data tools and TFRecords of training)."""

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
