"""The WordPiece tokenizer (the Chinese models' `vocab_chinese.txt`): the official FullTokenizer's
tokens and ids, in Python and in-graph, and the factory that picks it by the file given."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.input_pipeline import parse_fn
from albert_tf.tokenization import (Tokenizer, WordPieceTokenizer, basic_tokenize,
                                    load_wordpiece_vocab, make_tokenizer)
from conftest import run_command
from albert_tf.data.generator import generate, make_job
from test_tokenization import official_module

# Chinese, English and mixed text: full-width and ASCII punctuation, accents, digits, CJK
# extension and compatibility characters, kana and Hangul (not CJK: words of their own), control
# and format characters, unusual spaces, characters missing from the vocabulary (emoji, Thai), an
# over-long word, a word-final capital sigma.
SENTENCES = [
    "我爱北京天安门。",
    "今天天气很好，我们去公园散步吧！",
    "ALBERT 是一个轻量级的 BERT 模型，参数量只有 1200 万。",
    "他说：“这本书《红楼梦》非常有意思。”",
    "2019年12月30日，谷歌发布了中文模型。",
    "价格是3.14元，折扣20%；总计1,000元。",
    "请问：你会说English吗？我会一点儿。",
    "The quick brown fox jumps over the lazy dog.",
    "Transformers are state-of-the-art models for natural language processing!",
    "She said, \"It's a beautiful day,\" and smiled.",
    "Café, naïve, résumé, Ångström and façade keep their accents only when cased.",
    "ÉCOLE NORMALE SUPÉRIEURE, Zürich and São Paulo.",
    "E-mail me at someone@example.com or visit https://example.com/path?q=1.",
    "Numbers: 42, 3.14159, 1,000,000 and 1e-5 (scientific).",
    "Tabs\tand\nnewlines\r\nand  double  spaces.",
    "No\u00a0break\u3000ideographic\u2028line separator here.",
    "Zero\u200bwidth and a NUL\x00 and a replacement\ufffd character vanish.",
    "Unknown characters: 😀 and ไทย stay unknown.",
    "日本語のテキストとカタカナ、そして한국어도 섞여 있습니다.",
    "Compatibility ideograph 豈 and extension B 𠀀 are CJK too.",
    "supercalifragilisticexpialidocious is long but not too long.",
    "a" * 250 + " is over two hundred characters long.",
    "b" * 200 + " is exactly two hundred.",
    "Mixed北京Beijing混合text和中文。",
    "Don't split can't, won't — or the em-dash…",
    "Ellipsis... and (parentheses) [brackets] {braces} <angles>.",
    "ΟΔΟΣ is Greek for road; Σ at the end of a word.",
    "Straße and İstanbul lowercase differently.",
    "ﬁne ligatures and ① circled digits are not NFKD-normalised here.",
    "Ｆｕｌｌ－ｗｉｄｔｈ ＡＳＣＩＩ ａｎｄ　１２３。",
    "The year 2020 was unusual; the year 2021, less so.",
    "Running, jumped, quickly, happiness, nationalization.",
    "中文标点：、；！？（）【】「」『』",
    "Emoji in a word: fun😀ny.",
    "   leading and trailing spaces   ",
    "",
]
UNKNOWN = set("😀ไทย龘")
SUFFIXES = ("##ing", "##ed", "##s", "##ly", "##tion", "##ness", "##er", "##al", "##ize")


def _write_vocab(path, official_basic) -> list[str]:
    """A vocab_chinese.txt-like file: [PAD] 0, [unused1..99], [UNK] 100, [CLS] 101, [SEP] 102,
    [MASK] 103, then every CJK character and half the words of the text (lowercased and cased),
    every other character alone and as "##" continuation, and a few suffixes."""
    words = set()
    for lower in (True, False):
        basic = official_basic(do_lower_case=lower)
        for s in SENTENCES:
            words.update(basic.tokenize(s))
    words = sorted(w for w in words if len(w) <= 40 and not set(w) & UNKNOWN)
    tokens = ["[PAD]"] + [f"[unused{i}]" for i in range(1, 100)]
    tokens += ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokens += words[::2]
    chars = sorted({c for w in words for c in w})
    tokens += [t for c in chars for t in (c, "##" + c)]
    tokens += list(SUFFIXES)
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in tokens))
    return tokens


@pytest.fixture(scope="module")
def official():
    return official_module("albert.tokenization")


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory, official):
    path = str(tmp_path_factory.mktemp("wordpiece") / "vocab.txt")
    _write_vocab(path, official.BasicTokenizer)
    return path


@pytest.mark.needs_shared("official_albert")
@pytest.mark.parametrize("do_lower_case", [True, False])
def test_tokens_and_ids_are_the_official_ones(official, vocab_file, do_lower_case):
    """Every sentence, cased and uncased: the official FullTokenizer's tokens and ids."""
    judge = official.FullTokenizer(vocab_file, do_lower_case)
    tok = make_tokenizer(vocab_file=vocab_file, do_lower_case=do_lower_case)
    assert isinstance(tok, WordPieceTokenizer) and tok.kind == "wordpiece"
    assert tok.vocab == dict(judge.vocab) and tok.vocab_size == len(judge.vocab)
    unknowns = 0
    for s in SENTENCES:
        assert basic_tokenize(s, do_lower_case) == judge.basic_tokenizer.tokenize(s), s
        pieces = judge.tokenize(s)
        assert tok.tokenize(s) == pieces, s
        assert tok.encode(s) == judge.convert_tokens_to_ids(pieces), s
        assert tok.ids_to_pieces(tok.encode(s)) == pieces
        unknowns += pieces.count("[UNK]")
    # "😀", "ไทย", the 250-character word, "fun😀ny" (So is not punctuation: one word)
    assert unknowns == 4
    assert tok.tokenize("b" * 200) == ["b"] + ["##b"] * 199
    assert tok.tokenize("a" * 201) == ["[UNK]"]
    pieces = tok.tokenize("Ångström")
    assert "".join(p.lstrip("#") for p in pieces) == ("angstrom" if do_lower_case else
                                                      "Ångström")


