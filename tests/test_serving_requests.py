"""The exported signatures validate what they are sent: a bad request gets one clear error (an
InvalidArgumentError naming the input, the rows and the rule, which TF Serving returns to the
client as the error text), never an answer; valid requests answer bit for bit as the Keras
model. Findings of the hostile review of albert_tf/export/serving.py, each a table row below:
(1) int64 ids and segment ids checked before they are cast to int32 (2**32 + 10 is not 10);
(2) input_mask values 0 or 1, 1s then 0s, at least one 1; (3) a tf.Example's text and text_b of
one value; (4) empty requests and garbage tf.Examples."""

import re
from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401 - registers the SentencePiece ops the SavedModels use

from albert_tf.models.backbone import set_remove_padding
from albert_tf.packing import pack_ids, pad_features
from albert_tf.records import encode_example
from albert_tf.tasks import race
from albert_tf.tasks.squad import AlbertSpanModel
from albert_tf.tokenization import Tokenizer
from conftest import EXPORT_MAX_SEQ as MAX_SEQ, export_config, randomize
from albert_tf.export.saved_model import export_saved_model, host_copy
from albert_tf.export.request_checks import _after, _token_checks

VOCAB, TYPES = 8000, 3  # export_config()'s vocab_size and type_vocab_size
RACE_SEQ = 40


def _example(**features) -> bytes:
    """A serialized tf.Example: `text`/`text_b` as bytes features (a str is one value, a list
    any number), every other feature as int64 values."""
    typed = {}
    for name, value in features.items():
        values = [value] if isinstance(value, (str, bytes)) else list(value)
        if name.startswith("text"):
            typed[name] = ([v.encode() if isinstance(v, str) else v for v in values], "bytes")
        else:
            typed[name] = ([int(v) for v in values], "int64")
    return encode_example(typed)


def _tokens(ids=(2, 50, 60, 3), mask=(1, 1, 1, 1), segments=(0, 0, 1, 1)) -> bytes:
    return _example(input_ids=ids, input_mask=mask, segment_ids=segments)


GOOD = _tokens()


def _int32(rows):
    return tf.constant(rows, tf.int32)


def _token_request(ids, mask, segments):
    return {"input_ids": _int32(ids), "input_mask": _int32(mask), "segment_ids": _int32(segments)}


# ---------------------------------------------------------------------------------------------
# The token rules alone (fast: no export), on int32 and on int64 as a tf.Example brings them.
TOKEN_RULES = [
    # (id, ids, mask, segments, error fragment or None for a valid request)
    ("valid", [[2, 9, 3, 0], [2, 3, 0, 0]], [[1, 1, 1, 0], [1, 1, 0, 0]], [[0, 0, 1, 0]] * 2,
     None),
    ("valid_full", [[2, 9, 3]], [[1, 1, 1]], [[0, 1, 2]], None),
    ("id_negative", [[2, -1, 3]], [[1, 1, 1]], [[0, 0, 0]], "row [0]: input_ids must be >= 0"),
    ("id_vocab", [[2, 9, 3], [2, VOCAB, 3]], [[1, 1, 1]] * 2, [[0, 0, 0]] * 2,
     f"row [1]: input_ids must be < vocab_size={VOCAB}"),
    ("id_on_padding", [[2, 3, VOCAB]], [[1, 1, 0]], [[0, 0, 0]],
     f"row [0]: input_ids must be < vocab_size={VOCAB}"),
    ("segment_negative", [[2, 9, 3]], [[1, 1, 1]], [[0, -1, 0]],
     "row [0]: segment_ids must be >= 0"),
    ("segment_types", [[2, 9, 3]], [[1, 1, 1]], [[0, TYPES, 0]],
     f"row [0]: segment_ids must be < type_vocab_size={TYPES}"),
    ("mask_2", [[2, 9, 3]] * 3, [[1, 1, 1], [1, 2, 1], [1, 1, 1]], [[0, 0, 0]] * 3,
     "row [1]: input_mask values must be 0 or 1"),
    ("mask_negative", [[2, 9, 3]], [[1, 1, -1]], [[0, 0, 0]],
     "row [0]: input_mask values must be 0 or 1"),
    ("mask_zeros", [[2, 9, 3]] * 2, [[1, 1, 1], [0, 0, 0]], [[0, 0, 0]] * 2,
     "row [1]: input_mask has no 1"),
    ("mask_hole", [[2, 9, 3]] * 3, [[1, 0, 1], [1, 1, 0], [0, 1, 1]], [[0, 0, 0]] * 3,
     "row [0 2]: input_mask must be 1s then 0s"),
    ("no_tokens", np.zeros([2, 0]), np.zeros([2, 0]), np.zeros([2, 0]),
     "row [0 1]: input_mask has no 1"),
    # a row breaking several rules gets the first rule's error, always
    ("first_rule_wins", [[2, VOCAB, 3]], [[0, 2, 1]], [[0, 9, 0]],
     f"row [0]: input_ids must be < vocab_size={VOCAB}"),
]


