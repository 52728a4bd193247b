"""Token classification end to end: `AlbertTokenClassifier` against Hugging Face's
`AlbertForTokenClassification`, the word/piece alignment of `TaggingPreprocessor` (Python and
in-graph), the entity metric against seqeval, the CoNLL readers and their errors, and
`python -m albert_tf.run_tagging` train/eval/predict/export with the export answering the same
tags as --do_predict (in Python and through the C++ loader)."""

import json
import os
import shutil
import warnings

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401 - registers the SentencePiece ops the exports use

from albert_tf import features as F
from albert_tf.models.backbone import AlbertBackbone
from albert_tf.tasks import conll
from albert_tf.tasks.entity_metrics import entity_scores, get_entities, is_bio, token_accuracy
from albert_tf.tasks.tagging import IGNORE, TaggingPreprocessor, TaggingTask, sentences_of_windows
from albert_tf.models.token_classifier import AlbertTokenClassifier
from conftest import ROOT, assert_spread, random_batch, run_cli, run_command, tiny_config

SAMPLE = os.path.join(ROOT, "albert_tf", "sample_data", "tagging")
WNUT_TRAIN = os.path.join(SAMPLE, "wnut17", "train.conll")
WNUT_DEV = os.path.join(SAMPLE, "wnut17", "dev.conll")
EWT_TRAIN = os.path.join(SAMPLE, "ud_english_ewt", "train.conllu")
EWT_DEV = os.path.join(SAMPLE, "ud_english_ewt", "dev.conllu")
TOLERANCE = 1e-5