@pytest.mark.needs_shared("official_albert")
def test_in_graph_equals_python(vocab_file):
    """The in-graph tokenizer gives the Python ids for every sentence, cased and uncased (the
    word-final sigma included: TensorFlow's lowering is ICU's whole-string one); so does
    `encode_with_masks`, [MASK] markers anywhere."""
    for do_lower_case in (False, True):
        tok = make_tokenizer(vocab_file=vocab_file, do_lower_case=do_lower_case)
        graph = tok.in_graph()
        ids = graph(tf.constant(SENTENCES)).to_list()
        assert ids == [tok.encode(s) for s in SENTENCES]
    assert tok.encode("ΟΔΟΣ Σ")[:4] == tok.pieces_to_ids(["ο", "##δ", "##ο", "##ς"])
    masked = ["我爱[MASK]京。", "[MASK] is the capital of [MASK].", "no mask", "[MASK]",
              "Zürich[MASK][MASK]北京"]
    got = graph.encode_with_masks(tf.constant(masked)).to_list()
    assert got == [tok.encode_with_masks(t) for t in masked]
    assert got[3] == [tok.mask_id] == [103]
    assert graph.id_to_piece(tf.constant([100, 101, 102, 103])).numpy().tolist() == [
        b"[UNK]", b"[CLS]", b"[SEP]", b"[MASK]"]
    assert graph.pieces_to_ids(tf.constant(["[MASK]", "##b"])).numpy().tolist() == [
        103, tok.vocab["##b"]]


