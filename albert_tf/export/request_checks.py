"""The inputs of a serving module's signatures and their checks: every request is validated
before the model runs, and a bad one gets one error (an InvalidArgumentError, whose text TF
Serving returns to the client) naming the input, the rows and the rule
(`albert_tf.export.serving` lists the rules). Also the token features a request carries as
serialized `tf.Example`s (`tokens_of_examples`)."""

from __future__ import annotations

import tensorflow as tf

from albert_tf import features as F

TEXT, TEXT_B, EXAMPLES = "text", "text_b", "examples"


def _string_spec(name):
    return tf.TensorSpec([None], tf.string, name=name)


def _token_spec(name):
    return tf.TensorSpec([None, None], tf.int32, name=name)


class _Untracked:
    """Holds an object out of `tf.Module` tracking (a plain Python object is not traversed)."""

    def __init__(self, value):
        self.value = value


def _tf_variable(variable):
    value = getattr(variable, "value", variable)  # keras.Variable -> its tf.Variable
    if not isinstance(value, tf.Variable):
        raise TypeError(f"{variable.path if hasattr(variable, 'path') else variable} is not "
                        "backed by a tf.Variable")
    return value


# ---------------------------------------------------------------------------------------------
# Request validation. Each rule is an assertion (an InvalidArgumentError, whose text TF Serving
# returns to the client) naming the input, the offending rows and the rule; the rules of a
# request run one after the other, so a request that breaks several gets the first one's error,
# and the model runs only on a request that breaks none.
def _in_order(checks):
    """The assertions made by `checks` (functions of no arguments, each returning an assertion
    op or None), each made to run after the one before it passed. Returns the last one."""
    last = None
    for make in checks:
        with tf.control_dependencies([] if last is None else [last]):
            op = make()
            last = last if op is None else op
    return last


def _after(checks, tensors):
    """`tensors` (a list; None entries kept) once `checks` (see `_in_order`) have passed."""
    last = _in_order(checks)
    with tf.control_dependencies([] if last is None else [last]):
        return [None if t is None else tf.identity(t) for t in tensors]


def _refuse_rows(bad, subject, rule):
    """An assertion that no entry of `bad` (bool [rows]) is true; the error reads
    "<subject> [i j ...]: <rule>" with the offending rows, 0-based."""
    rows = tf.cast(tf.where(bad)[:, 0], tf.int32)
    return tf.debugging.Assert(tf.logical_not(tf.reduce_any(bad)), [tf.strings.format(
        f"{subject} {{}}: {rule}", rows, summarize=10)])


def _runtime_rank(tensor):
    """The rank of `tensor` as fed, read from values at run time. A signature's placeholder has
    the rank of its spec, so TensorFlow folds `tf.rank` (and the size of `tf.shape`) to that
    rank in the graph, while TF Serving, and a loaded SavedModel's signature, feed a tensor of
    any shape: the shape vector passes through SerializeTensor/ParseTensor, whose output has no
    static shape, so its size is computed from what was fed."""
    return tf.size(tf.io.parse_tensor(tf.io.serialize_tensor(tf.shape(tensor)), tf.int32))


def _refuse_rank(tensor, name, rank):
    """An assertion that the string input `name` has rank `rank` (1: a [batch] of texts or
    serialized examples; 2: [batch, n]); the error reads "text must be a 1-D batch of strings
    (shape [batch]); got shape [2,2]". Without it a [2, 2] text failed inside StringSplit
    ("input must be a vector, got shape: [2,2]"), naming no input."""
    layout = "[batch]" if rank == 1 else "[batch, " + ", ".join("n" * (rank - 1)) + "]"
    shape = tf.strings.reduce_join(tf.strings.as_string(tf.shape(tensor)), separator=",")
    return tf.debugging.Assert(tf.equal(_runtime_rank(tensor), rank), [tf.strings.join([
        f"{name} must be a {rank}-D batch of strings (shape {layout}); got shape [", shape,
        "]"])])


def _refuse_empty(batch_size, what):
    """An assertion that the request holds at least one row (`what`: "texts", "examples"...)."""
    return tf.debugging.Assert(batch_size > 0, [f"the request holds no {what}: send one or more"])


def _token_checks(config, ids, mask, segments, subject="row"):
    """The rules of token features (dense [rows, length], int32 or int64, checked in the dtype
    they came in, before any cast: an int64 id 2**32 + 10 is refused, not served as 10), as
    `_in_order` checks: 0 <= input_ids < vocab_size, 0 <= segment_ids < type_vocab_size, and
    input_mask 1 on the row's first tokens and 0 after them (values 0 or 1, at least one 1, no 1
    after a 0), as every packer writes it: the model attends to the tokens of mask 1, so a mask
    of other values, all zeros or with holes would be answered, wrongly."""
    def refuse(bad, rule):
        return lambda: _refuse_rows(tf.reduce_any(bad, axis=1), subject, rule)

    ones = tf.reduce_sum(mask, axis=1, keepdims=True)  # read only once the values are 0 or 1
    positions = tf.range(tf.shape(mask, out_type=mask.dtype)[1])
    prefix = tf.cast(positions[tf.newaxis, :] < ones, mask.dtype)
    return [
        refuse(ids < 0, "input_ids must be >= 0"),
        refuse(ids >= config.vocab_size, f"input_ids must be < vocab_size={config.vocab_size}"),
        refuse(segments < 0, "segment_ids must be >= 0"),
        refuse(segments >= config.type_vocab_size,
               f"segment_ids must be < type_vocab_size={config.type_vocab_size}"),
        refuse(tf.logical_and(tf.not_equal(mask, 0), tf.not_equal(mask, 1)),
               "input_mask values must be 0 or 1"),
        lambda: _refuse_rows(ones[:, 0] < 1, subject,
                             "input_mask has no 1: a row needs at least one token"),
        refuse(tf.not_equal(mask, prefix), "input_mask must be 1s then 0s: 1 on the tokens of "
               "the row from position 0, 0 on the padding after them, no 1 after a 0"),
    ]