# ---------------------------------------------------------------------------------------------
# The model.
@pytest.mark.slow
def test_token_classifier_matches_hf_albert_for_token_classification(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from albert_tf.checkpoints import hf_kind, load_hf_state_dict, write_hf_folder
    from hf_helpers import hf_config, max_diff, randomize_torch, torch_inputs

    cfg = tiny_config(initializer_range=0.2)  # all-shared, G = 2, inner = 2
    hf = transformers.AlbertForTokenClassification(hf_config(cfg, num_labels=7)).eval()
    randomize_torch(hf, seed=3)
    state = {k: v.numpy() for k, v in hf.state_dict().items()}
    ours = AlbertTokenClassifier(cfg, 7)
    # the one Hugging Face reader: kind from `architectures`, the pooler HF lacks kept
    assert hf_kind(state, ["AlbertForTokenClassification"]) == "token_classifier"
    report = load_hf_state_dict(ours, state, "hf")
    assert report["kept"] == ["albert.pooler.weight", "albert.pooler.bias"]
    assert len(report["assigned"]) == len(ours.weights) - 2
    batch = random_batch(cfg, batch=3, seq=11)
    with torch.no_grad():
        ref = hf(**torch_inputs(batch)).logits.numpy()
    out = ours({k: tf.constant(batch[k]) for k in F.BACKBONE_INPUTS})["logits"].numpy()
    assert out.shape == (3, 11, 7) and out.dtype == np.float32
    assert_spread(ref[0, 1:4], ref[1, 1:4], TOLERANCE)
    real = batch["input_mask"] > 0  # HF computes padded positions too; compare every one
    assert max_diff(out[real], ref[real]) <= TOLERANCE
    assert max_diff(out, ref) <= TOLERANCE
    # written back as HF's folder: from_pretrained builds the same model (no pooler keys)
    folder = tmp_path / "hf"
    write_hf_folder(ours, str(folder))
    again = transformers.AlbertForTokenClassification.from_pretrained(str(folder)).eval()
    with torch.no_grad():
        assert max_diff(again(**torch_inputs(batch)).logits.numpy(), ref) <= TOLERANCE


@pytest.mark.slow
def test_token_classifier_registry_contract_and_shared_backbone():
    from albert_tf.checkpoints.names import model_weights
    from albert_tf.models.kinds import build_model, model_class

    cfg = tiny_config()
    assert model_class("token_classifier") is AlbertTokenClassifier
    built = build_model("token_classifier", cfg, num_labels=5)
    names = [w.official_name for w in model_weights(built)]  # covers every variable once
    assert names[-2:] == ["cls/tagging/output_weights", "cls/tagging/output_bias"]
    assert all(n.startswith(("bert/", *AlbertTokenClassifier.official_head_prefixes))
               for n in names)
    assert built.official_weights()[-2].to_official(built.classifier_head.kernel.numpy()).shape \
        == (5, cfg.hidden_size)
    with pytest.raises(ValueError, match="num_labels"):
        AlbertTokenClassifier.for_checkpoint(cfg)
    backbone = AlbertBackbone(cfg)
    shared = AlbertTokenClassifier(backbone, 3)
    assert shared.backbone is backbone and shared.config is cfg
    assert built.hf_config(["O", "B-x", "I-x", "B-y", "I-y"])["id2label"]["2"] == "I-x"
    again = AlbertTokenClassifier.from_config(built.get_config())
    assert again.num_labels == 5 and again.config == cfg


# ---------------------------------------------------------------------------------------------
# Alignment.
class PieceTokenizer:
    """A tokenizer whose pieces are known: a word is split into pieces of 3 characters (ids
    from a table), "∅" has no pieces."""

    pad_id, unk_id, cls_id, sep_id = 0, 1, 2, 3

    def __init__(self):
        self.table = {}

    def encode(self, word):
        pieces = [word[i:i + 3] for i in range(0, len(word), 3)] if word != "∅" else []
        return [self.table.setdefault(p, 10 + len(self.table)) for p in pieces]


def test_preprocessor_labels_first_pieces_and_splits_long_sentences():
    tok = PieceTokenizer()
    labels = ["O", "B-PER", "I-PER"]
    words = ["Johannes", "ran", "∅", "Kepler"]  # 3, 1, 0 (-> [UNK]), 2 pieces
    tags = ["B-PER", "O", "O", "I-PER"]
    (window,) = TaggingPreprocessor(tok, labels, 16).windows(words, tags)
    f = window.features
    assert sum(f[F.INPUT_MASK]) == 2 + 3 + 1 + 1 + 2 and len(f[F.INPUT_IDS]) == 16
    assert f[F.INPUT_IDS][0] == tok.cls_id and f[F.INPUT_IDS][8] == tok.sep_id
    assert f[F.INPUT_IDS][5] == tok.unk_id
    assert window.positions == [1, 4, 5, 6]
    assert f[F.LABEL_IDS][:10] == [IGNORE, 1, IGNORE, IGNORE, 0, 0, 2, IGNORE, IGNORE, IGNORE]
    assert sum(v != IGNORE for v in f[F.LABEL_IDS]) == len(words)
    # B = 3 pieces per window: starts 0, 3, 4, 5 -> windows {0}, {3, 4, 5}
    windows = TaggingPreprocessor(tok, labels, 5).windows(words, tags)
    assert [(w.first_word, w.positions, w.index) for w in windows] == [(0, [1], 0),
                                                                       (1, [1, 2, 3], 1)]
    assert windows[1].features[F.INPUT_IDS][4] == tok.sep_id  # Kepler's second piece cut
    assert sum(v != IGNORE for w in windows for v in w.features[F.LABEL_IDS]) == 4
    pre = TaggingPreprocessor(tok, labels, 5)
    ids = [np.array(w.features[F.LABEL_IDS]) for w in windows]
    assert pre.join(windows, [np.maximum(i, 0) for i in ids]) == tags


def test_preprocessor_refuses_bad_sentences():
    pre = TaggingPreprocessor(PieceTokenizer(), ["O", "B-X"], 8)
    with pytest.raises(ValueError, match="f.conll, line 7: 2 words but 1 tags"):
        pre.windows(["a", "b"], ["O"], "f.conll, line 7")
    with pytest.raises(ValueError, match="line 3: an empty sentence"):
        pre.windows([], [], "f.conll, line 3")
    with pytest.raises(ValueError, match="tag 'I-X' is not one of the 2 training tags"):
        pre.windows(["a"], ["I-X"])
    with pytest.raises(ValueError, match="at least 3"):
        TaggingPreprocessor(PieceTokenizer(), ["O"], 2)


@pytest.mark.slow
def test_in_graph_windows_equal_python_windows(sample_vocab):
    import tensorflow_text  # noqa: F401

    from albert_tf.tokenization import Tokenizer, in_graph_tokenizer

    tokenizer = Tokenizer(sample_vocab)
    sentences, _ = conll.read_tagged_file(WNUT_DEV)
    sentences = sentences[:40] + [conll.Sentence(["x" * 90, "a"], None, [0, 0], [])]
    for length in (8, 64):
        pre = TaggingPreprocessor(tokenizer, ["O"], length)
        out = pre.windows_in_graph(in_graph_tokenizer(tokenizer),
                                   tf.constant([" ".join(s.words) for s in sentences]))
        flat = [w for ws in pre.windows_of([(s.words, None, "x") for s in sentences]) for w in ws]
        assert out["input_ids"].shape[0] == len(flat) > len(sentences)
        ids, mask = out["input_ids"].numpy(), out["input_mask"].numpy()
        for k, w in enumerate(flat):
            n = int(mask[k].sum())
            assert ids[k, :n].tolist() == w.features[F.INPUT_IDS][:n]
        assert out["position"].numpy().tolist() == [p for w in flat for p in w.positions]
        assert out["window"].numpy().tolist() == [k for k, w in enumerate(flat)
                                                  for _ in w.positions]


# ---------------------------------------------------------------------------------------------
# Records: the writer's bytes against the window rule written out in plain Python.
class CountingTokenizer(PieceTokenizer):
    """`PieceTokenizer` with what `write_examples` records of a tokenizer, counting its
    `encode` calls."""

    sha256, do_lower_case, vocab_size = "0" * 64, False, 1000

    def __init__(self):
        super().__init__()
        self.calls = 0

    def encode(self, word):
        self.calls += 1
        return super().encode(word)


def plain_records(tokenizer, labels, max_seq_length, sentences, seed, pad_to_multiple):
    """The records of `write_examples`, computed without its code: each word's pieces (none:
    [UNK]), word i in window floor(s_i / B) of its sentence, a window's pieces cut to B between
    [CLS] and [SEP], each word's tag at its first piece; serialized by TensorFlow's protobuf."""
    budget, windows = max_seq_length - 2, []
    for s in sentences:
        pieces = [tokenizer.encode(word) or [tokenizer.unk_id] for word in s.words]
        starts = np.cumsum([0] + [len(p) for p in pieces[:-1]]).tolist()
        members = {}
        for i, start in enumerate(starts):
            members.setdefault(start // budget, []).append(i)
        for index, words in enumerate(members.values()):
            ids = [p for i in words for p in pieces[i]][:budget]
            n = len(ids) + 2
            label = [IGNORE] * max_seq_length
            for i in words:
                label[starts[i] - starts[words[0]] + 1] = labels.index(s.tags[i])
            windows.append({F.INPUT_IDS: [tokenizer.cls_id, *ids, tokenizer.sep_id]
                            + [0] * (max_seq_length - n),
                            F.INPUT_MASK: [1] * n + [0] * (max_seq_length - n),
                            F.SEGMENT_IDS: [0] * max_seq_length, F.LABEL_IDS: label,
                            F.IS_REAL_EXAMPLE: [1], "window_index": [index]})
    order = np.random.default_rng([seed, 0x7A6]).permutation(len(windows)).tolist()
    pad = {name: [0] * len(v) for name, v in windows[0].items()}
    pad[F.LABEL_IDS] = [IGNORE] * max_seq_length
    rows = [windows[i] for i in order] + [pad] * ((-len(windows)) % pad_to_multiple)
    return [tf.train.Example(features=tf.train.Features(feature={
        name: tf.train.Feature(int64_list=tf.train.Int64List(value=v))
        for name, v in row.items()})).SerializeToString(deterministic=True) for row in rows]


def assert_records_equal_plain_python(tokenizer, tmp_path, lengths=(16, 64)):
    from albert_tf.tasks.tagging import write_examples

    sentences = conll.read_tagged_file(WNUT_TRAIN)[0] + conll.read_tagged_file(EWT_TRAIN)[0]
    labels = conll.label_list(sentences)
    for length in lengths:
        pre = TaggingPreprocessor(tokenizer, labels, length)
        meta = write_examples(sentences, pre, str(tmp_path / f"{length}.tfrecord"), "x",
                              shuffle_seed=5, pad_to_multiple=16)
        expected = plain_records(tokenizer, labels, length, sentences, 5, 16)
        with tf.io.TFRecordWriter(str(tmp_path / f"{length}.plain")) as writer:
            for record in expected:
                writer.write(record)
        assert meta["sentences"] == 450 and meta["num_examples"] == len(expected)
        assert meta["split_sentences"] > 0  # windows cut at both lengths
        with open(meta["files"][0], "rb") as f, open(tmp_path / f"{length}.plain", "rb") as g:
            assert f.read() == g.read()


def test_records_equal_the_rule_in_plain_python_and_ops_run_once(tmp_path, monkeypatch):
    # the bundled WNUT-17 and EWT slices (450 sentences, 8,920 words), 3-character pieces
    tokenizer = CountingTokenizer()
    runs = []
    original = TaggingPreprocessor._windows_of_pieces
    monkeypatch.setattr(TaggingPreprocessor, "_windows_of_pieces",
                        lambda self, *a, **k: runs.append(1) or original(self, *a, **k))
    assert_records_equal_plain_python(tokenizer, tmp_path, lengths=(16,))
    # one run of the window ops for the file, each distinct word tokenized once (the writer
    # before ran the ops once per sentence and tokenized every word: 450 runs, 8,920 calls)
    sentences = conll.read_tagged_file(WNUT_TRAIN)[0] + conll.read_tagged_file(EWT_TRAIN)[0]
    words = [w for s in sentences for w in s.words]
    assert len(runs) == 1 and len(words) == 8920
    assert tokenizer.calls - len(words) == len(set(words)) == 3085


@pytest.mark.slow
def test_records_with_sentencepiece_equal_the_rule_in_plain_python(sample_vocab, tmp_path):
    from albert_tf.tokenization import Tokenizer

    assert_records_equal_plain_python(Tokenizer(sample_vocab), tmp_path)


# ---------------------------------------------------------------------------------------------
# Metrics. Figures from seqeval 1.2.2, installed by hand (it is not a dependency):
#   pip install --target /tmp/site setuptools_scm
#   PYTHONPATH=/tmp/site pip install --no-build-isolation --no-deps --target /tmp/site seqeval
#   PYTHONPATH=/tmp/site python -c "from seqeval.metrics import *; print(precision_score(T, P),
#       recall_score(T, P), f1_score(T, P), accuracy_score(T, P))"
TRUE = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "I-ORG", "I-ORG", "B-ORG", "O"],
        ["B-LOC", "I-PER", "O"], ["O", "O"], ["B-MISC", "I-MISC", "I-MISC"]]