@pytest.mark.parametrize("dtype", [tf.int32, tf.int64], ids=["int32", "int64"])
@pytest.mark.parametrize("ids,mask,segments,error", [row[1:] for row in TOKEN_RULES],
                         ids=[row[0] for row in TOKEN_RULES])
def test_token_rules(ids, mask, segments, error, dtype):
    config = SimpleNamespace(vocab_size=VOCAB, type_vocab_size=TYPES)
    inputs = [tf.constant(np.asarray(t), dtype) for t in (ids, mask, segments)]
    checked = tf.function(lambda *t: _after(_token_checks(config, *t), list(t)),
                          autograph=False)
    if error is None:
        for got, sent in zip(checked(*inputs), inputs):
            np.testing.assert_array_equal(got.numpy(), sent.numpy())
    else:
        with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(error)):
            checked(*inputs)


def test_int64_ids_are_checked_before_any_cast():
    """2**32 + 10 as int64 is refused; cast to int32 first it would have passed as 10."""
    config = SimpleNamespace(vocab_size=VOCAB, type_vocab_size=TYPES)
    big = [[2, 2 ** 32 + 10, 3]]
    assert tf.cast(tf.constant(big, tf.int64), tf.int32).numpy().tolist() == [[2, 10, 3]]
    checked = tf.function(lambda *t: _after(_token_checks(config, *t), list(t)),
                          autograph=False)
    for ids, segments, error in ((big, [[0, 0, 0]], "input_ids must be < vocab_size"),
                                 ([[2, 9, 3]], [[0, 2 ** 32, 0]],
                                  "segment_ids must be < type_vocab_size")):
        with pytest.raises(tf.errors.InvalidArgumentError, match=error):
            checked(tf.constant(ids, tf.int64), tf.constant([[1, 1, 1]], tf.int64),
                    tf.constant(segments, tf.int64))


# ---------------------------------------------------------------------------------------------
# Exported models.
@pytest.fixture(scope="module")
def task_exports(tmp_path_factory, sample_vocab):
    """{"squad": (model, loaded), "race": (model, loaded)}: a SQuAD span model and a RACE model
    with random weights, exported."""
    base = tmp_path_factory.mktemp("task_exports")
    squad = AlbertSpanModel(export_config())
    randomize(squad, seed=11)
    multiple_choice = race.AlbertMultipleChoice(export_config())
    randomize(multiple_choice, seed=5)
    paths = {
        "squad": export_saved_model(squad, str(base / "squad"), sample_vocab,
                                    max_seq_length=MAX_SEQ,
                                    options={"doc_stride": 12, "max_query_length": 10}),
        "race": export_saved_model(multiple_choice, str(base / "race"), sample_vocab,
                                   max_seq_length=RACE_SEQ, options={"max_qa_length": 12})}
    return {"squad": (squad, tf.saved_model.load(paths["squad"])),
            "race": (multiple_choice, tf.saved_model.load(paths["race"]))}


