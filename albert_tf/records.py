"""TFRecords, written one way for every task and for the pretraining data.

- `encode_example` / `to_example` / `example_of`: `tf.train.Example` bytes without TensorFlow (the
  data-generation workers build them by the million; importing TensorFlow in each costs seconds
  and hundreds of MB). The wire format is small and stable
  (tensorflow/core/example/example.proto):

      Example  { Features features = 1; }
      Features { map<string, Feature> feature = 1; }
      Feature  { oneof { BytesList bytes_list = 1; FloatList float_list = 2;
                         Int64List int64_list = 3; } }
      FloatList { repeated float value = 1 [packed = true]; }
      Int64List { repeated int64 value = 1 [packed = true]; }

  Map entries are written sorted by key, which is what
  `tf.train.Example.SerializeToString(deterministic=True)` produces; the tests compare the bytes.
- `write_records` / `write_file`: records to TFRecord files with JSON sidecars (`features.
  sidecar_path`), each written under a temporary name and renamed into place, the sidecar last
  (it marks a finished file); a split in several files for several input pipelines
  (`shard_paths`); `read_cached` finds files written from the same inputs (by digest).

TensorFlow (its TFRecord writer and `tf.io.gfile`, for `gs://` paths) is loaded by the writing
functions only, so that importing this module, as the data workers do, stays light.
"""

from __future__ import annotations

import json
import os
import struct

import numpy as np

try:  # the C CRC-32C (a dependency); the Python one below where it is missing
    import google_crc32c
except ImportError:  # pragma: no cover - installed with the package
    google_crc32c = None

from albert_tf import features as F
from albert_tf.paths import atomic_files, gfile


def _crc32c_python(data: bytes) -> int:
    """CRC-32C in Python: the fallback where google-crc32c (a dependency) is not installed."""
    table = _crc32c_python.table
    if table is None:
        table = _crc32c_python.table = []
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
            table.append(c)
    crc = 0xFFFFFFFF
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


_crc32c_python.table = None
_crc32c = google_crc32c.value if google_crc32c is not None else _crc32c_python


def masked_crc32c(data: bytes) -> int:
    """The TFRecord framing's masked CRC-32C of `data`."""
    crc = _crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class _RecordFramer:
    """Writes records into a binary file as `tf.io.TFRecordWriter` frames them (length, its
    masked CRC-32C, the data, the data's masked CRC-32C; the same bytes, tested), without
    TensorFlow, so a data worker need not load it (seconds)."""

    _LENGTH, _CRC = struct.Struct("<Q"), struct.Struct("<I")

    def __init__(self, file):
        self._file = file

    def write(self, record: bytes) -> None:
        header = self._LENGTH.pack(len(record))
        crc = self._CRC.pack
        self._file.write(b"".join((header, crc(masked_crc32c(header)), record,
                                   crc(masked_crc32c(record)))))


# ---------------------------------------------------------------------------------------------
# Examples.
def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # int64 two's complement, 10 bytes
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


_SMALL = [_varint(v) for v in range(1 << 16)]


def _varints(values) -> bytes:
    small = _SMALL
    return b"".join([small[v] if 0 <= v < 65536 else _varint(v) for v in values])


def _header(field: int, length: int) -> bytes:
    """The tag and length of a length-delimited field."""
    return _SMALL[(field << 3) | 2] + (_SMALL[length] if length < 65536 else _varint(length))


def _length_delimited(field: int, payload: bytes) -> bytes:
    return _header(field, len(payload)) + payload


def _int64_feature(values) -> bytes:
    if isinstance(values, np.ndarray) and values.dtype.kind in "iub":
        values = values.astype(np.int64, copy=False).tolist()  # Python ints at once
    else:
        values = [int(v) for v in values]
    packed = _varints(values)
    return _length_delimited(3, _length_delimited(1, packed) if packed else b"")


def _float_feature(values) -> bytes:
    values = np.asarray(values, dtype="<f4")
    return _length_delimited(2, _length_delimited(1, values.tobytes()) if values.size else b"")


def _bytes_feature(values) -> bytes:
    return _length_delimited(1, b"".join(_length_delimited(1, v) for v in values))


_FEATURE_ENCODERS = {"int64": _int64_feature, "float32": _float_feature,
                     "bytes": _bytes_feature}


def encode_example(features: dict) -> bytes:
    """Serializes {name: (values, "int64" | "float32" | "bytes")} as a `tf.train.Example`."""
    entries = []
    for name in sorted(features):
        values, dtype = features[name]
        feature = _FEATURE_ENCODERS[dtype](values)
        entry = _length_delimited(1, name.encode("utf-8")) + _length_delimited(2, feature)
        entries.append(_length_delimited(1, entry))
    return _length_delimited(1, b"".join(entries))