PREDICTED = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-ORG", "I-ORG", "O", "O"],
             ["B-LOC", "I-LOC", "B-PER"], ["I-MISC", "O"], ["O", "O", "O"]]
SEQEVAL = {"precision": 0.5, "recall": 0.42857142857142855, "f1": 0.4615384615384615,
           "accuracy": 0.5294117647058824}


def test_entity_scores_equal_seqeval_figures():
    scores = entity_scores(TRUE, PREDICTED)
    for name in ("precision", "recall", "f1"):
        assert scores[name] == pytest.approx(SEQEVAL[name], abs=1e-15)
    assert token_accuracy(TRUE, PREDICTED) == pytest.approx(SEQEVAL["accuracy"], abs=1e-15)
    assert (scores["true_entities"], scores["predicted_entities"]) == (7, 6)
    # conlleval chunking: I- after O starts an entity; a type change ends one
    assert get_entities(["O", "I-A", "I-A", "I-B", "B-B", "O"]) == [("A", 1, 2), ("B", 3, 3),
                                                                   ("B", 4, 4)]
    assert entity_scores([["O"]], [["O"]])["f1"] == 0.0
    assert is_bio(["O", "B-x", "I-x"]) and not is_bio(["NOUN", "VERB"]) and not is_bio(["O"])