@pytest.mark.needs_shared("official_albert")
def test_special_ids_and_masking_tables_come_from_the_vocabulary(vocab_file):
    tok = WordPieceTokenizer(vocab_file)
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 100, 101, 102,
                                                                            103)
    assert tok.vocabulary_file == vocab_file and len(tok.sha256) == 64
    # Whole-word masking: "##" pieces continue a word (official `_is_start_piece_bert`).
    starts = tok.start_piece_mask
    assert not starts[tok.vocab["##b"]] and starts[tok.vocab["b"]] and starts[tok.vocab["我"]]
    assert int((~starts).sum()) == sum(t.startswith("##") for t in tok.vocab)
    # Random replacements: no padding, no reserved "[...]" token; "[" and "]" themselves stay.
    replace = set(tok.replacement_ids.tolist())
    assert not replace & set(range(104))
    assert {tok.vocab["["], tok.vocab["]"]} <= replace
    assert len(replace) == tok.vocab_size - 104


@pytest.mark.needs_shared("official_albert")
def test_vocabulary_file_is_read_as_official_load_vocab(tmp_path, official):
    """Duplicate lines keep their first id (ids count distinct tokens), a blank line is " ",
    a line's first field is the token (a SentencePiece .vocab's scores are ignored)."""
    path = tmp_path / "vocab.txt"
    path.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\t-1.5\nworld\nhello\n\n"
                    "##s 0\r\nlast", encoding="utf-8")
    vocab = load_wordpiece_vocab(str(path))
    assert vocab == dict(official.load_vocab(str(path)))
    assert vocab == {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4, "hello": 5,
                     "world": 6, " ": 7, "##s": 8, "last": 9}
    assert WordPieceTokenizer(str(path)).encode("Hello worlds!") == [5, 6, 8, 1]


def _small_sentencepiece(tmp_path) -> str:
    """A 120-piece SentencePiece model with the official special ids (and its .vocab)."""
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(SENTENCES[7:14] * 20), model_prefix=str(tmp_path / "small"),
        vocab_size=120, pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
        control_symbols=["[CLS]", "[SEP]", "[MASK]"], minloglevel=2)
    return str(tmp_path / "small.model")


def test_factory_picks_by_the_file_given(tmp_path):
    """--spm_model_file: SentencePiece (a --vocab_file beside it must list its pieces);
    --vocab_file alone: WordPiece; neither, or a vocabulary without the specials: refused."""
    sample_vocab = _small_sentencepiece(tmp_path)
    assert isinstance(make_tokenizer(sample_vocab), Tokenizer)
    assert make_tokenizer(sample_vocab, sample_vocab[:-len(".model")] + ".vocab").kind == \
        "sentencepiece"
    bad = tmp_path / "other.vocab"
    bad.write_text("a\t0\n")
    assert make_tokenizer(sample_vocab).cls_id == 2
    with pytest.raises(ValueError, match="lists 1 pieces"):
        make_tokenizer(sample_vocab, str(bad))
    with pytest.raises(ValueError, match=r"pass --spm_model_file .* or --vocab_file alone"):
        make_tokenizer()
    (tmp_path / "few.txt").write_text("[PAD]\n[UNK]\n[CLS]\nword\n")
    with pytest.raises(ValueError, match=r"few.txt lacks \['\[SEP\]'\]: "):
        make_tokenizer(vocab_file=str(tmp_path / "few.txt"))
    with pytest.raises(ValueError, match=r"not UTF-8 text.*Pass it as --spm_model_file"):
        make_tokenizer(vocab_file=sample_vocab)
    (tmp_path / "ok.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n")
    tok = make_tokenizer(vocab_file=str(tmp_path / "ok.txt"))
    assert np.array_equal(tok.start_piece_mask, [True] * 5) and len(tok.replacement_ids) == 0
    with pytest.raises(ValueError, match="TensorFlow Lite export takes a SentencePiece"):
        tok.on_device()


# ---------------------------------------------------------------------------------------------
# Data generation with --vocab_file alone.
def _corpus(path) -> list:
    """Documents of `SENTENCES` (non-empty ones, five a document) in the official format."""
    lines = [s.strip() for s in SENTENCES if s.strip()]
    documents = [lines[i:i + 5] for i in range(0, len(lines), 5)]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n\n".join("\n".join(d) for d in documents) + "\n")
    return documents


def _is_run_of(segment, tokens) -> bool:
    n = len(segment)
    return any(tokens[i:i + n] == segment for i in range(len(tokens) - n + 1))


