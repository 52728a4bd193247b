"""SavedModel export for TF Serving: every signature equals the Keras model; in-graph
tokenization equals Python's on the bundled corpora; bad input; warmup requests; versions; the
op list of TF Serving 2.20; loading from C++ the way the server does."""

import json
import os
import re
import shutil
import sys

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401 - registers the SentencePiece ops the SavedModels use

from albert_tf import AlbertClassifier
from albert_tf.checkpoints import save_albert_tf
from albert_tf.checkpoints.conversion import convert, read_source
from albert_tf.packing import pack_ids, pad_features
from albert_tf.records import example_of
from albert_tf.tokenization import MASK_ID, SEP_ID, Tokenizer
from conftest import (EXPORT_MAX_SEQ as MAX_SEQ, GUTENBERG, ROOT, WIKITEXT,
                      assert_serves_tokens, assert_spread, export_config as _config,
                      random_batch, randomize as _randomize, run_command)
from albert_tf.data.text_io import expand_input_patterns, read_text_lines
from albert_tf.export.ops_check import UnsupportedOpError, check_saved_model_ops
from albert_tf.export.serving import OFFICIAL_SIGNATURE
from albert_tf.export.saved_model import (BATCHING_CONFIG, MODELS_CONFIG, WARMUP_FILE, WARMUP_TEXTS,
                                ExportError,
                                export_saved_model, load_for_export)

TOL = 1e-5
TEXTS = ["The capital of France is [MASK].", "ALBERT shares parameters across layers",
         "[MASK] [MASK] were here, said Alice", "Café naïve, 1,000 ``quotes''"]
PAIRS = ["Is it raining?", "a b c d e f g h i j k l m n o p q r s t u v w x y z " * 4,
         "", "Tom Sawyer [MASK] the fence."]


def read_batching_parameters(path: str) -> dict:
    """The integer fields of a batching_parameters file ({name: value})."""
    with open(path, encoding="utf-8") as f:
        return {m.group(1): int(m.group(2)) for m in re.finditer(
            r"^(\w+) \{ value: (\d+) \}", f.read(), re.M)}


def _tokens(batch):
    return {k: tf.constant(batch[k]) for k in ("input_ids", "input_mask", "segment_ids")}


def _with_masks(batch, positions):
    batch = dict(batch)
    ids = batch["input_ids"].copy()
    for row, cols in positions.items():
        ids[row, cols] = MASK_ID
    batch["input_ids"] = ids
    return batch


def _keras_reference(model, kind, tokens):
    """What every signature must return, computed with the Keras model."""
    ids = tokens["input_ids"].numpy()
    if kind == "pretrainer":
        counts = (ids == MASK_ID).sum(1)
        m = int(counts.max())
        positions = np.full((len(ids), m), -1, np.int32)
        for row in range(len(ids)):
            found = np.flatnonzero(ids[row] == MASK_ID)
            positions[row, :len(found)] = found
        out = model({**tokens, "masked_lm_positions": tf.constant(np.maximum(positions, 0))},
                    training=False)
        probs = tf.nn.softmax(out["mlm_logits"], -1).numpy()
        return {"pooled_output": out["pooled_output"].numpy(),
                "sequence_output": out["sequence_output"].numpy(),
                "mask_positions": positions, "probs": probs}
    logits = model(tokens, training=False)["logits"].numpy()
    return {"logits": logits}


def _check(kind, got, ref, top_k=4):
    # The rows are different inputs: their outputs must differ far more than the tolerance.
    compared = ref["pooled_output"] if kind == "pretrainer" else ref["logits"]
    if len(compared) > 1:
        assert_spread(compared.max(axis=0), compared.min(axis=0), TOL)
    if kind == "pretrainer":
        np.testing.assert_allclose(got["pooled_output"].numpy(), ref["pooled_output"], atol=TOL,
                                   rtol=0)
        # The export runs the encoder on real tokens only (remove_padding): equal there, 0 on
        # padding (the Keras model's values at padding are attention over the real tokens).
        real = got["input_mask"].numpy().astype(bool)
        sequence = got["sequence_output"].numpy()
        np.testing.assert_allclose(sequence[real], ref["sequence_output"][real], atol=TOL, rtol=0)
        assert (sequence[~real] == 0).all()
        np.testing.assert_array_equal(got["mask_positions"].numpy(), ref["mask_positions"])
        valid = ref["mask_positions"] >= 0
        assert valid.sum() >= 1
        ids = got["fill_mask_ids"].numpy()
        probs = got["fill_mask_probabilities"].numpy()
        expected_ids = np.argsort(-ref["probs"], axis=-1)[..., :top_k]
        for row, col in zip(*np.nonzero(valid)):
            np.testing.assert_array_equal(ids[row, col], expected_ids[row, col])
            np.testing.assert_allclose(probs[row, col], ref["probs"][row, col, ids[row, col]],
                                       atol=TOL, rtol=0)
        assert (ids[~valid] == -1).all() and (probs[~valid] == 0).all()
        assert (got["fill_mask_pieces"].numpy()[~valid] == b"").all()
    else:
        np.testing.assert_allclose(got["logits"].numpy(), ref["logits"], atol=TOL, rtol=0)
        if kind == "classifier":
            np.testing.assert_allclose(got["probabilities"].numpy(),
                                       tf.nn.softmax(ref["logits"]).numpy(), atol=TOL, rtol=0)
            np.testing.assert_array_equal(got["label"].numpy(), ref["logits"].argmax(-1))
        else:
            np.testing.assert_allclose(got["score"].numpy(), ref["logits"][:, 0], atol=TOL,
                                       rtol=0)


def _example(row):
    return example_of(row)


@pytest.mark.grappler  # as TF Serving and users run the graphs
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["pretrainer", "classifier", "regressor"])
def test_token_and_example_signatures_equal_the_keras_model(exported, kind):
    model, _, loaded = exported[kind]
    cfg = model.config
    # Two calls: different batch sizes and lengths; ids, masks and segment ids all differ.
    for batch_size, seq, seed in ((3, 11, 0), (5, 17, 1)):
        batch = random_batch(cfg, batch=batch_size, seq=seq, seed=seed)
        batch["segment_ids"][:, -2:] = 2  # the third token type, on padding too
        batch = _with_masks(batch, {0: [1, 3], 2: [2]})
        tokens = _tokens(batch)
        ref = _keras_reference(model, kind, tokens)
        got = loaded.signatures["serve_tokens"](**tokens)
        _check(kind, got, ref)
        examples = [_example({k: batch[k][i] for k in tokens}) for i in range(batch_size)]
        got = loaded.signatures["serve_examples"](examples=tf.constant(examples))
        _check(kind, got, ref)
        np.testing.assert_array_equal(got["input_ids"].numpy(), batch["input_ids"])
        if kind == "classifier":
            out = loaded.signatures["classify"](inputs=tf.constant(examples))
            assert out["classes"].numpy().tolist() == [[b"neg", b"neutral", b"pos"]] * batch_size
            np.testing.assert_allclose(out["scores"].numpy(),
                                       tf.nn.softmax(ref["logits"]).numpy(), atol=TOL, rtol=0)
        if kind == "regressor":
            out = loaded.signatures["regress"](inputs=tf.constant(examples))
            np.testing.assert_allclose(out["outputs"].numpy(), ref["logits"][:, 0], atol=TOL,
                                       rtol=0)