def _signature(exported, task_exports, kind, name):
    """Signature `name` of the exported model of `kind` (`exported`'s or `task_exports`')."""
    loaded = task_exports[kind][1] if kind in task_exports else exported[kind][2]
    return loaded.signatures[name]


def _strings(values):
    return tf.constant(values, tf.string)


# (id, model kind, signature, inputs, error fragment): every signature of every model kind.
EMPTY = [
    ("classifier", "serving_default", lambda: {"text": _strings([])}, "texts"),
    ("classifier", "serve_text_pair", lambda: {"text": _strings([]), "text_b": _strings([])},
     "texts"),
    ("classifier", "serve_tokens", lambda: _token_request(np.zeros([0, 4]), np.zeros([0, 4]),
                                                          np.zeros([0, 4])), "rows"),
    ("classifier", "serve_examples", lambda: {"examples": _strings([])}, "examples"),
    ("classifier", "classify", lambda: {"inputs": _strings([])}, "examples"),
    ("regressor", "regress", lambda: {"inputs": _strings([])}, "examples"),
    ("pretrainer", "serving_default", lambda: {"text": _strings([])}, "texts"),
    ("pretrainer", "fill_mask", lambda: {"text": _strings([])}, "texts"),
    ("squad", "serving_default", lambda: {"question": _strings([]), "context": _strings([])},
     "questions"),
    ("squad", "serve_tokens", lambda: _token_request(np.zeros([0, 4]), np.zeros([0, 4]),
                                                     np.zeros([0, 4])), "rows"),
    ("race", "serving_default", lambda: {"article": _strings([]), "question": _strings([]),
                                         "options": tf.zeros([0, 4], tf.string)}, "articles"),
    ("race", "serve_tokens", lambda: {name: tf.zeros([0, 4, 5], tf.int32) for name in
                                      ("input_ids", "input_mask", "segment_ids")}, "rows"),
]


@pytest.mark.slow
@pytest.mark.parametrize("kind,name,inputs,what", EMPTY,
                         ids=[f"{kind}-{name}" for kind, name, *_ in EMPTY])
def test_an_empty_request_is_refused_by_every_signature(exported, task_exports, kind, name,
                                                         inputs, what):
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=re.escape(f"the request holds no {what}")):
        _signature(exported, task_exports, kind, name)(**inputs())


# Strings of another rank: TF Serving (and a loaded signature) feed a tensor of any shape.
STRING_SIGNATURES = {
    "classifier": ["classify", "official_serving_default", "serve_examples", "serve_text_pair",
                   "serving_default"],
    "regressor": ["official_serving_default", "regress", "serve_examples", "serve_text_pair",
                  "serving_default"],
    "pretrainer": ["fill_mask", "serve_examples", "serve_text_pair", "serving_default"],
    "squad": ["serving_default"], "race": ["serving_default"]}