def _check_records(path, judge, documents, seq, preds):
    """Every record, its masked positions restored, is [CLS] A [SEP] B [SEP] with A and B runs
    of the official tokens of one document, and about 80% of its masked positions hold [MASK];
    returns (records, masked positions)."""
    doc_tokens = [[t for s in d for t in judge.tokenize(s)] for d in documents]
    ids = judge.convert_tokens_to_ids(["[CLS]", "[SEP]", "[MASK]"])
    parse = parse_fn(seq, preds)
    records = masked = masks = 0
    for record in tf.data.TFRecordDataset(path):
        x = {k: v.numpy() for k, v in parse(record).items()}
        n = int(x["input_mask"].sum())
        tokens = x["input_ids"][:n].copy()
        k = int(x["masked_lm_weights"].sum())
        masks += int((tokens[x["masked_lm_positions"][:k]] == ids[2]).sum())
        tokens[x["masked_lm_positions"][:k]] = x["masked_lm_ids"][:k]
        pieces = judge.convert_ids_to_tokens(tokens.tolist())
        assert tokens[0] == ids[0] and tokens[n - 1] == ids[1]
        sep = pieces.index("[SEP]")
        for segment in (pieces[1:sep], pieces[sep + 1:n - 1]):
            assert segment and any(_is_run_of(segment, d) for d in doc_tokens), segment
        records += 1
        masked += k
    assert 0.65 < masks / masked < 0.95, (masks, masked)
    return records, masked


@pytest.mark.needs_shared("official_albert")
def test_a_vocabulary_without_mask_tokenizes_and_is_refused_for_pretraining_data(
        tmp_path, official, vocab_file):
    """The official `load_vocab` reads a vocabulary without [MASK] (the official tests' own has
    none) and FullTokenizer tokenizes with it: so do we, in Python and in the graph, a literal
    "[MASK]" being text there; pretraining data, which masks with it, is refused by name
    before anything is written."""
    no_mask = tmp_path / "vocab.txt"
    no_mask.write_text("".join(line for line in open(vocab_file, encoding="utf-8")
                               if line.strip() != "[MASK]"), encoding="utf-8")
    judge = official.FullTokenizer(str(no_mask), True)
    tok = make_tokenizer(vocab_file=str(no_mask))
    assert tok.mask_id is None and "[MASK]" not in judge.vocab
    texts = SENTENCES + ["Paris is the capital of [MASK]."]
    for text in texts:
        pieces = judge.tokenize(text)
        assert tok.tokenize(text) == pieces and tok.encode(text) == \
            judge.convert_tokens_to_ids(pieces), text
        assert tok.encode_with_masks(text) == tok.encode(text)
    graph = tok.in_graph()
    assert graph.mask_id is None
    got = graph.encode_with_masks(tf.constant(texts)).to_list()
    assert got == [tok.encode(t) for t in texts]
    (tmp_path / "corpus.txt").write_text("One sentence here.\nAnother one.\n\nA third.\n")
    job = make_job(str(tmp_path / "corpus.txt"), str(tmp_path / "out" / "x.tfrecord"), None,
                   vocab_file=str(no_mask), max_seq_length=32, max_predictions_per_seq=5)
    with pytest.raises(ValueError, match=r"vocab.txt has no \[MASK\] token, which masked-LM "
                                         r"pretraining data is made with: add a \[MASK\] line"):
        generate(job, progress=False)
    assert not (tmp_path / "out").exists()