def _official_example(row, label, regression):
    """A serialized tf.Example exactly as the official run_classifier.py writes its records
    and an official serving client sends them (`file_based_convert_examples_to_features`):
    int64 input_ids, input_mask, segment_ids of max_seq_length values, label_ids (a float for
    STS-B) and is_real_example."""
    def ints(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))

    features = {"input_ids": ints(row["input_ids"]), "input_mask": ints(row["input_mask"]),
                "segment_ids": ints(row["segment_ids"]),
                "label_ids": (tf.train.Feature(float_list=tf.train.FloatList(value=[label]))
                              if regression else ints([label])),
                "is_real_example": ints([1])}
    return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["classifier", "regressor"])
def test_official_classifier_signature_answers_official_requests(exported, sample_vocab, kind):
    """`official_serving_default` is the official run_classifier export's contract: input
    `input` (serialized tf.Examples as the official runner writes them, padded to
    max_seq_length) -> `probabilities` (softmax of the Keras model's logits, 1e-5) and
    `predictions` (their argmax, int32); a regression head (STS-B): its logits and their
    values (float32), as official `create_model`."""
    model, _, loaded = exported[kind]
    tok = Tokenizer(sample_vocab)
    rows = [pad_features(*pack_ids(tok.encode(a), tok.encode(b) if i % 2 else None, MAX_SEQ),
                         MAX_SEQ) for i, (a, b) in enumerate(zip(TEXTS, PAIRS))]
    regression = kind == "regressor"
    examples = [_official_example(r, 0.5 if regression else 1, regression) for r in rows]
    signature = loaded.signatures[OFFICIAL_SIGNATURE]
    assert list(signature.structured_input_signature[1]) == ["input"]
    got = signature(input=tf.constant(examples))
    assert sorted(got) == ["predictions", "probabilities"]
    tokens = {k: tf.constant([r[k] for r in rows]) for k in ("input_ids", "input_mask",
                                                              "segment_ids")}
    logits = model(tokens, training=False)["logits"].numpy()
    assert_spread(logits.max(axis=0), logits.min(axis=0), TOL)
    if regression:
        np.testing.assert_allclose(got["probabilities"].numpy(), logits, atol=TOL, rtol=0)
        assert got["predictions"].dtype == tf.float32
        np.testing.assert_allclose(got["predictions"].numpy(), logits[:, 0], atol=TOL, rtol=0)
    else:
        np.testing.assert_allclose(got["probabilities"].numpy(),
                                   tf.nn.softmax(logits).numpy(), atol=TOL, rtol=0)
        assert got["predictions"].dtype == tf.int32
        np.testing.assert_array_equal(got["predictions"].numpy(), logits.argmax(-1))
        assert len(set(logits.argmax(-1))) > 1  # the rows do not all get one class


def _python_tokens(tok, texts, texts_b=None, max_seq=MAX_SEQ):
    packed = [pack_ids(tok.encode_with_masks(a), None if texts_b is None else
                       tok.encode_with_masks(b), max_seq)
              for a, b in zip(texts, texts_b if texts_b is not None else texts)]
    length = max(len(ids) for ids, _ in packed)
    rows = [pad_features(ids, seg, length) for ids, seg in packed]
    return {k: tf.constant([r[k] for r in rows], tf.int32)
            for k in ("input_ids", "input_mask", "segment_ids")}


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["pretrainer", "classifier", "regressor"])
def test_text_signatures_equal_python_tokenization_and_the_keras_model(exported, kind,
                                                                        sample_vocab):
    model, _, loaded = exported[kind]
    tok = Tokenizer(sample_vocab)
    for texts, texts_b in ((TEXTS, None), (TEXTS[:1], None), (TEXTS, PAIRS)):
        tokens = _python_tokens(tok, texts, texts_b)
        got = assert_serves_tokens(loaded, texts, texts_b, tokens)
        if kind != "pretrainer" or (tokens["input_ids"].numpy() == MASK_ID).any():
            _check(kind, got, _keras_reference(model, kind, tokens))
    # The long text_b is truncated to exactly max_seq_length, longest first, from the end.
    got = loaded.signatures["serve_text_pair"](text=tf.constant(TEXTS),
                                               text_b=tf.constant(PAIRS))
    assert got["input_ids"].shape[1] == MAX_SEQ
    assert got["input_mask"].numpy()[1].sum() == MAX_SEQ


@pytest.mark.slow
def test_in_graph_tokenization_equals_python_on_the_bundled_corpora(exported, sample_vocab):
    """The exported models' in-graph tokenizer (`InGraphTokenizer`, what serving_default runs
    before packing) on every line of the bundled novels and WikiText, whole (no truncation),
    against `Tokenizer.encode_with_masks`; and serving_default's packed input_ids on the first
    lines of each batch. Divergence classes: the SentencePiece Viterbi ties between
    tensorflow-text's copy and the Python package that tests/test_tokenization.py documents
    (same text, same score); nothing else is accepted."""
    _, _, loaded = exported["classifier"]
    tok = Tokenizer(sample_vocab)
    in_graph = tok.in_graph()
    lines = [line for path in expand_input_patterns([GUTENBERG, WIKITEXT])
             for line in read_text_lines(path) if line.strip()]
    lines.sort(key=len)  # batches of similar length: little padding
    fn = loaded.signatures["serving_default"]
    divergent, longest = [], 0
    for i in range(0, len(lines), 512):
        chunk = lines[i:i + 512]
        for line, row in zip(chunk, in_graph.encode_with_masks(tf.constant(chunk)).to_list()):
            expected = tok.encode_with_masks(line)
            longest = max(longest, len(expected))
            if row != expected:
                divergent.append((line, row, expected))
        got = fn(text=tf.constant(chunk[:8]))
        for line, row, m in zip(chunk, got["input_ids"].numpy(), got["input_mask"].numpy()):
            assert row[: m.sum()].tolist() == pack_ids(tok.encode_with_masks(line), None,
                                                        MAX_SEQ)[0] or line in {
                d[0] for d in divergent}, line
    for line, a, b in divergent:
        pa, pb = tok.ids_to_pieces(a), tok.ids_to_pieces(b)
        assert "".join(pa) == "".join(pb), line
        score = lambda ps: sum(tok.sp.GetScore(tok.sp.PieceToId(p)) for p in ps)  # noqa: E731
        assert score(pa) == pytest.approx(score(pb), abs=1e-4), line
    print(f"\n{len(lines)} lines tokenized whole in-graph (longest {longest} pieces); "
          f"{len(divergent)} differ, all by equal-score segmentation ties")
    assert len(lines) > 39000 and len(divergent) <= 0.001 * len(lines)
    assert longest > 4 * MAX_SEQ  # lines far past the export's max_seq_length were compared


