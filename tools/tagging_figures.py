"""The figures of docs/tagging.md: the UD English EWT split, the most-frequent-tag baseline and
the table of run_tagging runs.

    python tools/tagging_figures.py split --conllu en_ewt-ud-dev.conllu --out_dir DIR
        # DIR/train.conllu: the first 80% of the sentences (whole documents stay together
        # only where a cut falls between them); DIR/eval.conllu: the rest
    python tools/tagging_figures.py baseline --train_file T --eval_file E
        # each word's most frequent training tag (case-sensitive; unseen: the most frequent
        # tag), scored as run_tagging scores (token accuracy; entity P/R/F1 for BIO tags)
    python tools/tagging_figures.py table --runs 'runs/wnut-*-seed*'
        # mean and spread (max - min) over seeds of each arm's eval_results.json
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from albert_tf.tasks import conll  # noqa: E402
from albert_tf.tasks.tagging import score_sentences  # noqa: E402


def split(conllu: str, out_dir: str, fraction: float = 0.8) -> None:
    with open(conllu, encoding="utf-8") as f:
        blocks = [b for b in f.read().split("\n\n") if b.strip()]
    cut = int(len(blocks) * fraction)
    os.makedirs(out_dir, exist_ok=True)
    for name, part in (("train", blocks[:cut]), ("eval", blocks[cut:])):
        with open(os.path.join(out_dir, f"{name}.conllu"), "w", encoding="utf-8") as f:
            f.write("\n\n".join(part) + "\n\n")
        print(f"{name}: {len(part)} sentences")


def baseline(train_file: str, eval_file: str) -> dict:
    train, _ = conll.read_tagged_file(train_file)
    evaluation, _ = conll.read_tagged_file(eval_file)
    counts = collections.defaultdict(collections.Counter)
    overall = collections.Counter()
    for s in train:
        for word, tag in zip(s.words, s.tags):
            counts[word][tag] += 1
            overall[tag] += 1
    default = overall.most_common(1)[0][0]
    predicted = [[counts[w].most_common(1)[0][0] if w in counts else default for w in s.words]
                 for s in evaluation]
    return score_sentences(conll.label_list(train), [s.tags for s in evaluation], predicted)


def table(pattern: str) -> dict:
    arms = collections.defaultdict(list)
    for path in sorted(glob.glob(os.path.join(pattern, "eval_results.json"))):
        arm = re.sub(r"-seed\d+$", "", os.path.basename(os.path.dirname(path)))
        with open(path, encoding="utf-8") as f:
            arms[arm].append(json.load(f))
    out = {}
    for arm, results in arms.items():
        out[arm] = {"seeds": len(results)}
        for key in ("token_accuracy", "entity_f1", "entity_precision", "entity_recall"):
            values = [r[key] for r in results if key in r]
            if values:
                out[arm][key] = {"mean": sum(values) / len(values),
                                 "spread": max(values) - min(values), "values": values}
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("split")
    s.add_argument("--conllu", required=True)
    s.add_argument("--out_dir", required=True)
    b = sub.add_parser("baseline")
    b.add_argument("--train_file", required=True)
    b.add_argument("--eval_file", required=True)
    t = sub.add_parser("table")
    t.add_argument("--runs", required=True)
    args = parser.parse_args()
    if args.command == "split":
        split(args.conllu, args.out_dir)
    elif args.command == "baseline":
        print(json.dumps(baseline(args.train_file, args.eval_file), indent=2))
    else:
        print(json.dumps(table(args.runs), indent=2))


if __name__ == "__main__":
    main()