def test_entity_scores_equal_live_seqeval():
    metrics = pytest.importorskip("seqeval.metrics")
    rng = np.random.default_rng(0)
    tags = ["O", "B-A", "I-A", "B-B", "I-B", "E-A", "S-B", "I-C"]
    for _ in range(200):
        true = [list(rng.choice(tags, rng.integers(1, 9))) for _ in range(rng.integers(1, 5))]
        pred = [list(rng.choice(tags, len(s))) for s in true]
        ours = entity_scores(true, pred)
        with warnings.catch_warnings():  # seqeval warns where a score is undefined (0)
            warnings.simplefilter("ignore")
            assert ours["precision"] == pytest.approx(metrics.precision_score(true, pred))
            assert ours["recall"] == pytest.approx(metrics.recall_score(true, pred))
            assert ours["f1"] == pytest.approx(metrics.f1_score(true, pred))


def test_task_metrics_join_windows_into_sentences():
    task = TaggingTask(tiny_config(), ["O", "B-A", "I-A"], 6)
    assert task.best_metric == "entity_f1"
    # sentence 1 = windows 0, 1 (an entity across the cut); sentence 2 = window 2; 1 padding
    label = np.array([[0, 1, 0, 0], [2, 0, 0, 0], [0, 1, 2, 0], [0, 0, 0, 0]])
    labelled = np.array([[0, 1, 1, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 0, 0]], bool)
    prediction = label.copy()
    prediction[2, 2] = 0
    collected = {"label": label, "prediction": prediction, "labelled": labelled,
                 "window_index": np.array([0, 1, 0, 0]), "real": np.array([1, 1, 1, 0])}
    assert sentences_of_windows(label, collected["window_index"], labelled)[:2] == [
        [1, 0, 2, 0], [1, 2]]
    sums = {"loss_sum": 2.0, "token_count": 6.0, "correct_sum": 5.0, "count": 3.0}
    metrics = task.metrics(sums, collected)
    assert metrics["token_accuracy"] == 5 / 6
    # true: A(0..0) and I-A after O at 2 -> A(2..2), A(5..6); predicted: A, A, A(5..5)
    assert (metrics["entity_precision"], metrics["entity_recall"]) == (2 / 3, 2 / 3)
    assert TaggingTask(tiny_config(), ["NOUN", "VERB"], 6).best_metric == "token_accuracy"


# ---------------------------------------------------------------------------------------------
# Files.
def test_conll_reader_handles_bom_crlf_lone_tabs_and_no_final_newline(tmp_path):
    path = tmp_path / "a.conll"
    path.write_bytes("\ufeffEmpire\tB-loc\r\nState\tI-loc\r\n\t\r\nHi\tO\r\nthere\tO".encode())
    sentences, fmt = conll.read_tagged_file(str(path))
    assert fmt == "conll" and [s.words for s in sentences] == [["Empire", "State"],
                                                               ["Hi", "there"]]
    assert sentences[1].tags == ["O", "O"] and sentences[1].line_numbers == [4, 5]
    spaced = tmp_path / "b.txt"
    spaced.write_text("EU NNP B-ORG\nrejects VBZ O\n\n\nGerman JJ B-MISC\n")
    sentences, _ = conll.read_tagged_file(str(spaced))
    assert [s.tags for s in sentences] == [["B-ORG", "O"], ["B-MISC"]]
    words_only = tmp_path / "c.conll"
    words_only.write_text("Hello\nworld\n")
    assert conll.read_tagged_file(str(words_only), require_tags=False)[0][0].tags is None
    with pytest.raises(conll.ConllError, match=r"c.conll, line 1: one column"):
        conll.read_tagged_file(str(words_only))
    out = tmp_path / "predictions.conll"
    conll.write_predictions(str(out), sentences, [["O", "O"], ["B-MISC"]])
    assert out.read_text() == "EU NNP B-ORG\tO\nrejects VBZ O\tO\n\nGerman JJ B-MISC\tB-MISC\n"


def test_conllu_reader_takes_upos_and_skips_ranges_empty_nodes_and_comments():
    sentences, fmt = conll.read_tagged_file(EWT_TRAIN)
    assert fmt == "conllu" and len(sentences) == 150
    text = open(EWT_TRAIN, encoding="utf-8").read()
    tokens = [line.split("\t") for line in text.splitlines()
              if line and not line.startswith("#")]
    words = [t for t in tokens if t[0].isdigit()]
    assert len(words) < len(tokens)  # the slice holds ranges and an empty node
    assert sum(len(s.words) for s in sentences) == len(words)
    assert [t for s in sentences for t in s.tags] == [t[3] for t in words]
    assert sentences[0].words[:3] == ["From", "the", "AP"]


