"""`tf.train.Example` serialization without TensorFlow.

Data-generation workers build examples by the million; importing TensorFlow in each costs seconds
and hundreds of MB. The wire format is small and stable (tensorflow/core/example/example.proto):

    Example  { Features features = 1; }
    Features { map<string, Feature> feature = 1; }
    Feature  { oneof { BytesList bytes_list = 1; FloatList float_list = 2;
                       Int64List int64_list = 3; } }
    FloatList { repeated float value = 1 [packed = true]; }
    Int64List { repeated int64 value = 1 [packed = true]; }

`encode_example` writes map entries sorted by key, which is what
`tf.train.Example.SerializeToString(deterministic=True)` produces; the tests compare the bytes.
"""

from __future__ import annotations


import numpy as np


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
    return b"".join(small[v] if 0 <= v < 65536 else _varint(v) for v in values)


def _length_delimited(field: int, payload: bytes) -> bytes:
    return _varint((field << 3) | 2) + _varint(len(payload)) + payload


def _int64_feature(values) -> bytes:
    packed = _varints(int(v) for v in values)
    return _length_delimited(3, _length_delimited(1, packed))


def _float_feature(values) -> bytes:
    values = np.asarray(values, dtype="<f4")
    return _length_delimited(2, _length_delimited(1, values.tobytes()))


def encode_example(features: dict) -> bytes:
    """Serializes {name: (values, "int64" | "float32")} as a `tf.train.Example`."""
    entries = []
    for name in sorted(features):
        values, dtype = features[name]
        feature = _int64_feature(values) if dtype == "int64" else _float_feature(values)
        entry = _length_delimited(1, name.encode("utf-8")) + _length_delimited(2, feature)
        entries.append(_length_delimited(1, entry))
    return _length_delimited(1, b"".join(entries))


__all__ = ["encode_example"]