@pytest.mark.needs_shared("official_albert")
def test_generation_with_a_wordpiece_vocabulary(tmp_path, official, vocab_file):
    """`--vocab_file` without `--spm_model_file`: the records' ids, masks undone, are the
    official FullTokenizer's tokens of the text ([CLS] 101, [SEP] 102, [MASK] 103); the sidecar
    names the vocabulary, which is copied beside the records."""
    documents = _corpus(tmp_path / "corpus.txt")
    job = make_job(str(tmp_path / "corpus.txt"), str(tmp_path / "out" / "zh.tfrecord"), None,
                   vocab_file=vocab_file, max_seq_length=32, max_predictions_per_seq=5,
                   dupe_factor=3, random_seed=7)
    summary = generate(job, progress=False)
    judge = official.FullTokenizer(vocab_file, True)
    records, masked = _check_records(job.output_files[0], judge, documents, 32, 5)
    assert records == summary["total_examples"] > 20 and masked == summary["counts"][
        "masked_positions"]
    meta = json.load(open(job.output_files[0] + ".json"))
    assert meta["vocab_file"] == "vocab.txt" and "spm_model_file" not in meta
    assert meta["vocab_size"] == len(judge.vocab)
    copied = tmp_path / "out" / "vocab.txt"
    assert copied.read_bytes() == open(vocab_file, "rb").read()


@pytest.mark.needs_shared("official_albert")
@pytest.mark.slow
def test_generation_command_takes_vocab_file_alone(tmp_path, official, vocab_file):
    """The official command line of a WordPiece model; neither vocabulary flag is refused."""
    documents = _corpus(tmp_path / "corpus.txt")
    command = ["albert_tf.data.create_pretraining_data", "--input_file",
               str(tmp_path / "corpus.txt"), "--output_file", str(tmp_path / "zh.tfrecord"),
               "--do_lower_case", "--max_seq_length", "24", "--max_predictions_per_seq", "4",
               "--dupe_factor", "2", "--random_seed", "3"]
    run = run_command(*command, "--vocab_file", vocab_file)
    assert run.returncode == 0, run.stderr
    records, _ = _check_records(str(tmp_path / "zh.tfrecord"),
                                official.FullTokenizer(vocab_file, True), documents, 24, 4)
    assert f"wrote {records:,} examples" in run.stdout
    run = run_command(*command)
    assert run.returncode != 0 and "--spm_model_file (a SentencePiece model) or --vocab_file " \
        "alone (a WordPiece vocabulary) is required." in run.stderr


# ---------------------------------------------------------------------------------------------
# Fine-tuning features.
@pytest.mark.needs_shared("official_albert")
def test_fine_tuning_features_are_the_official_tokens(official, vocab_file):
    """GLUE pairs and single sentences, and RACE questions, packed with a WordPiece vocabulary:
    [CLS] A [SEP] B [SEP] of the official tokens, [CLS] 101 and [SEP] 102 (the vocabulary's),
    truncated as before (longest first)."""
    from albert_tf.packing import pack_ids
    from albert_tf.tasks import classification, glue, race

    judge = official.FullTokenizer(vocab_file, True)
    tok = make_tokenizer(vocab_file=vocab_file)
    rte, cola = glue.get_task("rte"), glue.get_task("cola")
    for a, b in zip(SENTENCES[:12], SENTENCES[12:24]):
        for task, text_b in ((rte, b), (cola, None)):
            example = glue.InputExample("dev-0", a, text_b, task.labels[0])
            features = classification.example_features(example, task, tok, 512)
            tokens = ["[CLS]", *judge.tokenize(a), "[SEP]"]
            if text_b is not None and judge.tokenize(b):
                tokens += [*judge.tokenize(b), "[SEP]"]
            n = sum(features["input_mask"])
            assert features["input_ids"][:n] == judge.convert_tokens_to_ids(tokens), (a, b)
            assert features["input_ids"][n:] == [0] * (512 - n)
    ids, segments = pack_ids(tok.encode(SENTENCES[1]), tok.encode(SENTENCES[8]), 12, tok)
    assert ids[0] == 101 and ids.count(102) == 2 and len(ids) == 12
    assert ids == [101, *tok.encode(SENTENCES[1])[:5], 102, *tok.encode(SENTENCES[8])[:4], 102]
    assert segments == [0] * 7 + [1] * 5
    question = race.RaceExample("p-0", "middle", SENTENCES[1], "天气 _ 好。",
                                ("很", "不", "Very", "太"), 0)
    features, cut = race.example_features(question, tok, 40, 10)
    rows = np.reshape(features["input_ids"], (4, 40))
    for row, choice in zip(rows, [question.question.replace("_", o) for o in question.options]):
        tokens = ["[CLS]", *judge.tokenize(SENTENCES[1]), "[SEP]", *judge.tokenize(choice),
                  "[SEP]"]
        assert row[:len(tokens)].tolist() == judge.convert_tokens_to_ids(tokens)
    assert not cut