def _of_rank(rank, words=("a b", "c", "d", "e")):
    """A string tensor of `rank` (rank 1: 1 row; rank 2: 1 row of the 4 RACE options; more:
    2 x ... x 2) and its shape as the error prints it."""
    if rank == 0:
        return tf.constant(words[0]), "[]"
    shape = [1, 4] if rank == 2 else [2] * rank if rank > 2 else [1]
    value = tf.reshape(tf.constant((list(words) * 4)[:int(np.prod(shape))]), shape)
    return value, "[" + ",".join(map(str, shape)) + "]"


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(STRING_SIGNATURES))
def test_strings_of_another_rank_are_refused_naming_the_input(exported, task_exports, kind):
    """Every signature that takes strings refuses an input of another rank (a [2, 2] text, a
    scalar where a batch belongs, RACE options of rank 1 or 3), the error naming that input and
    the shape it got, the other inputs valid; before, a [2, 2] text failed inside StringSplit
    ("input must be a vector, got shape: [2,2]"), naming no input."""
    loaded = task_exports[kind][1] if kind in task_exports else exported[kind][2]
    checked, failed = [], []
    for name, fn in sorted(loaded.signatures.items()):
        specs = fn.structured_input_signature[1]
        if any(spec.dtype != tf.string for spec in specs.values()):
            continue
        checked.append(name)
        valid = {key: _of_rank(spec.shape.rank)[0] for key, spec in specs.items()}
        for key, spec in sorted(specs.items()):
            rank = spec.shape.rank
            layout = "[batch]" if rank == 1 else "[batch, n]"
            for bad_rank in (rank - 1, rank + 1):
                value, shape = _of_rank(bad_rank)
                error = (f"assertion failed: [{key} must be a {rank}-D batch of strings (shape "
                         f"{layout}); got shape {shape}]")
                try:
                    fn(**dict(valid, **{key: value}))
                except tf.errors.InvalidArgumentError as e:
                    if error not in e.message.splitlines():
                        failed.append((name, key, shape, e.message[-300:]))
                else:
                    failed.append((name, key, shape, "answered"))
    assert checked == STRING_SIGNATURES[kind]
    assert not failed, failed


# tf.Example requests: (id, examples, error fragment). Each is sent to serve_examples and
# classify (classifier) and regress (regressor).
BAD_EXAMPLES = [
    # (1) int64 values checked before the cast to int32
    ("id_2**32+10", [_tokens(ids=[2, 2 ** 32 + 10, 50, 3])],
     f"serialized example [0]: input_ids must be < vocab_size={VOCAB}"),
    ("id_negative", [GOOD, _tokens(ids=[2, -5, 50, 3])],
     "serialized example [1]: input_ids must be >= 0"),
    ("id_vocab", [GOOD, GOOD, _tokens(ids=[2, VOCAB, 50, 3])],
     f"serialized example [2]: input_ids must be < vocab_size={VOCAB}"),
    ("segment_2**32", [_tokens(segments=[0, 2 ** 32, 0, 0])],
     f"serialized example [0]: segment_ids must be < type_vocab_size={TYPES}"),
    ("segment_negative", [_tokens(segments=[0, 0, -1, 0])],
     "serialized example [0]: segment_ids must be >= 0"),
    # (2) input_mask: 0 or 1, 1s then 0s, at least one 1
    ("mask_2**32+1", [_tokens(mask=[1, 2 ** 32 + 1, 1, 1])],
     "serialized example [0]: input_mask values must be 0 or 1"),
    ("mask_2", [GOOD, _tokens(mask=[1, 2, 1, 1]), GOOD, _tokens(mask=[1, 1, 1, 7])],
     "serialized example [1 3]: input_mask values must be 0 or 1"),
    ("mask_zeros", [_tokens(mask=[0, 0, 0, 0])], "serialized example [0]: input_mask has no 1"),
    ("mask_hole", [_tokens(mask=[1, 0, 1, 1])],
     "serialized example [0]: input_mask must be 1s then 0s"),
    ("mask_leading_0", [_tokens(mask=[0, 1, 1, 1])],
     "serialized example [0]: input_mask must be 1s then 0s"),
    ("lengths_differ", [_tokens(mask=[1, 1, 1])],
     "serialized example [0]: its input_mask must have as many values as its input_ids"),
    ("too_long", [_tokens(ids=[5] * 65, mask=[1] * 65, segments=[0] * 65)],
     "max_position_embeddings=64"),
    # (3) text and text_b: one value each
    ("two_texts", [_example(text="good"), _example(text=["good", "bad"])],
     "serialized example [1]: its feature text must hold exactly one string"),
    ("two_text_b", [_example(text="good", text_b=["x", "y"])],
     "serialized example [0]: its feature text_b must hold at most one string"),
    ("text_b_alone", [_example(text_b="x")],
     "serialized example [0]: its feature text must hold exactly one string"),
    ("text_b_in_some", [_example(text="a", text_b="b"), _example(text="c")],
     "serialized example [1]: has no feature text_b while other examples"),
    # (4) no examples, garbage, an Example of other features, both kinds
    ("empty_request", [], "the request holds no examples"),
    ("empty_bytes", [GOOD, b""],
     "serialized example [1]: not a tf.Example with a bytes feature text"),
    ("bytes_that_parse", [b"\x12\x03abc", GOOD],
     "serialized example [0]: not a tf.Example with a bytes feature text"),
    ("other_features", [_example(label=[1, 2])],
     "serialized example [0]: not a tf.Example with a bytes feature text"),
    ("no_values", [_example(text=[]), _tokens(ids=[], mask=[], segments=[])],
     "serialized example [0 1]: not a tf.Example"),
    ("garbage", [GOOD, b"hello world"], "Could not parse example input"),
    ("text_as_int", [encode_example({"text": ([1], "int64")})],
     "Key: text, Index: 0.  Data types don't match"),
    ("text_and_tokens", [_example(text="good", input_ids=[2, 3], input_mask=[1, 1],
                                  segment_ids=[0, 0])],
     "serialized example [0]: carries both text and token features"),
    ("kinds_mixed", [_example(text="good"), GOOD],
     "the examples of a request must all carry text or all carry token features"),
]
EXAMPLE_SIGNATURES = [("classifier", "serve_examples"), ("classifier", "classify"),
                      ("regressor", "regress")]