@pytest.mark.slow
def test_bad_and_unusual_input(exported, sample_vocab):
    model, _, loaded = exported["pretrainer"]
    tok = Tokenizer(sample_vocab)
    fn = loaded.signatures["serving_default"]
    # Empty strings, far-too-long text, non-ASCII and invalid UTF-8: no crash, Python's ids.
    raw = [b"", ("word " * 5000).encode(), "日本語のテキスト, Ελληνικά ΣΟΦΟΣ".encode(),
           b"bad \xff\xfe bytes \xe2\x82 [MASK]"]
    got = fn(text=tf.constant(raw))
    ids, mask = got["input_ids"].numpy(), got["input_mask"].numpy()
    assert ids.shape == (4, MAX_SEQ) and mask[1].sum() == MAX_SEQ  # truncated, never longer
    for row, text in enumerate(raw):
        expected = pack_ids(tok.encode_with_masks(text), None, MAX_SEQ)[0]
        assert ids[row, : mask[row].sum()].tolist() == expected, text
    assert ids[0, :2].tolist() == [2, 3]  # empty text: [CLS] [SEP]
    assert got["mask_positions"].numpy()[3, 0] == mask[3].sum() - 2  # mask before the last [SEP]
    # Batch of one.
    assert fn(text=tf.constant(["one"]))["pooled_output"].shape == (1, 24)
    # Token inputs the model cannot take: a clear error naming the limit.
    tokens = {k: tf.zeros([2, 65], tf.int32) for k in ("input_ids", "input_mask", "segment_ids")}
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_position_embeddings=64"):
        loaded.signatures["serve_tokens"](**tokens)
    tokens = {k: tf.ones([2, 5], tf.int32) for k in ("input_ids", "input_mask")}
    with pytest.raises(tf.errors.InvalidArgumentError, match="segment_ids must have the shape"):
        loaded.signatures["serve_tokens"](**tokens, segment_ids=tf.ones([2, 4], tf.int32))
    with pytest.raises(tf.errors.InvalidArgumentError, match="input_ids must be < vocab_size=8000"):
        loaded.signatures["serve_tokens"](input_ids=tf.fill([1, 3], 8000),
                                          input_mask=tf.ones([1, 3], tf.int32),
                                          segment_ids=tf.zeros([1, 3], tf.int32))
    with pytest.raises(tf.errors.InvalidArgumentError, match="same batch size"):
        loaded.signatures["serve_text_pair"](text=tf.constant(["a", "b"]),
                                             text_b=tf.constant(["c"]))
    bad = _example({"input_ids": [2, 7, 3], "input_mask": [1, 1], "segment_ids": [0, 0, 0]})
    with pytest.raises(tf.errors.InvalidArgumentError, match="input_mask must have as many"):
        loaded.signatures["serve_examples"](examples=tf.constant([bad]))


@pytest.mark.slow
def test_warmup_requests_parse_and_replay(exported):
    from tensorflow_serving.apis import prediction_log_pb2

    for kind in ("pretrainer", "classifier", "regressor"):
        _, path, loaded = exported[kind]
        logs = [prediction_log_pb2.PredictionLog.FromString(r.numpy())
                for r in tf.data.TFRecordDataset(os.path.join(path, WARMUP_FILE))]
        seen = set()
        for log in logs:
            which = log.WhichOneof("log_type")
            if which == "predict_log":
                request = log.predict_log.request
                inputs = {k: tf.make_ndarray(v) for k, v in request.inputs.items()}
            else:
                request = getattr(log, which).request
                inputs = {"inputs": [e.SerializeToString()
                                     for e in request.input.example_list.examples]}
            assert request.model_spec.name == kind
            name = request.model_spec.signature_name
            seen.add(name)
            out = loaded.signatures[name](**{k: tf.constant(v) for k, v in inputs.items()})
            assert all(np.isfinite(v.numpy()).all() for v in out.values()
                       if v.dtype.is_floating)
            if name == "serve_tokens":  # the warmup tokens are the text requests' tokens
                text_out = loaded.signatures["serving_default"](
                    text=tf.constant(list(WARMUP_TEXTS)))
                np.testing.assert_array_equal(out["input_ids"].numpy(),
                                              text_out["input_ids"].numpy())
        assert seen == set(loaded.signatures), (kind, seen)


def test_versions_layout_and_refusals(exported, sample_vocab, tmp_path):
    model, path, loaded = exported["pretrainer"]
    base = os.path.dirname(path)
    assert os.path.basename(path) == "1"
    assert set(os.listdir(base)) == {"1", MODELS_CONFIG, BATCHING_CONFIG}
    with open(os.path.join(base, MODELS_CONFIG)) as f:
        config = f.read()
    assert 'name: "pretrainer"' in config and 'base_path: "/models/pretrainer"' in config
    with open(os.path.join(base, BATCHING_CONFIG)) as f:
        assert "pad_variable_length_inputs: false" in f.read()
    # the measured values (docs/serving.md "Serving under load"), none other
    assert read_batching_parameters(os.path.join(base, BATCHING_CONFIG)) == {
        "max_batch_size": 32, "batch_timeout_micros": 2000, "max_enqueued_batches": 16,
        "num_batch_threads": 2}
    # the refusals on a copy: the fixture's exports are shared with the other test worker
    base = str(tmp_path / "pretrainer")
    shutil.copytree(os.path.dirname(path), base)
    with pytest.raises(ExportError, match="Version 1 already exists"):
        export_saved_model(model, base, sample_vocab, version=1, max_seq_length=MAX_SEQ)
    with pytest.raises(ExportError, match="exceeds the model's max_position_embeddings=64"):
        export_saved_model(model, base, sample_vocab, max_seq_length=65)
    other_vocab = str(tmp_path / "small.model")
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(["some words here", "and more words there"] * 50),
        model_prefix=other_vocab[:-6], vocab_size=20, pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
        control_symbols="[CLS],[SEP],[MASK]", minloglevel=2)
    with pytest.raises(ExportError, match="has 20 pieces but the model's vocab_size is 8000"):
        export_saved_model(model, base, other_vocab, max_seq_length=MAX_SEQ)
    assert set(os.listdir(base)) == {"1", MODELS_CONFIG, BATCHING_CONFIG}  # nothing written
    fresh = tmp_path / "new_base" / "refused"
    with pytest.raises(ExportError, match="has 20 pieces"):
        export_saved_model(model, str(fresh), other_vocab, max_seq_length=MAX_SEQ)
    assert not os.path.exists(fresh.parent)  # no empty BASE/NAME left behind


def test_op_list_of_tf_serving_2_20(exported, tmp_path):
    """The export passes the TF 2.20 + tf-text 2.20 op list; a graph with an op newer than that
    (DecodeJxl, added in TF 2.21) is refused by name, and the export leaves nothing behind."""
    _, path, _ = exported["classifier"]
    used = check_saved_model_ops(path)
    assert {"SentencepieceTokenizeOp", "NormalizeUTF8", "ParseExampleV2",
            "BatchMatMulV2"} <= set(used)

    class Newer(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([], tf.string)], autograph=False)
        def decode(self, data):
            return {"image": tf.raw_ops.DecodeJxl(contents=data)}

    module = Newer()
    tf.saved_model.save(module, str(tmp_path / "newer"), signatures={"serving_default":
                                                                    module.decode})
    with pytest.raises(UnsupportedOpError, match=r"uses ops \['DecodeJxl'\].*TensorFlow 2.20.0"):
        check_saved_model_ops(str(tmp_path / "newer"))


def test_the_model_is_traced_once_and_every_signature_calls_it(exported):
    """The SavedModel holds one function with the encoder's matmuls (serve_tokens'), and each of
    the other signatures reaches it through a call, not a copy of the model of its own."""
    from tensorflow.core.protobuf import saved_model_pb2

    for kind, signatures in (("pretrainer", 5), ("classifier", 6)):
        _, path, loaded = exported[kind]
        assert len(loaded.signatures) == signatures
        proto = saved_model_pb2.SavedModel()
        with open(os.path.join(path, "saved_model.pb"), "rb") as f:
            proto.ParseFromString(f.read())
        library = {fn.signature.name: fn for fn in proto.meta_graphs[0].graph_def.library.function}
        with_model = [name for name, fn in library.items()
                      if any(node.op == "BatchMatMulV2" for node in fn.node_def)]
        assert len(with_model) == 1, (kind, with_model)

        def reaches(name, seen):
            if name in seen or name not in library:
                return False
            seen.add(name)
            return name == with_model[0] or any(
                reaches(attr.func.name, seen) for node in library[name].node_def
                for attr in node.attr.values() if attr.func.name)

        # The signatures' functions, as the object graph names them (root -> "signatures").
        nodes = proto.meta_graphs[0].object_graph_def.nodes
        (sig_node,) = [c.node_id for c in nodes[0].children if c.local_name == "signatures"]
        names = {c.local_name: nodes[c.node_id].bare_concrete_function.concrete_function_name
                 for c in nodes[sig_node].children}
        assert sorted(names) == sorted(loaded.signatures)
        for signature, name in names.items():
            assert reaches(name, set()), (kind, signature)


