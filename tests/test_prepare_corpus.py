"""Corpus preparation: sentence splitting, documents, Gutenberg markers, BOM, CRLF."""

import json
import re

import pytest

from conftest import GUTENBERG, WIKITEXT, WIKI_FLAGS
from albert_tf.data.prepare_corpus import prepare_corpus, split_sentences
from albert_tf.data.text_io import (InputError, expand_input_patterns, read_documents,
                                    read_text_lines)
from albert_tf.data.train_vocab import OFFICIAL_USER_DEFINED_SYMBOLS, VocabularyError, train_vocab


@pytest.mark.slow
@pytest.mark.parametrize("paragraph, expected", [
    ("Mr. Darcy bowed. Elizabeth smiled! Did he see? Yes.",
     ["Mr. Darcy bowed.", "Elizabeth smiled!", "Did he see?", "Yes."]),
    ('"Who is it?" said she. "I know."', ['"Who is it?" said she.', '"I know."']),
    ("\u201cOh!\u201d cried Jane. \u201cNo.\u201d", ["\u201cOh!\u201d cried Jane.",
                                                      "\u201cNo.\u201d"]),
    ("J. R. R. Tolkien wrote it. It sold.", ["J. R. R. Tolkien wrote it.", "It sold."]),
    ("Wait... and see. Then go.", ["Wait... and see.", "Then go."]),
    ("He met Dr. Watson at 10 a.m. on Baker St. today.",
     ["He met Dr. Watson at 10 a.m. on Baker St. today."]),
    ("He is an actor . He had a role in 2000 . This was it .",
     ["He is an actor .", "He had a role in 2000 .", "This was it ."]),
    ("It rose 5.3 percent (e.g. in May). Prices fell.",
     ["It rose 5.3 percent (e.g. in May).", "Prices fell."]),
    ("  wrapped\n  text   joined  ", ["wrapped text joined"]),
])
def test_split_sentences(paragraph, expected):
    assert split_sentences(paragraph) == expected


def test_gutenberg_books(tmp_path):
    out = tmp_path / "books.txt"
    counts = prepare_corpus(GUTENBERG, str(out))
    files = expand_input_patterns(GUTENBERG)
    assert counts["documents"] == len(files) == 5
    documents = list(read_documents(str(out)))
    assert len(documents) == 5 and sum(map(len, documents)) == counts["sentences"]
    # Tom Sawyer (74-0.txt) starts with a BOM + START marker and ends with an END marker.
    tom = documents[[i for i, f in enumerate(files) if f.endswith("74-0.txt")][0]]
    text = "\n".join(tom)
    assert "PROJECT GUTENBERG" not in text and "\ufeff" not in text
    assert tom[0].startswith("THE ADVENTURES OF TOM SAWYER")
    # Wrapped lines are joined: no sentence is a fragment ending mid-word with a hyphen break.
    assert max(map(len, tom)) > 300 and counts["sentences"] > 20000


def test_wikitext_articles(tmp_path):
    out = tmp_path / "wiki.txt"
    counts = prepare_corpus(WIKITEXT, str(out), **WIKI_FLAGS)
    titles = [line for line in read_text_lines(WIKITEXT) if re.search(r"^ = [^=].* = $", line)]
    assert counts["documents"] == len(titles) == 62
    raw = open(out, "rb").read()
    assert b"\r" not in raw  # CRLF input, LF output
    documents = list(read_documents(str(out)))
    assert documents[0][0] == "Robert Boulter is an English film , television and theatre actor ."
    assert not any(re.fullmatch(r"(= )+.*( =)+", s) for d in documents for s in d)