@pytest.mark.slow
@pytest.mark.parametrize("kind,name", EXAMPLE_SIGNATURES,
                         ids=[name for _, name in EXAMPLE_SIGNATURES])
def test_bad_example_requests_get_one_clear_error(exported, kind, name):
    signature = exported[kind][2].signatures[name]
    argument = "examples" if name == "serve_examples" else "inputs"
    failed = []
    for case, examples, error in BAD_EXAMPLES:
        try:
            signature(**{argument: _strings(examples)})
        except tf.errors.InvalidArgumentError as e:
            if error not in e.message or e.message.count("assertion failed") > 1:
                failed.append((case, e.message[:300]))
        else:
            failed.append((case, "answered"))
    assert not failed, failed


# serve_tokens requests (int32): (id, model kind, inputs, error fragment).
BAD_TOKENS = [
    ("mask_2", "classifier",
     lambda: _token_request([[2, 9, 3]] * 2, [[1, 1, 1], [1, 2, 1]], [[0, 0, 0]] * 2),
     "row [1]: input_mask values must be 0 or 1"),
    ("mask_zeros", "classifier", lambda: _token_request([[2, 9, 3]], [[0, 0, 0]], [[0, 0, 0]]),
     "row [0]: input_mask has no 1"),
    ("mask_hole", "classifier", lambda: _token_request([[2, 9, 3]], [[1, 0, 1]], [[0, 0, 0]]),
     "row [0]: input_mask must be 1s then 0s"),
    ("no_tokens", "classifier",
     lambda: _token_request(np.zeros([1, 0]), np.zeros([1, 0]), np.zeros([1, 0])),
     "row [0]: input_mask has no 1"),
    ("segment_types", "classifier",
     lambda: _token_request([[2, 9, 3]], [[1, 1, 1]], [[0, 3, 0]]),
     f"row [0]: segment_ids must be < type_vocab_size={TYPES}"),
    ("shapes_differ", "classifier",
     lambda: _token_request([[2, 9], [2, 3]], [[1, 1]] * 2, [[0, 0, 0]] * 2),
     "segment_ids must have the shape of input_ids"),
    ("pretrainer_id_vocab", "pretrainer",
     lambda: _token_request([[2, VOCAB, 3]], [[1, 1, 1]], [[0, 0, 0]]),
     f"row [0]: input_ids must be < vocab_size={VOCAB}"),
    ("squad_mask_2", "squad", lambda: _token_request([[2, 9, 3]], [[1, 1, 2]], [[0, 0, 1]]),
     "row [0]: input_mask values must be 0 or 1"),
    ("race_mask_hole", "race",
     lambda: {"input_ids": tf.fill([2, 4, 3], 9),
              "input_mask": tf.constant([[[1, 1, 0]] * 4,
                                         [[1, 1, 0]] * 2 + [[1, 0, 1], [1, 1, 1]]], tf.int32),
              "segment_ids": tf.zeros([2, 4, 3], tf.int32)},
     "row (question * 4 + option) [6]: input_mask must be 1s then 0s"),
]