@pytest.mark.slow
def test_refused_export_leaves_no_version(exported, sample_vocab, tmp_path):
    model, _, _ = exported["regressor"]
    allowed = json.load(open(os.path.join(ROOT, "albert_tf", "export",
                                          "serving_ops_tf2.20.json")))
    del allowed["ops"]["BatchMatMulV2"]  # the attention's op
    path = tmp_path / "ops.json"
    path.write_text(json.dumps(allowed))
    base = tmp_path / "exports" / "regressor"
    with pytest.raises(UnsupportedOpError, match=r"\['BatchMatMulV2'\]"):
        export_saved_model(model, str(base), sample_vocab, max_seq_length=MAX_SEQ,
                           allowed_ops=str(path))
    assert not os.path.exists(base.parent)  # no version, no temporary or empty directory


@pytest.mark.slow
def test_loaded_from_cpp_the_way_tf_serving_does(exported, tmp_path, serving_loader):
    """LoadSavedModel(tag "serve") into a SavedModelBundle, tensor names from the signature_def,
    Session::Run, tensorflow-text ops loaded through TF_LoadLibrary: outputs equal Python's."""
    from albert_tf.export.cc_loader import run_loader

    binary, info = serving_loader
    _, path, loaded = exported["pretrainer"]
    texts = np.array([t.encode() for t in TEXTS], dtype=object)
    result = run_loader(binary, path, info["op_libraries"], "serving_default", {"text": texts},
                        str(tmp_path))
    assert result["signature"]["method"] == "tensorflow/serving/predict"
    assert result["signature"]["inputs"]["text"]["dtype"] == "DT_STRING"
    expected = loaded.signatures["serving_default"](text=tf.constant(texts))
    assert set(result["outputs"]) == set(expected)
    for name, value in expected.items():
        if value.dtype == tf.string:
            np.testing.assert_array_equal(result["outputs"][name], value.numpy())
        else:
            np.testing.assert_allclose(result["outputs"][name], value.numpy(), atol=TOL, rtol=0)
    _, path, loaded = exported["classifier"]
    examples = np.array([_example({"input_ids": [2, 50 + i, 3], "input_mask": [1, 1, 1],
                                   "segment_ids": [0, 0, 1]}) for i in range(3)], dtype=object)
    result = run_loader(binary, path, info["op_libraries"], "classify", {"inputs": examples},
                        str(tmp_path))
    assert result["signature"]["method"] == "tensorflow/serving/classify"
    expected = loaded.signatures["classify"](inputs=tf.constant(examples))
    np.testing.assert_allclose(result["outputs"]["scores"], expected["scores"].numpy(), atol=TOL)
    # The official run_classifier contract, as an official client sends it.
    official = np.array([_official_example(pad_features([2, 50 + i, 3], [0, 0, 1], MAX_SEQ), 1,
                                           False) for i in range(3)], dtype=object)
    result = run_loader(binary, path, info["op_libraries"], OFFICIAL_SIGNATURE,
                        {"input": official}, str(tmp_path))
    assert result["signature"]["method"] == "tensorflow/serving/predict"
    assert {k: v["dtype"] for k, v in result["signature"]["inputs"].items()} == {
        "input": "DT_STRING"}
    assert {k: v["dtype"] for k, v in result["signature"]["outputs"].items()} == {
        "probabilities": "DT_FLOAT", "predictions": "DT_INT32"}
    expected = loaded.signatures[OFFICIAL_SIGNATURE](input=tf.constant(official))
    np.testing.assert_allclose(result["outputs"]["probabilities"],
                               expected["probabilities"].numpy(), atol=TOL, rtol=0)
    np.testing.assert_array_equal(result["outputs"]["predictions"],
                                  expected["predictions"].numpy())


@pytest.mark.slow
def test_load_mode_and_batching_of_the_cpp_loader(exported, tmp_path, serving_loader):
    """The loader's load mode (bench/serving_load.py): clients on one session, every request
    timed; through the batcher (TF Serving's batching as batching_parameters configure it)
    requests are merged, padded to an allowed batch size with copies of the first row, and each
    request's rows answer as the request alone."""
    from albert_tf.export.cc_loader import run_load

    binary, info = serving_loader
    _, path, loaded = exported["classifier"]
    texts = np.array([t.encode() for t in TEXTS[:2]], dtype=object)
    expected = loaded.signatures["serving_default"](text=tf.constant(texts))
    plain = run_load(binary, path, info["op_libraries"], {"text": texts}, clients=3, seconds=1.0,
                     warmup=2, workdir=str(tmp_path / "plain"))
    assert plain["clients"] == 3 and plain["rows_per_request"] == 2
    assert plain["requests"] == len(plain["latencies_ms"]) > 10
    assert "batches" not in plain
    batching = {"max_batch_size": 8, "batch_timeout_micros": 3000, "num_batch_threads": 1,
                "allowed_batch_sizes": [4, 8]}
    batched = run_load(binary, path, info["op_libraries"], {"text": texts}, clients=3,
                       seconds=1.0, warmup=2, batching=batching,
                       workdir=str(tmp_path / "batched"))
    assert batched["requests"] == len(batched["latencies_ms"]) > 10
    # every row of every run (2 warm-up, the timed ones, the checked one) went through a batch
    assert batched["batched_rows"] == 2 * (batched["requests"] + 2 + 1)
    assert (batched["batched_rows"] + batched["padded_rows"]) % 4 == 0  # padded to 4 or 8
    assert batched["batched_rows"] / batched["batches"] > 2  # requests of 3 clients merged
    # the exported batching_parameters.txt, as the server would read it
    shipped = read_batching_parameters(os.path.join(os.path.dirname(path), BATCHING_CONFIG))
    as_shipped = run_load(binary, path, info["op_libraries"], {"text": texts}, clients=3,
                          seconds=0.5, warmup=1, batching=shipped,
                          workdir=str(tmp_path / "shipped"))
    assert as_shipped["batched_rows"] == 2 * (as_shipped["requests"] + 1 + 1)
    assert as_shipped["padded_rows"] == 0  # no allowed_batch_sizes: nothing computed twice
    for result in (plain, batched, as_shipped):  # the checked request: alone, batched, padded
        assert set(result["outputs"]) == set(expected)
        for name, value in expected.items():
            if value.dtype == tf.string:
                np.testing.assert_array_equal(result["outputs"][name], value.numpy())
            else:
                np.testing.assert_allclose(result["outputs"][name], value.numpy(), atol=TOL,
                                           rtol=0)


def _assert_same_outputs(got, expected):
    assert set(got) == set(expected)
    for name, value in expected.items():
        value = np.asarray(value)
        if value.dtype.kind == "f":
            np.testing.assert_allclose(np.asarray(got[name]), value, atol=TOL, rtol=0,
                                       err_msg=name)
        else:
            np.testing.assert_array_equal(np.asarray(got[name]), value, err_msg=name)