def _packed_varints(values: np.ndarray) -> tuple[bytes, np.ndarray]:
    """The packed varints of each row of the int64 matrix `values`, all rows in one buffer:
    (buffer, each row's byte length). Vectorized `_varints`: the same bytes."""
    rows = len(values)
    u = np.ascontiguousarray(values, np.int64).view(np.uint64).reshape(-1)
    if u.size == 0:
        return b"", np.zeros(rows, np.int64)
    top = int(u.max())
    if top < 0x80:  # one byte each (masks, segment ids, labels, positions)
        return u.astype(np.uint8).tobytes(), np.full(rows, u.size // rows, np.int64)
    width = (top.bit_length() + 6) // 7  # the most bytes a value takes
    if top < 1 << 32:
        u = u.astype(np.uint32)
    groups = np.empty((u.size, width), np.uint8)
    counts = np.ones(u.size, np.int64)
    rest = u
    for k in range(width):
        groups[:, k] = rest & 0x7F
        rest = rest >> 7
        if k + 1 < width:
            more = rest != 0
            groups[:, k] |= more.view(np.uint8) << 7
            counts += more
    used = np.arange(width)[None, :] < counts[:, None]
    return groups[used].tobytes(), counts.reshape(rows, -1).sum(1)


def encode_examples(columns: dict) -> list[bytes]:
    """Many `tf.train.Example`s of the same int64 and float32 features at once: {name:
    (values [n, k], "int64" | "float32")}, row i of every feature making example i. The bytes
    are `encode_example`'s for each row (tested); the values are encoded with numpy, a whole
    batch per call (the data-generation workers' hot path)."""
    names = sorted(columns)
    num_rows = {len(columns[name][0]) for name in names}
    if len(num_rows) > 1:
        raise ValueError(f"encode_examples: features of different row counts {sorted(num_rows)}")
    num_rows = num_rows.pop() if num_rows else 0
    if num_rows == 0:
        return []
    parts = []  # per feature: (entry prefix, feature tag, buffer, row offsets)
    for name in names:
        values, dtype = columns[name]
        if dtype == "int64":
            buffer, lengths = _packed_varints(np.asarray(values).reshape(num_rows, -1))
            tag = 3
        elif dtype == "float32":
            array = np.ascontiguousarray(values, "<f4").reshape(num_rows, -1)
            buffer, lengths = array.tobytes(), np.full(num_rows, array.shape[1] * 4, np.int64)
            tag = 2
        else:
            raise ValueError(f"encode_examples: feature {name!r} has dtype {dtype!r}; only "
                             "int64 and float32 (encode_example takes bytes features)")
        offsets = np.concatenate([[0], np.cumsum(lengths)]).tolist()
        parts.append((_length_delimited(1, name.encode("utf-8")), tag, buffer, offsets))
    examples = []
    for i in range(num_rows):
        entries = []
        for key, tag, buffer, offsets in parts:
            payload = buffer[offsets[i]:offsets[i + 1]]
            inner = _header(1, len(payload)) + payload if payload else b""
            feature = _header(tag, len(inner)) + inner
            entry = key + _header(2, len(feature)) + feature
            entries.append(_header(1, len(entry)) + entry)
        body = b"".join(entries)
        examples.append(_header(1, len(body)) + body)
    return examples


def example_of(features: dict) -> bytes:
    """A `tf.train.Example` of {name: value}: a str or bytes value is one bytes feature (text,
    UTF-8), anything else a sequence of ints (the official token features). The one way the
    project builds an example outside a schema (serving warmup requests, the client, tests)."""
    typed = {}
    for name, value in features.items():
        if isinstance(value, (str, bytes)):
            typed[name] = ([value.encode("utf-8") if isinstance(value, str) else value], "bytes")
        else:
            typed[name] = ([int(v) for v in value], "int64")
    return encode_example(typed)


def to_example(features: dict, schema: dict) -> bytes:
    """A `tf.train.Example` of {name: flat values} typed by `schema` ({name: (shape, "int64" |
    "float32")}); every schema feature must be given."""
    return encode_example({name: (np.ravel(features[name]), dtype)
                           for name, (_, dtype) in schema.items()})


# ---------------------------------------------------------------------------------------------
# Files.
def files_for(num_records: int, num_files: int) -> int:
    """The number of files `write_records` splits `num_records` into: `num_files`, but never
    an empty file."""
    if num_files < 1:
        raise ValueError(f"The number of feature files must be positive; got {num_files}.")
    return max(1, min(num_files, num_records))


def shard_paths(path: str, num_files: int) -> list[str]:
    """`path` itself for one file; else `<root>-00000-of-0000N<ext>` ... for N files."""
    if num_files == 1:
        return [path]
    root, ext = os.path.splitext(path)
    return [f"{root}-{i:05d}-of-{num_files:05d}{ext}" for i in range(num_files)]


class SidecarError(ValueError):
    """A TFRecord's JSON sidecar is malformed or lacks a field; the message names the file."""


def read_sidecar(path: str, required=()) -> dict | None:
    """The JSON sidecar of the TFRecord `path`, or None when it has none. A sidecar that is not
    a JSON object, or lacks one of the `required` counts (non-negative integers), raises
    `SidecarError` naming the file."""
    sidecar = F.sidecar_path(path)
    if not gfile().exists(sidecar):
        return None
    with gfile().GFile(sidecar) as f:
        text = f.read()
    try:
        meta = json.loads(text)
    except ValueError as e:
        raise SidecarError(f"{sidecar}, the sidecar of {path}, is not valid JSON ({e}). "
                           "Regenerate the file, or remove the sidecar to have the records "
                           "read without it.") from None
    if not isinstance(meta, dict):
        raise SidecarError(f"{sidecar}, the sidecar of {path}, is not a JSON object. "
                           "Regenerate the file, or remove the sidecar.")
    for key in required:
        value = meta.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            what = "lacks" if key not in meta else f"has {value!r} for"
            raise SidecarError(f"{sidecar}, the sidecar of {path}, {what} {key!r} (a count). "
                               "Regenerate the file, or remove the sidecar to have the "
                               "records read without it.")
    return meta


def read_cached(path: str, digest: str, num_files: int = 1) -> dict | None:
    """The split's sidecar when every file `write_records` would write exists with sidecar
    `digest` (made from the same inputs and settings); else None."""
    metas = []
    for shard in shard_paths(path, num_files):
        meta = read_sidecar(shard) if gfile().exists(shard) else None
        if meta is None or meta.get("digest") != digest:
            return None
        metas.append(meta)
    return dict(metas[0], num_examples=sum(m["num_examples"] for m in metas),
                files=shard_paths(path, num_files))


def write_records(records, path: str, meta: dict, num_files: int = 1) -> list[str]:
    """Serialized examples to TFRecords, each with a JSON sidecar (`meta`, with the file's own
    `num_examples`), atomically; returns the paths. With `num_files` > 1 the records are split
    into that many consecutive blocks (`shard_paths`), so several input pipelines (workers, TPU
    hosts) can read a split: the input pipeline deals whole files to its shards."""
    records = list(records)
    paths = shard_paths(path, num_files)
    bounds = np.linspace(0, len(records), len(paths) + 1).round().astype(int)
    for i, shard in enumerate(paths):
        block = records[bounds[i]:bounds[i + 1]]
        shard_meta = meta if len(paths) == 1 else dict(
            meta, num_examples=len(block), file_index=i, num_files=len(paths),
            split_examples=meta["num_examples"])
        write_file(block, shard, shard_meta)
    return paths


def write_file(records, path: str, meta: dict) -> None:
    """`records` to the TFRecord `path` and `meta` to its sidecar, both written under temporary
    names of this writer and renamed together (`albert_tf.paths.atomic_files`; the sidecar
    last), so a reader never sees half a file and workers that write the same file into a
    shared directory at once never write into one another's."""
    if "://" in path:
        gfile().makedirs(path.rsplit("/", 1)[0])
    else:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with atomic_files([(path, "wb"), (F.sidecar_path(path), "w")], durable=False) as (
            file, sidecar):
        framer = _RecordFramer(file)
        for record in records:
            framer.write(record)
        json.dump(meta, sidecar, indent=2)


def remove_temporaries(path: str) -> list[str]:
    """Removes what killed writers left of `path` (`temporary_name`s); call it only while
    holding the output's lock (`albert_tf.ownership`), when no live writer can own them.
    Returns the removed paths."""
    remote = gfile() if "://" in path else None
    head, name = (path.rsplit("/", 1) if remote else os.path.split(os.path.abspath(path)))
    prefix = f".{name}.tmp-"
    names = remote.listdir(head) if remote else (os.listdir(head) if os.path.isdir(head) else [])
    removed = []
    for entry in names:
        entry = entry.rstrip("/")
        if entry.startswith(prefix):
            leftover = f"{head}/{entry}" if remote else os.path.join(head, entry)
            (remote.remove if remote else os.remove)(leftover)
            removed.append(leftover)
    return removed