def test_heldout_documents(tmp_path):
    whole = tmp_path / "whole.txt"
    counts = prepare_corpus(WIKITEXT, str(whole), **WIKI_FLAGS)
    out, heldout = tmp_path / "train.txt", tmp_path / "heldout" / "wiki.txt"
    split = prepare_corpus(WIKITEXT, str(out), heldout_file=str(heldout), heldout_every=10,
                           **WIKI_FLAGS)
    documents = list(read_documents(str(whole)))
    # the 10th, 20th, ... 60th of the 62 articles are held out, the rest kept in order
    assert split["heldout_documents"] == 6 and split["documents"] == 56
    assert list(read_documents(str(heldout))) == documents[9::10]
    assert list(read_documents(str(out))) == [d for i, d in enumerate(documents)
                                              if (i + 1) % 10]
    assert split["sentences"] + split["heldout_sentences"] == counts["sentences"]
    for every, file in ((1, str(heldout)), (0, str(heldout)), (10, None)):
        with pytest.raises(ValueError, match="--heldout_file and --heldout_every N"):
            prepare_corpus(WIKITEXT, str(tmp_path / "x.txt"), heldout_file=file,
                           heldout_every=every, **WIKI_FLAGS)
    with pytest.raises(InputError, match="--heldout_every 100 held out nothing"):
        prepare_corpus(WIKITEXT, str(tmp_path / "y.txt"), heldout_file=str(tmp_path / "h.txt"),
                       heldout_every=100, **WIKI_FLAGS)
    assert not list(tmp_path.glob("y.txt*")) and not list(tmp_path.glob("h.txt*"))


def test_bad_inputs(tmp_path):
    with pytest.raises(InputError, match=r"Input pattern '.*nothing\*.txt' matches no file"):
        prepare_corpus(str(tmp_path / "nothing*.txt"), str(tmp_path / "out.txt"))
    (tmp_path / "blank.txt").write_text("\n\n   \n")
    with pytest.raises(InputError, match=r"blank.txt holds no text"):
        prepare_corpus(str(tmp_path / "blank.txt"), str(tmp_path / "out.txt"))
    (tmp_path / "latin1.txt").write_bytes("caf\u00e9 au lait.\n".encode("latin-1"))
    with pytest.raises(InputError, match=r"latin1.txt: line 1 is not valid UTF-8"):
        prepare_corpus(str(tmp_path / "latin1.txt"), str(tmp_path / "out.txt"))
    assert not list(tmp_path.glob("out.txt*"))  # nothing partial


@pytest.mark.slow
def test_train_vocab(tmp_path, prepared_corpus):
    prefix = str(tmp_path / "v")
    description = train_vocab(prepared_corpus["wiki"], prefix, vocab_size=3000, num_threads=2)
    saved = json.load(open(prefix + ".json"))
    assert saved == description
    assert saved["vocab_size"] == 3000 and saved["do_lower_case"] is True
    assert saved["special_ids"] == {"<pad>": 0, "<unk>": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}
    assert saved["lines_read"] == sum(1 for _ in read_text_lines(prepared_corpus["wiki"]) if _)
    vocab_lines = open(prefix + ".vocab", encoding="utf-8").read().splitlines()
    assert [v.split("\t")[0] for v in vocab_lines[:5]] == ["<pad>", "<unk>", "[CLS]", "[SEP]",
                                                           "[MASK]"]
    assert len(vocab_lines) == 3000
    # The official user-defined symbols are pieces of their own, right after the specials.
    assert [v.split("\t")[0] for v in vocab_lines[5:13]] == list(OFFICIAL_USER_DEFINED_SYMBOLS)
    assert saved["user_defined_symbols"] == list(OFFICIAL_USER_DEFINED_SYMBOLS)
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
    for text, symbol in (("well-known", "-"), ("a(b)c", "("), ("1.5", "."), ("£3", "£")):
        assert symbol in sp.EncodeAsPieces(text), text  # always a piece of its own
    off = train_vocab(prepared_corpus["wiki"], str(tmp_path / "off"), vocab_size=3000,
                      num_threads=2, user_defined_symbols=())
    assert off["user_defined_symbols"] == []
    off_lines = open(str(tmp_path / "off.vocab"), encoding="utf-8").read().splitlines()
    assert [v.split("\t")[0] for v in off_lines[5:13]] != list(OFFICIAL_USER_DEFINED_SYMBOLS)