# ---------------------------------------------------------------------------------------------
# Serving: a SavedModel on raw text with a WordPiece vocabulary.
SERVED = ["今天[MASK]情很好。", "The capital of France is [MASK].", "Mixed北京Beijing混合text和中文。",
          "Café naïve résumé 😀 " + "a" * 250, "[MASK][MASK] 2019年12月30日"]
SERVED_B = ["天气很好", "", "English and 中文 together, with punctuation!", "ไทย", "b"]


@pytest.mark.needs_shared("official_albert")
@pytest.mark.slow
def test_saved_model_on_raw_text_equals_the_python_path(tmp_path, vocab_file):
    """A pretrainer exported with --vocab_file alone: serving_default and serve_text_pair pack
    the Python tokenizer's ids ([CLS] 101, [SEP] 102, [MASK] 103 found as the masks), and answer
    as the Keras model does on them (pooled output and fill-mask top 3 within 1e-5, the pieces
    of the vocabulary); the export record names the vocabulary."""
    import tensorflow_text  # noqa: F401 - the ops of the SavedModel

    from albert_tf.packing import pack_ids, pad_features
    from albert_tf.models.pretrainer import AlbertPretrainer
    from conftest import assert_serves_tokens, randomize, tiny_config
    from albert_tf.export.saved_model import export_saved_model

    tok = make_tokenizer(vocab_file=vocab_file)
    model = AlbertPretrainer(tiny_config(vocab_size=tok.vocab_size))
    randomize(model, 3)
    path = export_saved_model(model, str(tmp_path / "exports" / "zh"), None, max_seq_length=24,
                              top_k=3, vocab_file=vocab_file)
    record = json.load(open(os.path.join(path, "assets.extra", "albert_export.json")))
    assert record["vocab_file"] == "vocab.txt" and "sentencepiece_model" not in record
    loaded = tf.saved_model.load(path)
    for texts_b in (None, SERVED_B):
        packed = [pack_ids(tok.encode_with_masks(a), None if texts_b is None else
                           tok.encode_with_masks(texts_b[i]), 24, tok)
                  for i, a in enumerate(SERVED)]
        length = max(len(ids) for ids, _ in packed)
        rows = [pad_features(ids, seg, length) for ids, seg in packed]
        tokens = {k: np.array([r[k] for r in rows], np.int32)
                  for k in ("input_ids", "input_mask", "segment_ids")}
        got = assert_serves_tokens(loaded, SERVED, texts_b, tokens)
        ids = tokens["input_ids"]
        assert (ids[:, 0] == 101).all() and (ids == 103).sum() == 4
        positions = got["mask_positions"].numpy()
        out = model({**tokens, "masked_lm_positions": np.maximum(positions, 0)}, training=False)
        np.testing.assert_allclose(got["pooled_output"].numpy(), out["pooled_output"].numpy(),
                                   atol=1e-5, rtol=0)
        probs = tf.nn.softmax(out["mlm_logits"], -1).numpy()
        for row, col in zip(*np.nonzero(positions >= 0)):
            best = np.argsort(-probs[row, col])[:3]
            np.testing.assert_array_equal(got["fill_mask_ids"].numpy()[row, col], best)
            assert [p.decode() for p in got["fill_mask_pieces"].numpy()[row, col]] == \
                tok.ids_to_pieces(best)


