"""Pretraining-data distribution: our generator against the official script, same corpus and flags.

    python -m bench.data_distribution      # 20 WikiText-2 articles, seq 256, dupe 1, seeds 1-3
    python -m bench.data_distribution --articles 0 --max_seq_length 512 --dupe_factor 3

Runs Google's unmodified `create_pretraining_data.py` (`../shared/official_albert`, as a judge:
its `main`, once per seed, in one process) and `albert_tf.data.generator.generate` on the same
prepared WikiText-2 articles (one article a document), the same vocabulary and flags, and measures
on each output what the documents' structure decides (masking plays no part):

- the histogram of real tokens per example (4 bins of max_seq_length / 4), the short share
  (examples of <= max_seq_length / 2 real tokens) and the mean length;
- the random-document share: examples whose second segment comes from another document. Each
  segment, its masked positions restored, is looked up in the tokenized corpus: an example whose
  two segments occur in no common document took B from another one;
- the mixed-document share: documents (with at least 4 examples, each example attributed to the
  document holding its segments, or its first segment) that have at least 2 examples of
  <= max_seq_length / 2 real tokens and at least 2 longer ones. A short target drawn once per
  document (the official script) leaves few such documents; a draw per chunk mixes most long
  documents (official `create_pretraining_data.py`, one target length per document);
- the share of sentence-order label 1 (B from another document, or the segments swapped).

The official script draws from `random.Random(seed)` and ours from seeded numpy generators, so
the two are compared as distributions, over seeds. Two criteria, per figure:

1. "two deviations": our mean over the seeds within two of the official seeds' standard
   deviations of the official mean. Reported, not relied on: a document's short target makes
   these figures heavy-tailed (one long article drawn short turns every sentence into an
   example), so three seeds estimate a deviation badly: in a simulation of this setting (our
   generator's seeds in both roles) some figure failed for about half of the seed triples.
2. "seed band": the official mean over its seeds within the 0.1-99.9% range of the means of as
   many of our `--reference_seeds` (20,000 draws of distinct seeds). Our figures for a seed are
   computed from the generator's own chunk plans (`albert_tf.data.generator.document_plan`, an
   example's length being min(A + B, max_seq_length - 3) + 3): what its files hold (`measure`
   generates the files of the compared seeds, which must equal their plans), at a fraction of a
   second a seed. If the official script's distribution is ours, its mean falls outside a figure's
   band with probability 0.2%: in the simulation, 1 seed triple in 300 fell outside some band.

`tests/test_official_distribution.py` asserts criterion 2 (and that our files match our plans);
docs/data.md records the figures.
"""

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OFFICIAL_DIR = os.path.join(ROOT, "..", "shared", "official_albert")
WIKITEXT = os.path.join(ROOT, "albert_tf", "sample_data", "pretrain_text", "wikitext-2-raw",
                        "wiki.test.raw")
WIKI_FLAGS = dict(paragraphs="lines", document_marker_regex=r"^ = [^=].* = $",
                  drop_line_regex=r"^ (= )+.*( =)+ $")
HISTOGRAM_BINS = 4
FIGURES = ("short_share", "mean_length", "random_document_share", "mixed_document_share",
           "sentence_order_label_1") + tuple(f"histogram_{b}" for b in range(HISTOGRAM_BINS))
BAND = (0.001, 0.999)
_MAX_OCCURRENCES = 64  # a segment found more often than this is not attributed

# The official script's `main`, once per seed, in one process (TensorFlow imported once).
_OFFICIAL_DRIVER = """
import sys
from albert import create_pretraining_data as official
seeds, outputs, argv = sys.argv[1].split(","), sys.argv[2].split(","), sys.argv[3:]
official.FLAGS(["create_pretraining_data"] + argv)
for seed, output in zip(seeds, outputs):
    official.FLAGS.random_seed, official.FLAGS.output_file = int(seed), output
    official.main(None)
"""