@pytest.mark.slow
@pytest.mark.parametrize("kind,inputs,error", [row[1:] for row in BAD_TOKENS],
                         ids=[row[0] for row in BAD_TOKENS])
def test_bad_token_requests_get_one_clear_error(exported, task_exports, kind, inputs, error):
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(error)) as raised:
        _signature(exported, task_exports, kind, "serve_tokens")(**inputs())
    assert raised.value.message.count("assertion failed") <= 1


# ---------------------------------------------------------------------------------------------
# Valid requests: answered as before the checks, bit for bit as the Keras model.
TEXTS = ["The capital of France is [MASK].", "ALBERT shares parameters across layers", "",
         "Café naïve, 1,000 ``quotes''"]
PAIRS = ["Is it raining?", "a b c d e f g h i j k l m n o p q r s t u v w x y z " * 4, "", ""]


def _keras_logits(model):
    """The logits of the exported model's computation: a host copy running on real tokens only
    (`remove_padding`, as the export), traced as the export traces it (equal bit for bit)."""
    copy = host_copy(model)
    set_remove_padding(copy, True)
    return tf.function(lambda tokens: copy(tokens, training=False)["logits"], autograph=False)


def _packed(tokenizer, texts, texts_b=None):
    """Python's packing of the texts, padded to the longest row: {name: int32 [rows, length]}."""
    packed = [pack_ids(tokenizer.encode_with_masks(a), None if texts_b is None else
                       tokenizer.encode_with_masks(texts_b[i]), MAX_SEQ)
              for i, a in enumerate(texts)]
    length = max(len(ids) for ids, _ in packed)
    rows = [pad_features(ids, segments, length) for ids, segments in packed]
    return {name: tf.constant([row[name] for row in rows], tf.int32)
            for name in ("input_ids", "input_mask", "segment_ids")}