def test_train_vocab_errors(tmp_path, prepared_corpus):
    (tmp_path / "tiny.txt").write_text("a few words only\n")
    with pytest.raises(VocabularyError, match=r"--vocab_size=30000 is too large for this corpus "
                                              r"\(1 lines\): at most \d+ pieces"):
        train_vocab(str(tmp_path / "tiny.txt"), str(tmp_path / "v"), vocab_size=30000)
    assert not list(tmp_path.glob("v.*"))
    (tmp_path / "empty.txt").write_text("\n \n")
    with pytest.raises(VocabularyError):
        train_vocab(str(tmp_path / "empty.txt"), str(tmp_path / "v"), vocab_size=100)
    assert not list(tmp_path.glob("v.*"))


def _repeated_block_corpus(path, block_lines=100, copies=20, between=5):
    """Text like /usr/share/doc's: one 100-line block (a licence) copied 20 times, each copy after
    a few lines of other text. In this order SentencePiece 0.2.2's seed-piece search took 61 s
    (2,100 lines, 270 kB; shuffled: 1.6 s)."""
    import random

    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
             for _ in range(2000)]
    line = lambda: " ".join(rng.choice(words) for _ in range(20))  # noqa: E731
    block = [line() for _ in range(block_lines)]
    lines = []
    for _ in range(copies):
        lines += [line() for _ in range(between)] + block
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return lines


def test_train_vocab_repeated_blocks(tmp_path):
    """Blocks of lines repeated through the corpus train in seconds (they reach SentencePiece
    shuffled), and the phases are reported while it trains."""
    lines = _repeated_block_corpus(tmp_path / "docs.txt")
    said = []
    description = train_vocab(str(tmp_path / "docs.txt"), str(tmp_path / "v"), vocab_size=500,
                              num_threads=1, progress=said.append, heartbeat_seconds=0.5)
    assert description["lines_read"] == len(lines) and description["vocab_size"] == 500
    assert said[0] == f"reading {tmp_path / 'docs.txt'}"
    assert said[1] == ("SentencePiece unigram, 500 pieces: training on 2,100 of 2,100 lines "
                       "(suffix array, seed pieces, then EM rounds)")
    assert all(s.startswith("SentencePiece unigram, 500 pieces: still training (")
               for s in said[2:])


def test_train_vocab_order_and_sample(tmp_path, monkeypatch):
    """SentencePiece gets the lines in a seeded random order (no two lines of a repeated block
    stay neighbours throughout), at most --input_sentence_size of them drawn from all; lines
    longer than max_sentence_length are named."""
    import sentencepiece as spm

    lines = _repeated_block_corpus(tmp_path / "docs.txt", block_lines=30, copies=4)
    with open(tmp_path / "docs.txt", "a", encoding="utf-8") as f:
        f.write("x" * 20000 + "\n")
    seen = {}

    def fake_train(sentence_iterator, **kwargs):
        seen.setdefault("runs", []).append((list(sentence_iterator), kwargs))
        raise RuntimeError("stop here")

    monkeypatch.setattr(spm.SentencePieceTrainer, "train", fake_train)
    said = []
    for size in (0, 0, 50):
        with pytest.raises(VocabularyError, match="stop here"):
            train_vocab(str(tmp_path / "docs.txt"), str(tmp_path / f"v{size}"), vocab_size=100,
                        input_sentence_size=size, progress=said.append, heartbeat_seconds=0)
    (first, kwargs), (again, _), (sampled, _) = seen["runs"]
    assert first == again and sorted(first) == sorted(lines + ["x" * 20000])
    assert kwargs["input_sentence_size"] == 0  # sampled here, with --random_seed
    pairs = {(a, b) for a, b in zip(lines, lines[1:])}
    assert sum((a, b) in pairs for a, b in zip(first, first[1:])) < 5
    assert len(sampled) == 50 and set(sampled) <= set(first)
    assert any(s.startswith("1 line(s) longer than --max_sentence_length=16384 bytes") and
               s.endswith(f"(the first: {tmp_path / 'docs.txt'}, line {len(lines) + 1}).")
               for s in said), said