def _xla_functions(saved_model_dir) -> int:
    """How many functions of a SavedModel must be compiled by XLA (`jit_compile=True`)."""
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(saved_model_dir, "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    return sum(1 for fn in proto.meta_graphs[0].graph_def.library.function
               if fn.attr["_XlaMustCompile"].b)


@pytest.mark.slow
def test_jit_compile_export_answers_one_sentence_as_the_shipped_export(
        exported, tmp_path, sample_vocab, serving_loader):
    """--jit_compile: a one-row request runs the backbone XLA-compiled, padded to 16, 32 or 64
    (max_position_embeddings) tokens, and answers as the shipped export (floats to 1e-5; ids,
    pieces and labels equal) at every length; batches run the graph; the warmup file compiles
    each length; the C++ loader answers the same with XLA on, and with XLA off (TF Serving
    without --xla_cpu_compilation_enabled=true) refuses one-row requests but not batches."""
    from albert_tf.export.cc_loader import LoaderError, run_loader

    binary, info = serving_loader
    tok = Tokenizer(sample_vocab)
    one_rows = ["word", "the capital of france is [MASK] .",
                " ".join(["house"] * 13), " ".join(["house"] * 14),  # 15, 16 tokens
                " ".join(["house"] * 15) + " [MASK]", " ".join(["word"] * 60)]  # 18, 48 (cut)
    lengths = [len(pack_ids(tok.encode_with_masks(t), None, MAX_SEQ, tok)[0]) for t in one_rows]
    assert lengths == [3, 10, 15, 16, 18, MAX_SEQ]  # below, at and above the compiled lengths
    for kind in ("pretrainer", "classifier"):
        model, path, shipped = exported[kind]
        jit_path = export_saved_model(model, str(tmp_path / kind), sample_vocab,
                                      max_seq_length=MAX_SEQ, top_k=4, jit_compile=True,
                                      labels=["neg", "neutral", "pos"] if kind == "classifier"
                                      else None)
        with open(os.path.join(jit_path, "assets.extra", "albert_export.json")) as f:
            assert json.load(f)["jit_compile"] is True
        assert _xla_functions(jit_path) == 1 and _xla_functions(path) == 0
        jit = tf.saved_model.load(jit_path)
        answers = []
        for text in one_rows:
            expected = shipped.signatures["serving_default"](text=tf.constant([text]))
            answers.append(expected["pooled_output" if kind == "pretrainer" else "logits"])
            _assert_same_outputs(jit.signatures["serving_default"](text=tf.constant([text])),
                                 {k: v.numpy() for k, v in expected.items()})
        # the outputs depend on the text, so equal answers are not equal constants
        assert np.abs(answers[1].numpy() - answers[2].numpy()).max() > 1e-2
        tokens = {name: tf.constant(np.array([value], np.int32)) for name, value in
                  pad_features([2] + [50] * 61 + [3], [0] * 40 + [1] * 23, 64).items()}
        _assert_same_outputs(jit.signatures["serve_tokens"](**tokens),  # 64: the longest
                             {k: v.numpy() for k, v in
                              shipped.signatures["serve_tokens"](**tokens).items()})
        batch = tf.constant(TEXTS[:3])
        _assert_same_outputs(jit.signatures["serving_default"](text=batch),
                             {k: v.numpy() for k, v in
                              shipped.signatures["serving_default"](text=batch).items()})
    from tensorflow_serving.apis import prediction_log_pb2

    warm = [prediction_log_pb2.PredictionLog.FromString(r.numpy()).predict_log.request
            for r in tf.data.TFRecordDataset(os.path.join(jit_path, WARMUP_FILE))]
    assert sorted(tf.make_ndarray(r.inputs["input_ids"]).shape[1] for r in warm
                  if r.model_spec.signature_name == "serve_tokens"
                  and tf.make_ndarray(r.inputs["input_ids"]).shape[0] == 1) == [16, 32, 64]
    one = {"text": np.array([one_rows[1].encode()], dtype=object)}
    two = {"text": np.array([t.encode() for t in one_rows[:2]], dtype=object)}
    got = run_loader(binary, jit_path, info["op_libraries"], "serving_default", one,
                     str(tmp_path / "xla"), xla=True)["outputs"]
    _assert_same_outputs(got, {k: v.numpy() for k, v in shipped.signatures["serving_default"](
        text=tf.constant(one["text"])).items()})
    with pytest.raises(LoaderError, match="XLA compilation disabled"):
        run_loader(binary, jit_path, info["op_libraries"], "serving_default", one,
                   str(tmp_path / "no-xla"))
    got = run_loader(binary, jit_path, info["op_libraries"], "serving_default", two,
                     str(tmp_path / "no-xla-batch"))["outputs"]
    _assert_same_outputs(got, {k: v.numpy() for k, v in shipped.signatures["serving_default"](
        text=tf.constant(two["text"])).items()})


def test_jit_compile_is_refused_for_models_that_do_not_serve_one_row_of_text(sample_vocab):
    from albert_tf.models.task_models import AlbertSpanModel
    from albert_tf.export.registry import serving_module

    with pytest.raises(ValueError, match="jit_compile serves one-row requests of backbones, "
                                         "pretrainers and classifiers; a span model"):
        serving_module(AlbertSpanModel(_config()), Tokenizer(sample_vocab), max_seq_length=32,
                       jit_compile=True)


@pytest.mark.slow
def test_a_bare_backbone_exports_and_serves_the_keras_models_outputs(tmp_path, sample_vocab):
    """A backbone (a Hugging Face `AlbertModel` or TF-Hub encoder converted, an encoder saved
    from Python) exports with the base serving module: its text signature gives the Keras
    backbone's pooled and sequence outputs on Python's packing (the registration once sat on
    a helper function, and such an export failed)."""
    from albert_tf.models.backbone import AlbertBackbone

    model = AlbertBackbone(_config())
    _randomize(model, seed=3)
    version = export_saved_model(model, str(tmp_path / "encoder"), sample_vocab,
                                 max_seq_length=MAX_SEQ)
    loaded = tf.saved_model.load(version)
    tokens = _python_tokens(Tokenizer(sample_vocab), TEXTS, None)
    got = assert_serves_tokens(loaded, TEXTS, None, tokens)
    want = model(tokens, training=False)
    pooled = want["pooled_output"].numpy()
    assert_spread(pooled.max(axis=0), pooled.min(axis=0), TOL)  # the rows differ
    np.testing.assert_allclose(got["pooled_output"].numpy(), pooled, atol=TOL, rtol=0)
    real = got["input_mask"].numpy().astype(bool)
    np.testing.assert_allclose(got["sequence_output"].numpy()[real],
                               want["sequence_output"].numpy()[real], atol=TOL, rtol=0)
    assert "fill_mask" not in loaded.signatures and "classify" not in loaded.signatures