def test_bad_files_name_the_file_and_line(tmp_path):
    stray = tmp_path / "stray.conll"
    stray.write_text("a\tO\nb\tO\tX\n")
    with pytest.raises(conll.ConllError, match=r"stray.conll, line 2: 3 columns where .* 2 "
                                               r"\(a stray column"):
        conll.read_tagged_file(str(stray))
    missing = tmp_path / "missing.conll"
    missing.write_text("a\tB-x\tO\nb\tO\n")
    with pytest.raises(conll.ConllError, match=r"missing.conll, line 2: 2 columns where .* 3 "
                                               r"\(a missing column"):
        conll.read_tagged_file(str(missing))
    unknown = tmp_path / "dev.conll"
    unknown.write_text("a\tO\n\nb\tB-new\n")
    sentences, _ = conll.read_tagged_file(str(unknown))
    with pytest.raises(conll.ConllError, match=r"dev.conll, line 3: tag 'B-new' is not one"):
        conll.check_known_tags(sentences, ["O", "B-x"], str(unknown))
    with pytest.raises(conll.ConllError, match=r"f, line 4: 2 words but 1 tags"):
        conll.check_sentences([conll.Sentence(["a", "b"], ["O"], [4, 5], [])], "f")
    with pytest.raises(conll.ConllError, match="an empty sentence"):
        conll.check_sentences([conll.Sentence([], [], [], [])], "f")
    blank = tmp_path / "blank.conll"
    blank.write_text("\n\t\n")
    with pytest.raises(conll.ConllError, match="blank.conll holds no sentences"):
        conll.read_tagged_file(str(blank))
    bad_u = tmp_path / "x.conllu"
    bad_u.write_text("1\ta\ta\tDET\t_\t_\t0\troot\t_\t_\n2\tb\tb\n")
    with pytest.raises(conll.ConllError, match=r"x.conllu, line 2: a CoNLL-U token line"):
        conll.read_tagged_file(str(bad_u))


def test_docstart_lines_are_document_separators_not_sentences(tmp_path):
    """CoNLL-2003's "-DOCSTART- -X- -X- O" lines are skipped (as Hugging Face's conll2003
    reader skips them): not a sentence (not trained on, tagged or counted), a sentence
    boundary even without a blank line after it, and counted apart; they do not set the
    file's columns."""
    spaced = tmp_path / "conll2003.txt"
    spaced.write_text("-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\n"
                      "-DOCSTART- -X- -X- O\nGerman JJ B-NP B-MISC\n\n-DOCSTART- -X- O O\n\n")
    read = conll.read_tagged(str(spaced))
    assert (read.format, read.document_starts) == ("conll", 3)
    assert [(s.words, s.tags, s.line_numbers) for s in read.sentences] == [
        (["EU", "rejects"], ["B-ORG", "O"], [3, 4]), (["German"], ["B-MISC"], [7])]
    sentences, fmt = conll.read_tagged_file(str(spaced))
    assert fmt == "conll" and sentences == read.sentences
    tabbed = tmp_path / "two_columns.conll"  # a separator of its own width: not the columns
    tabbed.write_text("-DOCSTART-\nHi\tO\nthere\tO\n\n-DOCSTART-\tO\n")
    read = conll.read_tagged(str(tabbed))
    assert read.document_starts == 2 and [s.words for s in read.sentences] == [["Hi", "there"]]
    only = tmp_path / "only.conll"
    only.write_text("-DOCSTART- -X- -X- O\n\n")
    with pytest.raises(conll.ConllError, match="only.conll holds no sentences"):
        conll.read_tagged(str(only))
    assert conll.read_tagged(WNUT_DEV).document_starts == 0


def _unannotated(path, source=EWT_TRAIN, keep=()):
    """`source` (CoNLL-U) with UPOS "_" on every token line but those of 1-based lines
    `keep`."""
    lines = open(source, encoding="utf-8").read().split("\n")
    for i, line in enumerate(lines):
        columns = line.split("\t")
        if len(columns) == 10 and columns[0].isdigit() and i + 1 not in keep:
            lines[i] = "\t".join(columns[:3] + ["_"] + columns[4:])
    path.write_text("\n".join(lines), encoding="utf-8")
    return str(path)


def test_unannotated_conllu_is_read_for_prediction_and_refused_for_training(tmp_path):
    """CoNLL-U with UPOS "_" (unannotated) reads as words without tags where tags are not
    needed (a --test_file to tag); training or evaluation on it, and a file tagging some tokens
    only, are refused naming the file and line."""
    path = _unannotated(tmp_path / "raw.conllu")
    tagged, _ = conll.read_tagged_file(EWT_TRAIN)
    sentences, fmt = conll.read_tagged_file(path, require_tags=False)
    assert fmt == "conllu" and all(s.tags is None for s in sentences)
    assert [s.words for s in sentences] == [s.words for s in tagged]
    assert [s.line_numbers for s in sentences] == [s.line_numbers for s in tagged]
    first = tagged[0].line_numbers[0]
    with pytest.raises(conll.ConllError) as raised:
        conll.read_tagged_file(path)
    assert str(raised.value) == (
        f"{path}, line {first}: UPOS '_' (unannotated): training and evaluation need every "
        "token's tag; tag the file, or pass it as --test_file with --do_predict alone to tag "
        "it.")
    second = tagged[0].line_numbers[1]
    mixed = _unannotated(tmp_path / "mixed.conllu", keep={first})
    for require_tags in (True, False):
        with pytest.raises(conll.ConllError) as raised:
            conll.read_tagged_file(mixed, require_tags=require_tags)
        assert str(raised.value) == (
            f"{mixed}, line {second}: UPOS '_' (unannotated) on line {second} but "
            f"{tagged[0].tags[0]!r} on line {first}: tag every token, or none (an unannotated "
            "file is tagged by --do_predict, never scored).")