@dataclasses.dataclass(frozen=True)
class Setting:
    """The flags both programs get, the seeds each runs, and our reference seeds."""

    max_seq_length: int = 256
    max_predictions_per_seq: int = 20
    dupe_factor: int = 1
    short_seq_prob: float = 0.1
    seeds: tuple = (1, 2, 3)
    reference_seeds: int = 120

    def official_flags(self):
        return [f"--max_seq_length={self.max_seq_length}",
                f"--max_predictions_per_seq={self.max_predictions_per_seq}",
                f"--dupe_factor={self.dupe_factor}", f"--short_seq_prob={self.short_seq_prob}",
                "--do_lower_case"]

    def job(self, corpus, output_file, spm_model_file, seed):
        from albert_tf.data.generator import make_job

        return make_job(corpus, output_file, spm_model_file,
                        max_seq_length=self.max_seq_length,
                        max_predictions_per_seq=self.max_predictions_per_seq,
                        dupe_factor=self.dupe_factor, short_seq_prob=self.short_seq_prob,
                        random_seed=seed)


def first_documents(source: str, target: str, count: int) -> int:
    """Writes the first `count` documents (all when 0) of an official-format file; returns how
    many it wrote."""
    with open(source, encoding="utf-8") as f:
        documents = [d for d in f.read().split("\n\n") if d.strip()]
    documents = documents[:count] if count else documents
    with open(target, "w", encoding="utf-8") as f:
        f.write("\n\n".join(d.strip("\n") for d in documents) + "\n")
    return len(documents)


def _vocab_file(spm_model_file):
    return spm_model_file[: -len(".model")] + ".vocab"


def official_command(corpus, spm_model_file, output_file, setting: Setting, seed: int) -> str:
    """The official command line whose output one seed's figures are (`run_official` runs its
    `main` for every seed in one process)."""
    return (f"PYTHONPATH=../shared/official_albert:../shared/official_albert/shims python -m "
            f"albert.create_pretraining_data --input_file={corpus} --output_file={output_file} "
            f"--spm_model_file={spm_model_file} --vocab_file={_vocab_file(spm_model_file)} "
            + " ".join(setting.official_flags()) + f" --random_seed={seed}")


def run_official(corpus, spm_model_file, out_dir, setting: Setting) -> list[str]:
    """The official script's output files, one per seed."""
    outputs = [os.path.join(out_dir, f"official-{s}.tfrecord") for s in setting.seeds]
    official = os.path.abspath(OFFICIAL_DIR)
    env = dict(os.environ, PYTHONPATH=f"{official}:{official}/shims",
               TF_CPP_MIN_LOG_LEVEL="2")
    argv = [f"--input_file={corpus}", f"--spm_model_file={spm_model_file}",
            f"--vocab_file={_vocab_file(spm_model_file)}", *setting.official_flags()]
    run = subprocess.run([sys.executable, "-c", _OFFICIAL_DRIVER,
                          ",".join(map(str, setting.seeds)), ",".join(outputs), *argv],
                         env=env, cwd=out_dir, capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"the official script failed:\n{run.stderr[-3000:]}")
    return outputs