@pytest.mark.slow
def test_entry_point_exports_our_model_directory(tmp_path, sample_vocab):
    model = AlbertClassifier(_config(), num_labels=2)
    _randomize(model, 5)
    model_dir = save_albert_tf(model, str(tmp_path / "model"), sample_vocab)
    cmd = [sys.executable, "-m", "albert_tf.export.export_saved_model", "--model_dir", model_dir,
           "--export_dir", str(tmp_path / "exports" / "sst2"), "--max_seq_length", "32",
           "--text_pair", "--hidden_states"]
    proc = run_command(*cmd[2:], process=True)  # `python -m`, once
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr == ""  # TF's INFO lines (signatures, assets) are not shown: 10 were
    summary = json.loads(proc.stdout[proc.stdout.index("{"):])
    assert summary["export"].endswith(os.path.join("sst2", "1"))
    assert summary["signatures"] == ["classify", OFFICIAL_SIGNATURE, "serve_examples",
                                     "serve_text_pair", "serve_tokens", "serving_default"]
    loaded = tf.saved_model.load(summary["export"])
    sig = loaded.signatures["serving_default"]
    assert sorted(sig.structured_input_signature[1]) == ["text", "text_b"]  # --text_pair
    tok = Tokenizer(sample_vocab)
    tokens = _python_tokens(tok, TEXTS, PAIRS, 32)
    got = sig(text=tf.constant(TEXTS), text_b=tf.constant(PAIRS))
    expected = model(tokens, training=False)
    np.testing.assert_allclose(got["logits"].numpy(), expected["logits"].numpy(), atol=TOL)
    assert len([k for k in got if k.startswith("hidden_state_")]) == 6  # embeddings + 5 layers
    real = tokens["input_mask"].numpy().astype(bool)
    assert (~real).any()
    for i in (0, 3, 5):  # real tokens equal; padding 0 (the export's remove_padding)
        hidden = got[f"hidden_state_{i}"].numpy()
        np.testing.assert_allclose(hidden[real], expected["hidden_states"][i].numpy()[real],
                                   atol=TOL, rtol=0)
        assert (hidden[~real] == 0).all()
    # A directory that holds no model: exit 1 and a message naming it.
    proc = run_command(*cmd[2:4], str(tmp_path), *cmd[5:7])
    assert proc.returncode == 1 and "is neither an albert_tf model directory" in proc.stderr