# ---------------------------------------------------------------------------------------------
# The command and its export.
@pytest.fixture(scope="module")
def tagging_run(tmp_path_factory, sample_vocab):
    """run_tagging on the WNUT-17 slice from a (random) pretraining checkpoint: train, eval,
    predict and export. Returns (output dir, export version dir, stdout)."""
    from albert_tf.models.pretrainer import AlbertPretrainer

    tmp = tmp_path_factory.mktemp("tagging")
    config = tiny_config(vocab_size=8000, max_position_embeddings=64, initializer_range=0.2)
    config.to_json_file(tmp / "albert_config.json")
    pretrained = tmp / "pretrained"
    pretrained.mkdir()
    config.to_json_file(pretrained / "albert_config.json")
    tf.train.Checkpoint(model=AlbertPretrainer(config)).save(str(pretrained / "ckpt"))
    out, export = tmp / "run", tmp / "exports" / "wnut"
    args = ["--train_file", WNUT_TRAIN, "--dev_file", WNUT_DEV, "--test_file", WNUT_DEV,
            "--albert_config_file", str(tmp / "albert_config.json"),
            "--spm_model_file", sample_vocab, "--init_checkpoint", str(pretrained),
            "--output_dir", str(out), "--do_train", "--do_eval", "--do_predict",
            "--max_seq_length", "24", "--train_batch_size", "16", "--eval_batch_size", "16",
            "--predict_batch_size", "16", "--train_step", "6", "--warmup_step", "1",
            "--save_checkpoints_steps", "6", "--iterations_per_loop", "3",
            "--learning_rate", "1e-3", "--export_dir", str(export)]
    proc = run_command("albert_tf.run_tagging", *args, process=True)  # `python -m` itself
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, export / "1", proc.stdout


@pytest.mark.slow
def test_run_tagging_trains_evaluates_predicts_and_exports(tagging_run):
    out, _, stdout = tagging_run
    assert "train: 300 sentences" in stdout and "dev: 100 sentences" in stdout
    results = json.load(open(out / "eval_results.json"))
    assert results["global_step"] == 6 and results["task"] == "tagging"
    assert {"token_accuracy", "entity_precision", "entity_recall", "entity_f1"} <= set(results)
    dev, _ = conll.read_tagged_file(WNUT_DEV)
    lines = open(out / "predictions.conll", encoding="utf-8").read().split("\n\n")
    assert len(lines) == len(dev)
    rows = [line.split("\t") for block in lines for line in block.splitlines()]
    assert len(rows) == sum(len(s.words) for s in dev)
    assert all(len(r) == 3 for r in rows)  # word, gold tag, predicted tag
    labels = json.load(open(out / "labels.json"))
    assert labels[0] == "O" and len(labels) == 13 and {r[2] for r in rows} <= set(labels)
    test = json.load(open(out / "test_results.json"))
    assert test["token_accuracy"] == pytest.approx(results["token_accuracy"])


def _predicted_tags(out):
    blocks = open(out / "predictions.conll", encoding="utf-8").read().split("\n\n")
    return [[line.split("\t")[-1] for line in b.splitlines()] for b in blocks if b.strip()]


@pytest.mark.slow
def test_export_tags_as_do_predict_does(tagging_run):
    import tensorflow_text  # noqa: F401

    out, version, _ = tagging_run
    dev, _ = conll.read_tagged_file(WNUT_DEV)
    served = tf.saved_model.load(str(version)).signatures["serving_default"](
        text=tf.constant([" ".join(s.words) for s in dev]))
    counts = served["num_words"].numpy()
    tags = [[t.decode() for t in row[:n]] for row, n in zip(served["tags"].numpy(), counts)]
    assert counts.tolist() == [len(s.words) for s in dev]
    assert served["num_windows"].numpy().max() > 1  # long sentences split in the graph too
    assert tags == _predicted_tags(out)
    assert served["words"].numpy()[0, 0].decode() == dev[0].words[0]
    empty = tf.saved_model.load(str(version)).signatures["serving_default"](
        text=tf.constant(["", "Hello there"]))
    assert empty["num_words"].numpy().tolist() == [0, 2]
    assert empty["tags"].numpy()[0].tolist() == [b"", b""]


@pytest.mark.slow
def test_export_tags_through_the_cpp_loader(tagging_run, serving_loader, tmp_path):
    from albert_tf.export.cc_loader import LoaderError, run_loader

    out, version, _ = tagging_run
    binary, info = serving_loader
    dev, _ = conll.read_tagged_file(WNUT_DEV)
    inputs = {"text": np.array([" ".join(s.words).encode() for s in dev[:12]], object)}
    result = run_loader(binary, str(version), info["op_libraries"], "serving_default", inputs,
                        str(tmp_path))
    counts = result["outputs"]["num_words"]
    tags = [[t.decode() if isinstance(t, bytes) else t for t in row[:n]]
            for row, n in zip(result["outputs"]["tags"], counts)]
    assert tags == _predicted_tags(out)[:12]
    # TF Serving's Session::Run feeds any shape: the rank rule holds there too (it is read
    # from values, so graph optimization cannot fold it to the signature's rank)
    with pytest.raises(LoaderError) as raised:
        run_loader(binary, str(version), info["op_libraries"], "serving_default",
                   {"text": inputs["text"][:4].reshape(2, 2)}, str(tmp_path / "rank2"))
    assert ("INVALID_ARGUMENT: assertion failed: [text must be a 1-D batch of strings (shape "
            "[batch]); got shape [2,2]]") in str(raised.value)