@pytest.mark.needs_shared("official_albert")
@pytest.mark.slow
def test_run_classifier_with_a_wordpiece_vocabulary(tmp_path, vocab_file):
    """`run_classifier --vocab_file` (no --spm_model_file) on Chinese sentence pairs: it
    fine-tunes and evaluates, keeps the vocabulary beside its checkpoints, and its --export_dir
    SavedModel packs a raw pair as the Python tokenizer does ([CLS] 101, [SEP] 102)."""
    import tensorflow_text  # noqa: F401 - the ops of the SavedModel

    from albert_tf import AlbertConfig
    from albert_tf.packing import pack_ids

    tok = make_tokenizer(vocab_file=vocab_file)
    data = tmp_path / "RTE"
    data.mkdir()
    lines = [s for s in SENTENCES if s.strip() and len(s) < 120 and not set(s) & set("\t\r\n")]
    for split, n in (("train", 24), ("dev", 8)):
        rows = [f"{i}\t{lines[i % len(lines)]}\t{lines[(i * 7 + 3) % len(lines)]}\t"
                f"{('entailment', 'not_entailment')[i % 2]}" for i in range(n)]
        (data / f"{split}.tsv").write_text("index\tsentence1\tsentence2\tlabel\n"
                                           + "\n".join(rows) + "\n", encoding="utf-8")
    AlbertConfig(vocab_size=tok.vocab_size, embedding_size=16, hidden_size=32,
                 num_hidden_layers=2, num_attention_heads=4, intermediate_size=40,
                 max_position_embeddings=64, hidden_act="relu").to_json_file(
                     tmp_path / "albert_config.json")
    out = tmp_path / "run"
    args = ["--task_name", "RTE", "--data_dir", str(data), "--albert_config_file",
            str(tmp_path / "albert_config.json"), "--vocab_file", vocab_file, "--output_dir",
            str(out), "--do_train", "--do_eval", "--max_seq_length", "32",
            "--train_batch_size", "8", "--eval_batch_size", "8", "--train_step", "2",
            "--warmup_step", "1", "--save_checkpoints_steps", "2", "--export_dir",
            str(tmp_path / "exports" / "rte")]
    proc = run_command("albert_tf.run_classifier", *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.load(open(out / "eval_results.json"))["examples"] == 8
    assert (out / "vocab.txt").read_bytes() == open(vocab_file, "rb").read()
    loaded = tf.saved_model.load(str(tmp_path / "exports" / "rte" / "1"))
    got = loaded.signatures["serve_text_pair"](text=tf.constant([lines[1]]),
                                               text_b=tf.constant([lines[8]]))
    ids, _ = pack_ids(tok.encode(lines[1]), tok.encode(lines[8]), 32, tok)
    assert got["input_ids"].numpy()[0].tolist() == ids and ids[0] == 101
    proc = run_command("albert_tf.run_classifier",
                       *[a for a in args if a not in ("--vocab_file", vocab_file)])
    assert proc.returncode != 0
    assert ("--spm_model_file or --vocab_file or --init_checkpoint or "
            "--albert_hub_module_handle is required.") in proc.stderr


@pytest.mark.needs_shared("official_albert")
def test_squad_refuses_a_wordpiece_vocabulary_by_name(tmp_path, vocab_file):
    """SQuAD takes a SentencePiece model, as the official SQuAD code: a WordPiece --vocab_file
    is refused in one line naming it (it ended in an AttributeError inside the alignment),
    before anything is written."""
    from albert_tf import AlbertConfig
    from conftest import run_command

    config = tmp_path / "albert_config.json"
    AlbertConfig(vocab_size=len(open(vocab_file, encoding="utf-8").read().splitlines()),
                 embedding_size=16, hidden_size=32, num_hidden_layers=1,
                 num_attention_heads=4, intermediate_size=48).to_json_file(config)
    (tmp_path / "dev.json").write_text('{"data": []}')
    proc = run_command("albert_tf.run_squad_v1", f"--albert_config_file={config}",
                       f"--vocab_file={vocab_file}", f"--output_dir={tmp_path / 'out'}",
                       "--do_predict", f"--predict_file={tmp_path / 'dev.json'}")
    assert proc.returncode == 1 and proc.stderr.startswith("error: SQuAD takes"), proc.stderr
    assert f"SQuAD takes a SentencePiece model (--spm_model_file), as the official SQuAD code " \
           f"does; {vocab_file} is a WordPiece vocabulary" in proc.stderr
    assert not (tmp_path / "out").exists()