def checked_tokens(cfg, features, subject="row"):
    """`features` behind the checks of a token request to the model of `cfg`: clear errors
    for token inputs the model cannot take (instead of a gather error or a wrong answer): an
    empty request, shapes, the length limit and `_token_checks`' rules, in that order;
    `subject` names a row in the errors."""
    ids, mask, seg = (features[F.INPUT_IDS], features[F.INPUT_MASK],
                      features[F.SEGMENT_IDS])
    length = tf.shape(ids)[1]
    checks = [
        lambda: _refuse_empty(tf.shape(ids)[0], "rows"),
        lambda: tf.debugging.assert_equal(tf.shape(ids), tf.shape(mask), message=(
            "input_mask must have the shape of input_ids")),
        lambda: tf.debugging.assert_equal(tf.shape(ids), tf.shape(seg), message=(
            "segment_ids must have the shape of input_ids")),
        lambda: tf.debugging.assert_less_equal(length, cfg.max_position_embeddings, message=(
            f"sequence length exceeds max_position_embeddings="
            f"{cfg.max_position_embeddings} of the model")),
        *_token_checks(cfg, ids, mask, seg, subject),
    ]
    return dict(zip(F.BACKBONE_INPUTS, _after(checks, [features[name] for name in
                                                       F.BACKBONE_INPUTS])))


def tokens_of_examples(serialized, config, tokens_from_text):
    """Token features of serialized tf.Examples (`AlbertServingModule.tokens_from_examples`):
    the official int64 features `input_ids`, `input_mask`, `segment_ids` (any length, padded
    per batch), or raw text in a bytes feature `text` (and `text_b` for a pair), tokenized and
    packed by `tokens_from_text(text, text_b)` as the text signatures do; the examples of one
    request carry one kind or the other.

    Refused, each with an error naming the serialized examples (0-based) and the rule: an
    empty request; an example with neither kind (random bytes that parse as a tf.Example,
    an Example of other features; bytes that do not parse at all get the parser's error,
    "Could not parse example input") or both; a request mixing the kinds; `text` with
    other than exactly one value, `text_b` with more than one, `text_b` in some text
    examples of a request and not in others (each would be packed otherwise than alone);
    token features of different lengths, and the token rules of `serve_tokens`, checked on
    the int64 values before they are cast to int32 (`_token_checks`)."""
    spec = {name: tf.io.RaggedFeature(tf.int64) for name in F.BACKBONE_INPUTS}
    spec.update({TEXT: tf.io.RaggedFeature(tf.string), TEXT_B: tf.io.RaggedFeature(tf.string)})
    parsed = tf.io.parse_example(serialized, spec)
    count = {name: parsed[name].row_lengths() for name in spec}
    has_text = (count[TEXT] > 0) | (count[TEXT_B] > 0)
    has_tokens = (count[F.INPUT_IDS] > 0) | (count[F.INPUT_MASK] > 0) | (
        count[F.SEGMENT_IDS] > 0)
    has_b = count[TEXT_B] > 0
    example = "serialized example"
    checks = [
        lambda: _refuse_empty(tf.size(serialized), "examples"),
        lambda: _refuse_rows(~has_text & ~has_tokens, example, (
            "not a tf.Example with a bytes feature text (and text_b) or the int64 features "
            "input_ids, input_mask, segment_ids")),
        lambda: _refuse_rows(has_text & has_tokens, example, (
            "carries both text and token features; an example carries one or the other")),
        lambda: tf.debugging.Assert(
            tf.equal(tf.reduce_all(has_text), tf.reduce_any(has_text)),
            ["the examples of a request must all carry text or all carry token features"]),
        lambda: _refuse_rows(has_text & tf.not_equal(count[TEXT], 1), example, (
            "its feature text must hold exactly one string")),
        lambda: _refuse_rows(count[TEXT_B] > 1, example, (
            "its feature text_b must hold at most one string")),
        lambda: _refuse_rows(has_text & ~has_b & tf.reduce_any(has_b), example, (
            "has no feature text_b while other examples of the request have one; the "
            "text examples of a request must all carry text_b or none")),
        *(lambda name=name: _refuse_rows(
            tf.not_equal(count[name], count[F.INPUT_IDS]), example,
            f"its {name} must have as many values as its input_ids")
          for name in (F.INPUT_MASK, F.SEGMENT_IDS)),
    ]

    def from_tokens():
        tokens = [parsed[name].to_tensor(0) for name in F.BACKBONE_INPUTS]  # int64
        tokens = _after(_token_checks(config, *tokens, example), tokens)
        return {name: tf.cast(t, tf.int32) for name, t in zip(F.BACKBONE_INPUTS, tokens)}

    def from_text():
        text = parsed[TEXT].to_tensor("")[:, 0]
        text_b = parsed[TEXT_B].to_tensor("", shape=[None, 1])[:, 0]
        return tf.cond(tf.reduce_any(parsed[TEXT_B].row_lengths() > 0),
                       lambda: tokens_from_text(text, text_b),
                       lambda: tokens_from_text(text, None))

    with tf.control_dependencies([_in_order(checks)]):
        return tf.cond(tf.reduce_any(has_text), from_text, from_tokens)