@pytest.mark.slow
def test_export_answers_batches_with_empty_texts(tagging_run):
    """Texts without words (empty or blank) get num_words 0, num_windows 0 (no window runs for
    them) and empty tag rows, in a batch of one, of several, and beside texts with words (whose
    answers are those of the text alone); before, one empty text gave num_windows of shape [0]
    and a batch of only empty texts failed ("Incompatible shapes: [3] vs. [0]")."""
    serve = tf.saved_model.load(str(tagging_run[1])).signatures["serving_default"]
    for texts in ([""], ["", " ", "\t"]):
        got = serve(text=tf.constant(texts))
        n = len(texts)
        assert {k: v.shape.as_list() for k, v in got.items()} == {
            "words": [n, 0], "tags": [n, 0], "tag_ids": [n, 0], "scores": [n, 0],
            "num_words": [n], "num_windows": [n]}, texts
        assert got["num_words"].numpy().tolist() == got["num_windows"].numpy().tolist() == [0] * n
    alone = serve(text=tf.constant(["Hello there"]))
    mixed = serve(text=tf.constant(["", "Hello there", " "]))
    assert mixed["num_words"].numpy().tolist() == [0, 2, 0]
    assert mixed["num_windows"].numpy().tolist() == [0, 1, 0]
    assert mixed["tags"].numpy().tolist()[0::2] == [[b"", b""]] * 2
    assert mixed["tag_ids"].numpy().tolist()[0::2] == [[-1, -1]] * 2
    for key in ("words", "tags", "tag_ids", "scores"):
        np.testing.assert_array_equal(mixed[key].numpy()[1], alone[key].numpy()[0], err_msg=key)


@pytest.mark.slow
def test_export_refuses_text_that_is_not_a_batch_of_strings(tagging_run):
    """Every signature of the tagging export that takes strings refuses a text tensor of
    another rank with an error naming the input and the shape (before: StringSplit's "input
    must be a vector, got shape: [2,2]"); a loaded signature, like TF Serving, feeds any
    shape."""
    loaded = tf.saved_model.load(str(tagging_run[1]))
    checked = []
    for name, fn in loaded.signatures.items():
        inputs = fn.structured_input_signature[1]
        if any(spec.dtype != tf.string for spec in inputs.values()):
            continue
        for value, shape in (([["a b", "c"], ["d", "e"]], "[2,2]"), ("a b", "[]")):
            with pytest.raises(tf.errors.InvalidArgumentError) as raised:
                fn(**{key: tf.constant(value) for key in inputs})
            assert (f"assertion failed: [text must be a 1-D batch of strings (shape [batch]); "
                    f"got shape {shape}]") in raised.value.message.splitlines(), name
        checked.append(name)
    assert checked == ["serving_default"]


def _with_docstarts(path, source=WNUT_DEV, every=30) -> tuple[str, int]:
    """`source` with a "-DOCSTART-" line (and its blank line) before its first sentence and
    every `every` sentences after it; returns (path, the number of separators)."""
    blocks = open(source, encoding="utf-8").read().strip("\n").split("\n\n")
    out, count = [], 0
    for i, block in enumerate(blocks):
        if i % every == 0:
            out.append("-DOCSTART-\tO")
            count += 1
        out.append(block)
    path.write_text("\n\n".join(out) + "\n", encoding="utf-8")
    return str(path), count


def _rerun(tagging_run, sample_vocab, tmp_path, *args) -> tuple:
    """run_tagging in this process on a copy of `tagging_run`'s output directory (its tag set
    and checkpoint; nothing trained): (exit status, copy)."""
    out = tagging_run[0]
    run = tmp_path / "run"
    shutil.copytree(out, run)
    for name in ("eval_results.json", "test_results.json", "predictions.conll"):
        (run / name).unlink(missing_ok=True)
    code = run_cli("albert_tf.run_tagging", "--albert_config_file",
                   str(out.parent / "albert_config.json"), "--spm_model_file", sample_vocab,
                   "--output_dir", str(run), "--max_seq_length", "24",
                   "--eval_batch_size", "16", "--predict_batch_size", "16", *args)
    return code, run