def _same(got, want, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.tobytes() == want.tobytes(), (
        what, np.abs(got - want).max() if got.shape == want.shape else (got.shape, want.shape))


@pytest.mark.grappler  # the optimized graphs, as TF Serving runs them
@pytest.mark.slow
def test_valid_requests_answer_bit_for_bit_as_the_keras_model(exported, sample_vocab):
    """Text, text pairs (empty strings among them: [CLS] [SEP]), token rows of different
    lengths, int64 tf.Examples of tokens and of text, through every classifier and regressor
    signature: the logits of the Keras model, bit for bit."""
    tokenizer = Tokenizer(sample_vocab)
    single, pair = _packed(tokenizer, TEXTS), _packed(tokenizer, TEXTS, PAIRS)
    assert single["input_mask"].numpy()[2].sum() == 2  # "" packs to [CLS] [SEP]
    lengths = [7, 4, 9, 2]
    rng = np.random.default_rng(3)
    rows = [{"input_ids": [2, *rng.integers(5, VOCAB, n - 2), 3], "input_mask": [1] * n,
             "segment_ids": [0] * (n // 2) + [1] * (n - n // 2)} for n in lengths]
    dense = {name: tf.constant([pad_features(r["input_ids"], r["segment_ids"], max(lengths))[
        name] for r in rows], tf.int32) for name in ("input_ids", "input_mask", "segment_ids")}
    token_examples = _strings([_example(**row) for row in rows])
    text_examples = _strings([_example(text=t) for t in TEXTS])
    pair_examples = _strings([_example(text=a, text_b=b) for a, b in zip(TEXTS, PAIRS)])
    for kind in ("classifier", "regressor"):
        model, _, loaded = exported[kind]
        logits = _keras_logits(model)
        want = {"single": logits(single).numpy(), "pair": logits(pair).numpy(),
                "tokens": logits(dense).numpy()}
        sig = loaded.signatures
        got = {
            ("single", "serving_default"): sig["serving_default"](text=_strings(TEXTS))["logits"],
            ("pair", "serve_text_pair"): sig["serve_text_pair"](
                text=_strings(TEXTS), text_b=_strings(PAIRS))["logits"],
            ("tokens", "serve_tokens"): sig["serve_tokens"](**dense)["logits"],
            ("tokens", "serve_examples"): sig["serve_examples"](examples=token_examples)[
                "logits"],
            ("single", "serve_examples"): sig["serve_examples"](examples=text_examples)[
                "logits"],
            ("pair", "serve_examples"): sig["serve_examples"](examples=pair_examples)["logits"],
        }
        for key, value in got.items():
            _same(value.numpy(), want[key[0]], (kind, key))
        for inputs, reference in ((token_examples, "tokens"), (text_examples, "single"),
                                  (pair_examples, "pair")):
            if kind == "classifier":
                scores = sig["classify"](inputs=inputs)["scores"].numpy()
                _same(scores, tf.nn.softmax(want[reference]).numpy(), (kind, reference))
            else:
                _same(sig["regress"](inputs=inputs)["outputs"].numpy(), want[reference][:, 0],
                      (kind, reference))


@pytest.mark.slow
def test_valid_task_requests_answer_bit_for_bit_as_the_keras_model(task_exports):
    """serve_tokens of the SQuAD and RACE exports on valid rows of different lengths: the
    Keras model's outputs, bit for bit; their text signatures answer empty strings (a SQuAD
    context "" in the last row, RACE options "")."""
    rng = np.random.default_rng(4)
    lengths = [9, 5, 12]
    ids = np.zeros([3, 12], np.int32)
    mask = np.zeros([3, 12], np.int32)
    for row, n in enumerate(lengths):
        ids[row, :n] = [2, *rng.integers(5, VOCAB, n - 2), 3]
        mask[row, :n] = 1
    tokens = {"input_ids": tf.constant(ids), "input_mask": tf.constant(mask),
              "segment_ids": tf.constant((np.arange(12) >= 4) * mask, tf.int32)}
    model, loaded = task_exports["squad"]
    copy = host_copy(model)
    set_remove_padding(copy, True)
    want = tf.function(lambda t: copy(t, training=False), autograph=False)(tokens)
    got = loaded.signatures["serve_tokens"](**tokens)
    for name in ("start_logits", "end_logits"):
        _same(got[name].numpy(), want[name].numpy(), ("squad", name))
    answer = loaded.signatures["serving_default"](
        question=_strings(["Who watched?", ""]),
        context=_strings(["Tom worked while Ben watched.", ""]))
    # an empty context in the last row: no answer (it read past the pieces' end before)
    assert answer["answer"].numpy()[1] == b"" and answer["answer_start"].numpy()[1] == -1
    model, loaded = task_exports["race"]
    choices = {name: tf.stack([t, tf.roll(t, 1, 0), tf.roll(t, 2, 0), t], axis=1)
               for name, t in tokens.items()}  # [3 questions, 4 options, 12]
    want = _keras_logits(model)(choices).numpy()
    _same(loaded.signatures["serve_tokens"](**choices)["logits"].numpy(), want, "race")
    out = loaded.signatures["serving_default"](
        article=_strings(["Tom worked while Ben watched."]), question=_strings(["Who _?"]),
        options=_strings([["Tom", "Ben", "", "Becky"]]))
    assert out["logits"].shape == (1, 4)