class CorpusIndex:
    """The tokenized corpus (our tokenizer, the official one on these files): the document store
    the generator reads, and one buffer of int32 tokens, documents separated by -1, to find which
    documents hold a segment."""

    def __init__(self, corpus, spm_model_file, work_dir):
        from albert_tf.tokenization import Tokenizer
        from albert_tf.data.token_cache import TokenStore, tokenize_file

        prefix = os.path.join(work_dir, "index")
        tokenize_file(corpus, Tokenizer(spm_model_file), prefix)
        self.store = TokenStore([prefix])
        parts, starts, offset = [], [], 0
        for d in range(len(self.store)):
            doc = np.concatenate([self.store.sentence(d, j)
                                  for j in range(self.store.num_sentences(d))])
            starts.append(offset)
            parts += [doc.astype("<i4"), np.asarray([-1], "<i4")]
            offset += len(doc) + 1
        self.num_documents = len(self.store)
        self.sentence_lengths = [[len(self.store.sentence(d, j))
                                  for j in range(self.store.num_sentences(d))]
                                 for d in range(self.num_documents)]
        self.starts = np.asarray(starts)
        self.buffer = np.concatenate(parts).tobytes()

    def documents_of(self, segment: np.ndarray):
        """The documents holding `segment` (a frozenset), or None when it occurs too often."""
        needle = np.asarray(segment, "<i4").tobytes()
        found, at, hits = set(), self.buffer.find(needle), 0
        while at >= 0:
            if at % 4 == 0:
                hits += 1
                if hits > _MAX_OCCURRENCES:
                    return None
                found.add(int(np.searchsorted(self.starts, at // 4, side="right")) - 1)
            at = self.buffer.find(needle, at + 1)
        return frozenset(found)


def read_examples(path):
    """(real tokens with the masked positions restored, next_sentence_label) of each record."""
    import tensorflow as tf

    out = []
    for record in tf.data.TFRecordDataset(path).as_numpy_iterator():
        feature = tf.train.Example.FromString(record).features.feature

        def values(name):
            return np.asarray(feature[name].int64_list.value or feature[name].float_list.value)

        n = int(values("input_mask").sum())
        ids = values("input_ids")[:n].astype(np.int64)
        k = int((values("masked_lm_weights") > 0).sum())
        ids[values("masked_lm_positions")[:k].astype(int)] = values("masked_lm_ids")[:k]
        out.append((ids, int(values("next_sentence_labels")[0])))
    return out


def _source(ids, label, index: CorpusIndex, sep_id):
    """(document or None, from another document: bool or None) of one example."""
    first_sep = int(np.flatnonzero(ids == sep_id)[0])
    first = index.documents_of(ids[1:first_sep])
    second = index.documents_of(ids[first_sep + 1:-1])
    if not first or not second:  # not found (or found everywhere): left out
        return None, None
    common = first & second
    if common:
        return (next(iter(common)) if len(common) == 1 else None), False
    return (next(iter(first)) if len(first) == 1 else None), bool(label) or None


def file_figures(path, index: CorpusIndex, max_seq_length: int) -> dict:
    """The figures of one output file, its segments looked up in the corpus."""
    from albert_tf.tokenization import SEP_ID

    examples = read_examples(path)
    sources = [_source(ids, label, index, SEP_ID) for ids, label in examples]
    return figures_of([len(ids) for ids, _ in examples], [d for d, _ in sources],
                      [r for _, r in sources], [label for _, label in examples],
                      max_seq_length, index.num_documents)


def plan_figures(index: CorpusIndex, setting: Setting, seed: int, corpus, spm_model_file):
    """Our generator's figures for `seed` from its chunk plans (no masking, no file): exact
    documents and origins."""
    from albert_tf.data.generator import document_plan
    from albert_tf.data.pretraining import random_segment

    job = setting.job(corpus, os.path.join(tempfile.gettempdir(), "unused"), spm_model_file,
                      seed)
    store, most = index.store, setting.max_seq_length - 3
    lengths, documents, other, labels = [], [], [], []
    for dupe in range(setting.dupe_factor):
        for doc in range(len(store)):
            sizes = index.sentence_lengths[doc]
            for c in document_plan(job, store, dupe, doc):
                b = (len(random_segment(store, *c.request)) if c.other >= 0
                     else sum(sizes[j] for j in c.b))
                lengths.append(min(sum(sizes[j] for j in c.a) + b, most) + 3)
                documents.append(doc)
                other.append(c.other >= 0)
                labels.append(int(c.other >= 0 or c.swapped))
    return figures_of(lengths, documents, other, labels, setting.max_seq_length, len(store))


def figures_of(lengths, documents, from_other, labels, max_seq_length: int,
               num_documents: int) -> dict:
    """The figures of examples given their real lengths, source documents (None: not known),
    whether B came from another document (None: not known) and sentence-order labels."""
    lengths = np.asarray(lengths)
    short = lengths <= max_seq_length // 2
    known = np.asarray([r is not None for r in from_other])
    other = np.asarray([bool(r) for r in from_other])
    edges = np.linspace(0, max_seq_length, HISTOGRAM_BINS + 1)
    bins = np.clip(np.searchsorted(edges, lengths, side="left") - 1, 0, HISTOGRAM_BINS - 1)
    documents = np.asarray([-1 if d is None else d for d in documents])
    mixed = []
    for d in range(num_documents):
        of_d = short[documents == d]
        if len(of_d) >= 4:
            mixed.append(bool(of_d.sum() >= 2 and (~of_d).sum() >= 2))
    histogram = np.bincount(bins, minlength=HISTOGRAM_BINS) / len(lengths)
    return {"examples": len(lengths), "short_share": float(short.mean()),
            "mean_length": float(lengths.mean()),
            "random_document_share": float(other[known].mean()),
            "mixed_document_share": float(np.mean(mixed)) if mixed else 0.0,
            "sentence_order_label_1": float(np.mean(labels)),
            **{f"histogram_{b}": float(h) for b, h in enumerate(histogram)},
            "unknown_origin": int((~known).sum()), "documents_counted": len(mixed),
            "lengths": sorted(lengths.tolist())}


def compare(ours: list, official: list, reference: list) -> list:
    """Per figure: both criteria of the module docstring. `ours` and `official` are the figures
    of the same seeds; `reference` those of our reference seeds."""
    # 20,000 sets of as many distinct reference seeds as the official seeds (fixed draw)
    rng = np.random.default_rng(0)
    picks = rng.random((20_000, len(reference))).argsort(1)[:, :len(official)]
    out = []
    for name in FIGURES:
        a = np.asarray([r[name] for r in ours])
        b = np.asarray([r[name] for r in official])
        ref = np.asarray([r[name] for r in reference])
        low, high = np.quantile(ref[picks].mean(1), BAND)
        std = float(b.std(ddof=1))
        out.append({"figure": name, "ours": a.tolist(), "official": b.tolist(),
                    "ours_mean": float(a.mean()), "official_mean": float(b.mean()),
                    "official_std": std, "two_deviations": bool(abs(a.mean() - b.mean())
                                                                <= 2 * std),
                    "reference_mean": float(ref.mean()), "reference_std": float(ref.std(ddof=1)),
                    "band": [float(low), float(high)],
                    "in_band": bool(low <= b.mean() <= high)})
    return out


def measure(spm_model_file, work_dir, setting: Setting, corpus, generated=None) -> dict:
    """Runs the official script on `corpus` (official format) for each seed and our generator
    for the first `generated` seeds (all by default), and compares the figures (`compare`). Our
    figures are those of our files for the generated seeds ("ours_files", beside the same seeds'
    plans, "ours_plans", which they must equal), of our plans for the others."""
    from albert_tf.data.generator import generate

    started = time.perf_counter()
    official = run_official(corpus, spm_model_file, work_dir, setting)
    official_seconds = time.perf_counter() - started
    index = CorpusIndex(corpus, spm_model_file, work_dir)
    started = time.perf_counter()
    ours_files = []
    for seed in setting.seeds[:generated]:
        job = setting.job(corpus, os.path.join(work_dir, f"ours-{seed}", "data.tfrecord"),
                          spm_model_file, seed)
        generate(job, progress=False)
        ours_files.append(file_figures(job.output_files[0], index, setting.max_seq_length))
    ours_seconds = time.perf_counter() - started
    plans = [plan_figures(index, setting, s, corpus, spm_model_file) for s in setting.seeds]
    reference = [plan_figures(index, setting, s, corpus, spm_model_file)
                 for s in range(1000, 1000 + setting.reference_seeds)]
    ours = ours_files + plans[len(ours_files):]
    official_rows = [file_figures(p, index, setting.max_seq_length) for p in official]
    return {"setting": dataclasses.asdict(setting), "documents": index.num_documents,
            "official_seconds": official_seconds, "ours_seconds": ours_seconds,
            "ours": ours, "ours_files": ours_files, "ours_plans": plans,
            "official": official_rows, "comparison": compare(ours, official_rows, reference),
            "official_command": official_command(os.path.basename(corpus),
                                                 os.path.basename(spm_model_file),
                                                 "OUT.tfrecord", setting, setting.seeds[0])}


def report(result) -> str:
    """A table: each figure per seed, ours and official, means, both criteria."""
    lines = [f"{result['documents']} documents; {result['setting']}; official "
             f"{result['official_seconds']:.1f} s, ours {result['ours_seconds']:.1f} s",
             "examples per seed: ours " + ", ".join(str(r["examples"]) for r in result["ours"])
             + "; official " + ", ".join(str(r["examples"]) for r in result["official"])]
    for row in result["comparison"]:
        scale = 1 if row["figure"] == "mean_length" else 100

        def fmt(v):
            return f"{v * scale:.1f}"

        lines.append(
            f"{row['figure']:>22}: ours " + " / ".join(map(fmt, row["ours"]))
            + f" (mean {fmt(row['ours_mean'])}); official " + " / ".join(map(fmt, row["official"]))
            + f" (mean {fmt(row['official_mean'])}, std {fmt(row['official_std'])}); two "
            f"deviations: {'ok' if row['two_deviations'] else 'out'}; our "
            f"{result['setting']['reference_seeds']} seeds {fmt(row['reference_mean'])} +- "
            f"{fmt(row['reference_std'])}, band {fmt(row['band'][0])}-{fmt(row['band'][1])}: "
            f"{'ok' if row['in_band'] else 'OUT'}")
    return "\n".join(lines)


def main(argv):
    del argv
    from absl import flags

    f = flags.FLAGS
    setting = Setting(max_seq_length=f.max_seq_length, dupe_factor=f.dupe_factor,
                      max_predictions_per_seq=f.max_predictions_per_seq,
                      seeds=tuple(int(s) for s in f.seeds), reference_seeds=f.reference_seeds)
    from albert_tf.data.prepare_corpus import prepare_corpus

    with tempfile.TemporaryDirectory() as tmp:
        prepare_corpus(WIKITEXT, os.path.join(tmp, "wiki-all.txt"), **WIKI_FLAGS)
        corpus = os.path.join(tmp, "wiki.txt")
        first_documents(os.path.join(tmp, "wiki-all.txt"), corpus, f.articles)
        spm_model_file = f.spm_model_file
        if not spm_model_file:
            from albert_tf.data.train_vocab import train_vocab

            books = os.path.join(tmp, "books.txt")
            prepare_corpus(os.path.join(os.path.dirname(WIKITEXT), "..", "gutenberg", "*-0.txt"),
                           books)
            spm_model_file = train_vocab([books, os.path.join(tmp, "wiki-all.txt")],
                                         os.path.join(tmp, "sample8k"), vocab_size=8000,
                                         do_lower_case=True, num_threads=2)["model_file"]
        result = measure(spm_model_file, tmp, setting, corpus)
    print(report(result))
    print("official command (one seed): " + result["official_command"])
    os.makedirs(os.path.dirname(os.path.abspath(f.output)), exist_ok=True)
    with open(f.output, "w", encoding="utf-8") as out:
        json.dump(result, out, indent=2)


if __name__ == "__main__":
    from absl import app, flags

    flags.DEFINE_integer("articles", 20, "The first N WikiText-2 test articles (0: all 62).")
    flags.DEFINE_integer("max_seq_length", 256, "Sequence length.")
    flags.DEFINE_integer("max_predictions_per_seq", 20, "Predictions per sequence.")
    flags.DEFINE_integer("dupe_factor", 1, "Passes over the corpus.")
    flags.DEFINE_list("seeds", ["1", "2", "3"], "Seeds (each program, each seed).")
    flags.DEFINE_integer("reference_seeds", 120, "Our seeds for the band (criterion 2).")
    flags.DEFINE_string("spm_model_file", None, "Vocabulary (with its .vocab beside it); by "
                        "default an 8,000-piece one trained on the bundled corpus, as the tests'.")
    flags.DEFINE_string("output", os.path.join("bench_results", "data_distribution.json"),
                        "Results (JSON).")
    app.run(main)