@pytest.mark.slow
def test_docstart_lines_are_not_evaluated_tagged_or_counted(tagging_run, sample_vocab, tmp_path,
                                                            capsys):
    """The dev slice with -DOCSTART- separators evaluates and predicts exactly as without them:
    the same eval and test scores, the same sentence counts and predictions.conll byte for
    byte (before, each separator was a one-word sentence: 104 dev sentences, tagged)."""
    path, count = _with_docstarts(tmp_path / "dev_docs.conll")
    code, run = _rerun(tagging_run, sample_vocab, tmp_path, "--do_eval", "--do_predict",
                       "--dev_file", path, "--test_file", path)
    stdout = capsys.readouterr().out
    assert code == 0 and count == 4
    out = tagging_run[0]
    assert f"dev: skipped 4 -DOCSTART- document separator line(s) of {path}" in stdout
    assert "dev: 100 sentences" in stdout and f"tagged 100 sentences of {path}" in stdout
    assert (run / "predictions.conll").read_bytes() == (out / "predictions.conll").read_bytes()
    got, want = (json.loads((d / "test_results.json").read_text()) for d in (run, out))
    assert got.pop("file") == path and want.pop("file") == WNUT_DEV and got == want
    got, want = (json.loads((d / "eval_results.json").read_text()) for d in (run, out))
    for key in ("token_accuracy", "entity_precision", "entity_recall", "entity_f1"):
        assert got[key] == want[key], key


@pytest.mark.slow
def test_unannotated_conllu_is_tagged_by_do_predict_and_refused_by_do_eval(
        tagging_run, sample_vocab, tmp_path, capsys):
    """A CoNLL-U file with UPOS "_" everywhere: --do_predict tags it (predictions.conll: each
    token line with a predicted tag of the model's set, no test_results.json); --do_eval on it
    is refused in one line naming the file and line."""
    path = _unannotated(tmp_path / "raw.conllu", source=EWT_DEV)
    sentences, _ = conll.read_tagged_file(path, require_tags=False)
    code, run = _rerun(tagging_run, sample_vocab, tmp_path, "--do_predict", "--test_file",
                       path)
    assert code == 0, capsys.readouterr().err[-2000:]
    assert f"tagged {len(sentences):,} sentences of {path}" in capsys.readouterr().out
    blocks = (run / "predictions.conll").read_text(encoding="utf-8").split("\n\n")
    assert len(blocks) == len(sentences)
    rows = [line.split("\t") for block in blocks for line in block.splitlines()]
    assert [r[1] for r in rows] == [w for s in sentences for w in s.words]
    labels = json.loads((run / "labels.json").read_text())
    assert all(len(r) == 11 and r[3] == "_" and r[10] in labels for r in rows)
    assert not (run / "test_results.json").exists()
    code, _ = _rerun(tagging_run, sample_vocab, tmp_path / "eval", "--do_eval", "--dev_file",
                     path)
    first = sentences[0].line_numbers[0]
    assert code == 1 and capsys.readouterr().err.splitlines()[-1] == (
        f"error: {path}, line {first}: UPOS '_' (unannotated): training and evaluation need "
        "every token's tag; tag the file, or pass it as --test_file with --do_predict alone to "
        "tag it.")


def _easy_tagged_sentences(count: int, seed: int) -> list:
    """[[(word, tag)]] of an easy BIO set (docs/tagging.md, "Collapse to the tag prior"): a
    number is B-NUM and a unit after it I-NUM, a `name(...)` word B-CALL, any other word O."""
    rng = np.random.default_rng(seed)
    plain = ("the of a to and is in that it for as with was on be by this are from at or "
             "have an which one all were when there can their been has more if will would "
             "about into time only new some could these two may first then do any like my "
             "now over such our man me even most made after also did many before must").split()
    calls = ("open(file)", "len(x)", "print(value)", "sorted(items)", "read()", "close()",
             "split(sep)", "join(parts)", "append(item)", "get(key)")
    units = ("seconds", "bytes", "lines", "days")
    sentences = []
    for _ in range(count):
        words = [(w, "O") for w in rng.choice(plain, int(rng.integers(6, 12)))]
        for _ in range(2):
            at = int(rng.integers(0, len(words) + 1))
            if rng.random() < 0.5:
                entity = [(str(int(rng.integers(2, 999))), "B-NUM")]
                if rng.random() < 0.5:
                    entity.append((str(rng.choice(units)), "I-NUM"))
            else:
                entity = [(str(rng.choice(calls)), "B-CALL")]
            words[at:at] = entity
        sentences.append(words)
    return sentences


@pytest.mark.slow
def test_run_tagging_overfits_a_small_easy_set(tmp_path, sample_vocab):
    """The training loop can learn entities: a tiny random-initialised model trained on 24
    easy sentences and evaluated on them reaches entity F1 >= 0.9 (labels, loss masking,
    optimizer and head all on the path). A user's "every word O" on a similar set came from
    the backbone's representation collapsing to one vector for every token, which depends on
    the seed (docs/tagging.md), not from the pipeline."""
    train = tmp_path / "easy.conll"
    train.write_text("".join("".join(f"{w}\t{t}\n" for w, t in s) + "\n"
                             for s in _easy_tagged_sentences(24, seed=3)))
    out = tmp_path / "run"
    proc = run_command(
        "albert_tf.run_tagging", "--train_file", str(train),
         "--dev_file", str(train), "--albert_config_file",
         os.path.join(ROOT, "albert_tf", "sample_data", "albert_config_tiny.json"),
         "--spm_model_file", sample_vocab, "--output_dir", str(out), "--do_train",
         "--do_eval", "--max_seq_length", "32", "--train_batch_size", "16",
         "--eval_batch_size", "8", "--learning_rate", "1e-3", "--train_step", "150",
         "--warmup_step", "0", "--save_checkpoints_steps", "150",
         "--iterations_per_loop", "50", "--random_seed", "12345")
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((out / "eval_results.json").read_text())
    assert results["entity_f1"] >= 0.9, results