@pytest.mark.slow
def test_pretraining_output_dir_latest_and_best(generated_data, sample_vocab, tmp_path):
    """A pretraining --output_dir exports from its latest or best checkpoint, with the
    SentencePiece model the run copied beside its checkpoints; without --checkpoint, the latest,
    for the exports and convert alike."""
    from albert_tf.training.train_lib import PretrainingConfig, PretrainingRun

    cfg = PretrainingConfig(
        albert_config=_config(), input_file=generated_data["files"],
        output_dir=str(tmp_path / "run"), max_seq_length=64, max_predictions_per_seq=10,
        train_batch_size=8, eval_batch_size=8, num_train_steps=4, num_warmup_steps=1,
        learning_rate=1e-2, save_checkpoints_steps=2, iterations_per_loop=2, do_eval=True,
        max_eval_steps=2, seed=3, shuffle_window=16, verbose=False)
    run = PretrainingRun(cfg)
    run.run()
    assert os.path.exists(os.path.join(cfg.output_dir, os.path.basename(sample_vocab)))
    latest, spm, source = load_for_export(cfg.output_dir)
    assert source["checkpoint"].endswith("ckpt-4") and spm.endswith(".model")
    # convert's reader takes the same model of the run (it read best/ while the exports read
    # the latest)
    assert read_source(cfg.output_dir).record["checkpoint"] == source["checkpoint"]
    assert convert("auto", cfg.output_dir, str(tmp_path / "converted"))["read"] \
        == source["checkpoint"]  # and says which it read (its summary did not)
    # a run whose checkpoints were removed but best/: its best, for both (convert said "no
    # checkpoint yet")
    only_best = tmp_path / "only_best"
    shutil.copytree(cfg.output_dir, only_best,
                    ignore=lambda _, names: [n for n in names
                                             if re.match(r"ckpt-\d|checkpoint$", n)])
    assert load_for_export(str(only_best))[2]["checkpoint"].endswith(
        os.path.join("only_best", "best", "ckpt-best"))
    assert read_source(str(only_best)).record["checkpoint"].endswith(
        os.path.join("only_best", "best", "ckpt-best"))
    for a, b in zip(latest.weights, run.model.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    best, _, source = load_for_export(cfg.output_dir, checkpoint="best")
    assert source["checkpoint"].endswith(os.path.join("best", "ckpt-best"))
    np.testing.assert_array_equal(best.backbone.word_embeddings.embeddings.numpy(),
                                  _restored(cfg, os.path.join("best", "ckpt-best")))
    shutil.rmtree(os.path.join(cfg.output_dir, "best"))
    with pytest.raises(ExportError, match="no best checkpoint"):
        load_for_export(cfg.output_dir, checkpoint="best")


def _restored(cfg, name):
    """The word-embedding table stored in a checkpoint of the run."""
    reader = tf.train.load_checkpoint(os.path.join(cfg.output_dir, name))
    key = [k for k in reader.get_variable_to_shape_map()
           if k.startswith("model/") and reader.get_variable_to_shape_map()[k] == [8000, 10]]
    assert len(key) == 1, key
    return reader.get_tensor(key[0])


def _serve_batched(signature, requests, pad):
    """TF Serving's batching session on `requests` (dicts of numpy inputs) of one signature:
    each input concatenated along dimension 0 and the outputs split back by rows. Inputs of
    different shapes past dimension 0 are an error without `pad`; with it (TF Serving's
    `pad_variable_length_inputs: true`), each tensor is padded to the largest shape with its own
    first element, as the server's batching_util does."""
    merged = {}
    for name in requests[0]:
        parts = [np.asarray(r[name]) for r in requests]
        if len({p.shape[1:] for p in parts}) > 1:
            if not pad:
                raise ValueError(f"Tensors with name {name!r} from different tasks have "
                                 "different shapes and padding is turned off.")
            target = np.max([p.shape for p in parts], axis=0)
            parts = [np.pad(p, [(0, 0)] + [(0, t - s) for s, t in zip(p.shape[1:], target[1:])],
                            constant_values=p.flat[0]) for p in parts]
        merged[name] = tf.constant(np.concatenate(parts))
    out = signature(**merged)
    sizes = np.cumsum([len(next(iter(r.values()))) for r in requests])[:-1]
    return [{k: v for k, v in zip(out, parts)} for parts in
            zip(*(np.split(v.numpy(), sizes) for v in out.values()))]


def _read_batching_config(path):
    with open(os.path.join(os.path.dirname(path), BATCHING_CONFIG)) as f:
        text = f.read()
    assert "pad_variable_length_inputs" in text
    return "pad_variable_length_inputs: true" in text


@pytest.mark.slow
def test_batched_requests_answer_as_unbatched_under_the_shipped_batching_config(exported,
                                                                              sample_vocab):
    """Two requests of different lengths batched the way TF Serving batches them under the
    exported batching_parameters.txt: text and tf.Example requests answer exactly as alone;
    token requests of different lengths are refused (the server's error), never answered
    wrongly; of one length they answer as alone. With padding on (the config shipped before),
    the token answers change: input_mask padded with its first element, 1."""
    model, path, loaded = exported["classifier"]
    pad = _read_batching_config(path)
    assert pad is False

    def same(batched, alone):
        for got, want in zip(batched, alone):
            np.testing.assert_allclose(got["probabilities"], want["probabilities"].numpy(),
                                       atol=1e-5, rtol=0)

    texts = [["A short one."], ["ALBERT shares one transformer block across all of its "
                                "layers, and it factorizes the embedding.", "Two words"]]
    requests = [{"text": np.array([t.encode() for t in r], dtype=object)} for r in texts]
    alone = [loaded.signatures["serving_default"](text=tf.constant(r["text"]))
             for r in requests]
    same(_serve_batched(loaded.signatures["serving_default"], requests, pad), alone)

    tok = Tokenizer(sample_vocab)
    rows = [[pad_features(*pack_ids(tok.encode(t), None, MAX_SEQ), MAX_SEQ) for t in r]
            for r in texts]
    examples = [{"examples": np.array([_example({k: row[k][:int(sum(row["input_mask"]))]
                                                 for k in row}) for row in r], dtype=object)}
                for r in rows]
    alone = [loaded.signatures["serve_examples"](examples=tf.constant(r["examples"]))
             for r in examples]
    same(_serve_batched(loaded.signatures["serve_examples"], examples, pad), alone)

    def tokens(r, length):
        return {k: np.array([row[k][:length] for row in r], np.int32)
                for k in ("input_ids", "input_mask", "segment_ids")}

    short = max(int(sum(row["input_mask"])) for row in rows[0])
    varied = [tokens(rows[0], short), tokens(rows[1], MAX_SEQ)]
    alone = [loaded.signatures["serve_tokens"](**{k: tf.constant(v) for k, v in r.items()})
             for r in varied]
    same(alone, [loaded.signatures["serving_default"](text=tf.constant(r["text"]))
                 for r in requests])  # the token requests are the text requests
    with pytest.raises(ValueError, match="padding is turned off"):
        _serve_batched(loaded.signatures["serve_tokens"], varied, pad)
    padded_alike = [tokens(rows[0], MAX_SEQ), tokens(rows[1], MAX_SEQ)]
    same(_serve_batched(loaded.signatures["serve_tokens"], padded_alike, pad), alone)
    corrupted = _serve_batched(loaded.signatures["serve_tokens"], varied, pad=True)
    drift = np.abs(corrupted[0]["logits"] - alone[0]["logits"].numpy()).max()
    spread = assert_spread(alone[0]["logits"].numpy()[0], alone[1]["logits"].numpy()[0], 1e-5)
    print(f"\nserve_tokens under pad_variable_length_inputs: true: logits moved by {drift:.2e} "
          f"(two texts differ by {spread:.2e})")
    assert drift > 100 * 1e-5


def test_version_directory_is_readable_by_others_and_fingerprint_matches(exported):
    """A version is 0755 (files 0644), not the 0700 of its temporary directory, so a server
    running as another user reads it; fingerprint.pb is TensorFlow's fingerprint of the
    saved_model.pb as finally written (its method names edited after saving)."""
    from tensorflow.python.saved_model.pywrap_saved_model import fingerprinting
    from tensorflow.core.protobuf import fingerprint_pb2

    _, path, _ = exported["classifier"]
    modes = {os.path.relpath(os.path.join(root, n), path): os.stat(os.path.join(root, n)).st_mode
             & 0o777 for root, dirs, files in os.walk(path) for n in dirs + files}
    assert os.stat(path).st_mode & 0o777 == 0o755
    assert {m for name, m in modes.items() if os.path.isdir(os.path.join(path, name))} == {0o755}
    assert {m for name, m in modes.items() if os.path.isfile(os.path.join(path, name))} == {0o644}
    stored = fingerprint_pb2.FingerprintDef.FromString(
        open(os.path.join(path, "fingerprint.pb"), "rb").read())
    fresh = fingerprint_pb2.FingerprintDef.FromString(fingerprinting.CreateFingerprintDef(path))
    assert stored.saved_model_checksum == fresh.saved_model_checksum != 0
    stored.ClearField("uuid"), fresh.ClearField("uuid")  # a new one each time it is made
    assert stored == fresh


def _text_example(text, text_b=None):
    return example_of({"text": text} if text_b is None else {"text": text, "text_b": text_b})


@pytest.mark.slow
def test_truncation_is_visible_and_raw_text_examples_classify(exported, sample_vocab):
    """Text signatures say what packing did (`num_tokens` before truncation, `truncated`, the
    model's `max_seq_length`); `classify` and `serve_examples` take raw text in tf.Examples
    (`text`, `text_b`) and answer as the text signatures; a pretrainer's `fill_mask` returns
    the fill-mask outputs only, equal to serving_default's."""
    tok = Tokenizer(sample_vocab)
    _, _, loaded = exported["classifier"]
    got = loaded.signatures["serve_text_pair"](text=tf.constant(TEXTS),
                                               text_b=tf.constant(PAIRS))
    # PAIRS[2] is "": one segment, [CLS] A [SEP] (official: B only `if tokens_b`).
    lengths = [(len(tok.encode_with_masks(a)), len(tok.encode_with_masks(b)))
               for a, b in zip(TEXTS, PAIRS)]
    expected = [a + 2 + (b + 1 if b else 0) for a, b in lengths]
    assert got["num_tokens"].numpy().tolist() == expected
    n = len(tok.encode_with_masks(TEXTS[2])) + 2
    assert got["input_mask"].numpy()[2].sum() == n and not got["segment_ids"].numpy()[2].any()
    assert got["input_ids"].numpy()[2, n - 1] == SEP_ID and SEP_ID not in got[
        "input_ids"].numpy()[2, n:]
    assert got["truncated"].numpy().tolist() == [n > MAX_SEQ for n in expected]
    assert got["truncated"].numpy()[1] and not got["truncated"].numpy()[0]
    assert got["max_seq_length"].numpy().tolist() == [MAX_SEQ] * len(TEXTS)
    single = loaded.signatures["serving_default"](text=tf.constant(TEXTS))
    classified = loaded.signatures["classify"](
        inputs=tf.constant([_text_example(t) for t in TEXTS]))
    np.testing.assert_allclose(classified["scores"].numpy(), single["probabilities"].numpy(),
                               atol=1e-6, rtol=0)
    pairs = loaded.signatures["serve_examples"](
        examples=tf.constant([_text_example(a, b) for a, b in zip(TEXTS, PAIRS)]))
    np.testing.assert_allclose(pairs["probabilities"].numpy(), got["probabilities"].numpy(),
                               atol=1e-6, rtol=0)
    mixed = [_text_example(TEXTS[0]), _example({"input_ids": [2, 50, 3], "input_mask": [1] * 3,
                                                "segment_ids": [0] * 3})]
    with pytest.raises(tf.errors.InvalidArgumentError, match="must all carry text or all"):
        loaded.signatures["classify"](inputs=tf.constant(mixed))
    _, _, loaded = exported["pretrainer"]
    full = loaded.signatures["serving_default"](text=tf.constant(TEXTS))
    fill = loaded.signatures["fill_mask"](text=tf.constant(TEXTS))
    assert set(fill) == {"mask_positions", "fill_mask_ids", "fill_mask_pieces",
                         "fill_mask_probabilities", "num_tokens", "truncated",
                         "max_seq_length"}
    for name in fill:
        np.testing.assert_array_equal(fill[name].numpy(), full[name].numpy(), err_msg=name)


def test_the_sentencepiece_model_is_stored_once_by_us(exported, sample_vocab, tmp_path):
    """The version holds the SentencePiece model only where the SavedModel format puts a
    resource (twice in saved_model.pb: the TF1 graph TF Serving runs and the TF2 creator
    function), no copy of ours; `sentencepiece_of_export` gives back the very file."""
    from albert_tf.export.saved_model import sentencepiece_of_export

    _, path, _ = exported["classifier"]
    model = open(sample_vocab, "rb").read()
    copies = {os.path.relpath(os.path.join(root, name), path):
              open(os.path.join(root, name), "rb").read().count(model)
              for root, _, files in os.walk(path) for name in files}
    assert {k: v for k, v in copies.items() if v} == {"saved_model.pb": 2}
    written = sentencepiece_of_export(path, str(tmp_path))
    assert open(written, "rb").read() == model
    record = json.load(open(os.path.join(path, "assets.extra", "albert_export.json")))
    assert record["sentencepiece_sha256"] == Tokenizer(sample_vocab).sha256


LABELS = ["neg", "neutral", "pos"]  # the `exported` classifier's (tests/conftest.py)


@pytest.mark.slow
def test_a_classifier_exported_with_label_names_answers_them_on_serving_default(
        exported, sample_vocab):
    """The names given at export come with `label` on the predict signatures (`label_name`,
    TF Serving's REST predict on serving_default), the other outputs unchanged: `label` the
    argmax id, `official_serving_default` still exactly the official outputs, `classify` as
    before; a regression head and a classifier exported without names have no `label_name`."""
    from albert_tf.export.registry import serving_module
    from albert_tf.export.saved_model import host_copy

    model, path, loaded = exported["classifier"]
    got = loaded.signatures["serving_default"](text=tf.constant(TEXTS))
    labels = got["label"].numpy()
    assert len(set(labels.tolist())) > 1  # the rows answer different classes
    np.testing.assert_array_equal(labels, got["probabilities"].numpy().argmax(-1))
    assert got["label_name"].dtype == tf.string
    assert [b.decode() for b in got["label_name"].numpy()] == [LABELS[i] for i in labels]
    pair = loaded.signatures["serve_text_pair"](text=tf.constant(TEXTS),
                                                text_b=tf.constant(PAIRS))
    assert [b.decode() for b in pair["label_name"].numpy()] == [
        LABELS[i] for i in pair["label"].numpy()]
    examples = tf.constant([_text_example(t) for t in TEXTS])
    assert loaded.signatures["serve_examples"](examples=examples)["label_name"].numpy().tolist(
        ) == got["label_name"].numpy().tolist()
    official = loaded.signatures[OFFICIAL_SIGNATURE](input=examples)
    assert set(official) == {"probabilities", "predictions"}
    classified = loaded.signatures["classify"](inputs=examples)
    assert set(classified) == {"classes", "scores"}
    _, _, regressor = exported["regressor"]
    assert "label_name" not in regressor.signatures["serving_default"].structured_outputs
    unnamed = serving_module(host_copy(model), Tokenizer(sample_vocab), max_seq_length=MAX_SEQ)
    named = serving_module(host_copy(model), Tokenizer(sample_vocab), max_seq_length=MAX_SEQ,
                           labels=LABELS)
    features = {"input_ids": tf.constant([[2, 50, 3]]), "input_mask": tf.ones([1, 3], tf.int32),
                "segment_ids": tf.zeros([1, 3], tf.int32)}
    assert "label_name" not in unnamed.outputs_from_tokens(features)
    assert "label_name" in named.outputs_from_tokens(features)
    # Two classes of one name (hostile pass: --labels a,a served both as "a"), or none: refused
    for labels, why in ((["neg", "neg", "pos"], "'neg' is named 2 times"),
                        (["neg", "", "pos"], "one is empty")):
        with pytest.raises(ValueError, match=f"label names \\(--labels\\) .*: {why}; each "
                                             "class needs its own non-empty name"):
            serving_module(host_copy(model), Tokenizer(sample_vocab), max_seq_length=MAX_SEQ,
                           labels=labels)


@pytest.mark.slow
def test_cc_loader_command_builds_tf_examples_for_example_signatures(exported, tmp_path,
                                                                     capsys):
    """`python -m albert_tf.export.cc_loader --signature classify|official_serving_default --text
    ...` sends raw-text tf.Examples (as albert_tf.export.client does) and answers as serving_default
    on the texts; serving_default's answer prints the label names; a signature --text cannot feed is
    refused by name, with the ones it can run."""
    from albert_tf.export.cc_loader import main

    _, path, loaded = exported["classifier"]
    expected = loaded.signatures["serving_default"](text=tf.constant(TEXTS))
    texts = [arg for t in TEXTS for arg in ("--text", t)]
    for signature, key in (("classify", "scores"), (OFFICIAL_SIGNATURE, "probabilities"),
                           ("serving_default", "probabilities")):
        out = str(tmp_path / f"{signature}.json")
        assert main(["--saved_model", path, "--runtime", "python", "--signature", signature,
                     *texts, "--output_json", out]) == 0, capsys.readouterr().err
        with open(out, encoding="utf-8") as f:
            answer = json.load(f)["outputs"]
        np.testing.assert_allclose(answer[key], expected["probabilities"].numpy(), atol=1e-6,
                                   rtol=0)
        if signature == "classify":
            assert answer["classes"] == [LABELS] * len(TEXTS)
    names = [LABELS[i] for i in expected["label"].numpy()]
    assert answer["label_name"] == names
    assert f"label_name: {names}" in capsys.readouterr().out
    assert main(["--saved_model", path, "--runtime", "python", "--signature", "serve_tokens",
                 "--text", "x"]) == 1
    err = capsys.readouterr().err
    assert ("--text cannot run signature 'serve_tokens' (its inputs: input_ids, input_mask, "
            "segment_ids); of this export's signatures, --text runs classify, "
            "official_serving_default, serve_examples, serving_default.") in err, err
    assert main(["--saved_model", path, "--runtime", "python", "--signature", "nope",
                 "--text", "x"]) == 1
    assert "has no signature 'nope'" in capsys.readouterr().err


def test_export_max_seq_length_defaults_to_the_training_runs(tmp_path):
    """Without --max_seq_length, `export_saved_model` exports at the length the training run
    recorded (its config.yaml), for the run directory, `DIR:best`, one of its checkpoints and
    our model directory converted from it, and says where it came from; a source of no run
    keeps min(512, max_position_embeddings); the flag and a .keras model's length come first."""
    from albert_tf.export.export_saved_model import export_max_seq_length, recorded_max_seq_length

    run = tmp_path / "run"
    (run / "best").mkdir(parents=True)
    (run / "albert_config.json").write_text("{}")
    for name in ("ckpt-3.index", os.path.join("best", "ckpt-best.index")):
        (run / name).write_text("")
    (run / "config.yaml").write_text("command: albert_tf.run_classifier\nmodel:\n"
                                     "  max_seq_length: 48\n  do_lower_case: true\n")
    ours = tmp_path / "ours"
    ours.mkdir()
    (ours / "albert_tf.json").write_text(json.dumps(
        {"format": "albert_tf", "source": {"path": str(run / "best" / "ckpt-best")}}))
    plain = tmp_path / "hf"
    plain.mkdir()
    (plain / "config.json").write_text("{}")
    recorded = str(run / "config.yaml")
    for path in (str(run), f"{run}:best", str(run / "ckpt-3"), str(run / "best" / "ckpt-best"),
                 str(ours)):
        assert recorded_max_seq_length(path) == (48, recorded), path
    assert recorded_max_seq_length(str(plain)) == (None, None)

    class Model:
        config = _config(max_position_embeddings=64)

    assert export_max_seq_length(None, Model, {"max_seq_length": None}, str(run)) == (
        48, f"the training run's {recorded}")
    assert export_max_seq_length(None, Model, {}, str(plain)) == (
        64, "default: min(512, max_position_embeddings)")
    assert export_max_seq_length(32, Model, {}, str(run)) == (32, "--max_seq_length")
    assert export_max_seq_length(None, Model, {"max_seq_length": 40}, str(run)) == (
        40, "the source's sequence_length")
