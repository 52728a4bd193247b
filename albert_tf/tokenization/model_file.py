"""The SentencePiece model file as data: the digit-comma form a vocabulary records
(`DIGIT_COMMA_FORMS`: "official", google-research/albert's `encode_pieces`, unless the file
records XLNet's and Hugging Face's form in a field of its own, `DIGIT_COMMA_FIELD`), read and
written without SentencePiece's generated protocol buffer module (`_model_proto_messages`)."""

from __future__ import annotations

import functools


# How the part before the comma of a piece ending in digit + comma is re-encoded:
# "official": google-research/albert's `encode_pieces` (the "▁" SentencePiece puts before the
# part is kept); "huggingface": XLNet's and Hugging Face's `AlbertTokenizer` (that "▁" dropped
# where the piece did not start with one). The form is part of the vocabulary: a SentencePiece
# model file records a form other than the official one in a field of its own (an extension
# number of `ModelProto`, which SentencePiece, tensorflow-text and transformers ignore).
DIGIT_COMMA_FORMS = ("official", "huggingface")
DIGIT_COMMA_FIELD = 20561


def _is_digit_comma(piece: str) -> bool:
    # The official test: len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit().
    return len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit()


_USER_DEFINED = 4  # sentencepiece's ModelProto.SentencePiece.Type.USER_DEFINED


def digit_comma_form(model_proto: bytes, source: str = "the SentencePiece model") -> str:
    """The digit-comma form (`DIGIT_COMMA_FORMS`) the serialized SentencePiece model records:
    "official" where it records none."""
    from google.protobuf.message import DecodeError

    proto = _model_proto_messages()["ModelProto"]()
    try:
        proto.ParseFromString(model_proto)
    except DecodeError as e:
        raise ValueError(f"{source} is not a valid SentencePiece model ({e}): pass the .model "
                         "file the vocabulary was trained as.") from None
    if not proto.HasField("albert_tf_digit_comma"):
        return "official"
    form = proto.albert_tf_digit_comma
    if form not in DIGIT_COMMA_FORMS:
        raise ValueError(f"{source} records the digit-comma form {form!r}, which this version "
                         f"does not know (it knows {', '.join(DIGIT_COMMA_FORMS)}): upgrade "
                         "albert_tf, or use the vocabulary file the model was trained with.")
    return form


def with_digit_comma_form(model_proto: bytes, form: str) -> bytes:
    """The serialized SentencePiece model `model_proto` recording the digit-comma form `form`
    (pieces, scores and normalization unchanged; "official" records nothing, so an official
    model stays byte for byte the file it was)."""
    if form not in DIGIT_COMMA_FORMS:
        raise ValueError(f"unknown digit-comma form {form!r}: one of "
                         f"{', '.join(DIGIT_COMMA_FORMS)}.")
    if digit_comma_form(model_proto) == form:
        return model_proto
    model_proto = _without_field(model_proto, DIGIT_COMMA_FIELD)  # the other form's record
    if form == "official":
        return model_proto
    marker = _model_proto_messages()["ModelProto"](albert_tf_digit_comma=form)
    return model_proto + marker.SerializeToString()  # a field appended is a field set


def _without_field(message: bytes, number: int) -> bytes:
    """The serialized protocol buffer `message` without its top-level field `number`, every
    other field's bytes as they were (a parse and serialize would reorder them)."""
    def varint(i):
        value, shift = 0, 0
        while True:
            byte = message[i]
            value, shift, i = value | (byte & 0x7F) << shift, shift + 7, i + 1
            if not byte & 0x80:
                return value, i

    kept, i = bytearray(), 0
    while i < len(message):
        start = i
        key, i = varint(i)
        wire = key & 7
        if wire == 0:
            i = varint(i)[1]
        elif wire == 2:
            length, i = varint(i)
            i += length
        else:  # 1: 64-bit, 5: 32-bit (ModelProto has no groups)
            i += {1: 8, 5: 4}[wire]
        if key >> 3 != number:
            kept += message[start:i]
    return bytes(kept)


@functools.lru_cache(maxsize=None)
def _model_proto_messages() -> dict:
    """Message classes for SentencePiece's ModelProto with only the fields edited here (pieces:
    piece/score/type; normalizer_spec: name/precompiled_charsmap), every other field kept as an
    unknown field through parse and serialize (also read by `checkpoints.hf.tokenizer_json`).
    Built at run time in a private descriptor pool: sentencepiece 0.2.3's generated
    `sentencepiece_model_pb2` demands protobuf >= 7.36 at import, while the optional Beam group
    (`pip install .[beam]`) needs protobuf 6; the pinned 0.2.2's imports, but a user's
    environment may hold another version."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(
        name="albert_tf/sentencepiece_model_subset.proto", package="albert_tf_spm",
        syntax="proto2")

    def message(name, fields):
        m = file.message_type.add(name=name)
        for field_name, number, kind, label, type_name in fields:
            m.field.add(name=field_name, number=number, type=kind, label=label,
                        **({"type_name": type_name} if type_name else {}))

    optional, repeated = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    message("SentencePiece", [("piece", 1, F.TYPE_STRING, optional, None),
                              ("score", 2, F.TYPE_FLOAT, optional, None),
                              ("type", 3, F.TYPE_INT32, optional, None)])  # an enum on the wire
    message("NormalizerSpec", [("name", 1, F.TYPE_STRING, optional, None),
                               ("precompiled_charsmap", 2, F.TYPE_BYTES, optional, None)])
    message("ModelProto", [
        ("pieces", 1, F.TYPE_MESSAGE, repeated, ".albert_tf_spm.SentencePiece"),
        ("normalizer_spec", 3, F.TYPE_MESSAGE, optional, ".albert_tf_spm.NormalizerSpec"),
        ("albert_tf_digit_comma", DIGIT_COMMA_FIELD, F.TYPE_STRING, optional, None)])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {name: message_factory.GetMessageClass(
        pool.FindMessageTypeByName(f"albert_tf_spm.{name}"))
        for name in ("SentencePiece", "NormalizerSpec", "ModelProto")}
