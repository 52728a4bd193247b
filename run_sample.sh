#!/usr/bin/env bash
# The main job on the bundled sample (sample_data/): every step is a real command a user runs on
# their own corpus. Outputs go to sample_run/ (rerunning skips finished data shards).
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
OUT=sample_run
mkdir -p "$OUT"
export TF_CPP_MIN_LOG_LEVEL=2

echo "== 1. Parameter counts of every preset and the paper's Tables 1, 4, 5 (closed formula, tested against built models)"
"$PY" -m albert_tf.params

echo "== 2. Raw text -> one sentence per line, blank line between documents"
"$PY" -m data.prepare_corpus --input_file 'sample_data/pretrain_text/gutenberg/*-0.txt' \
    --output_file "$OUT/corpus/books.txt"
"$PY" -m data.prepare_corpus --input_file sample_data/pretrain_text/wikitext-2-raw/wiki.test.raw \
    --output_file "$OUT/corpus/wiki.txt" --paragraphs lines \
    --document_marker_regex '^ = [^=].* = $' --drop_line_regex '^ (= )+.*( =)+ $'

echo "== 3. SentencePiece vocabulary (8k pieces: the sample is small; releases use 30k)"
"$PY" -m data.train_vocab --input_file "$OUT/corpus/books.txt,$OUT/corpus/wiki.txt" \
    --model_prefix "$OUT/vocab/sample8k" --vocab_size 8000

echo "== 4. Pretraining TFRecords: n-gram masked LM + sentence order, 2 shards, 2 workers"
"$PY" -m data.create_pretraining_data --input_file "$OUT/corpus/*.txt" \
    --output_file "$OUT/pretraining/train" --num_output_shards 2 \
    --spm_model_file "$OUT/vocab/sample8k.model" --max_seq_length 128 \
    --max_predictions_per_seq 20 --dupe_factor 2 --num_workers 2

echo "== 5. Read them back through the training input pipeline"
"$PY" - "$OUT/pretraining/train-*.tfrecord" <<'PYEOF'
import json, sys
from albert_tf.input_pipeline import list_files, pretraining_dataset
files = list_files(sys.argv[1])
meta = [json.load(open(f + ".json")) for f in files]
ds = pretraining_dataset(sys.argv[1], 32, 128, 20, is_training=False, vocab_size=8000)
batch = next(iter(ds))
counts = {k: sum(m["counts"][k] for m in meta) for k in meta[0]["counts"]}
print(f"{len(files)} files, {counts['examples']:,} examples; SOP label 1: "
      f"{counts['sentence_order_label_1'] / counts['examples']:.1%}; masked positions per "
      f"example: {counts['masked_positions'] / counts['examples']:.2f}; batch shapes: "
      + ", ".join(f"{k} {tuple(v.shape)}" for k, v in batch.items()))
PYEOF

echo "== 6. Pretrain a tiny ALBERT on them (LAMB, warmup + decay, checkpoints, eval, TensorBoard)"
"$PY" -m albert_tf.run_pretraining --albert_config_file sample_data/albert_config_tiny.json \
    --input_file "$OUT/pretraining/train-*.tfrecord" --output_dir "$OUT/pretrain_tiny" \
    --do_train --do_eval --train_batch_size 32 --eval_batch_size 32 --max_seq_length 128 \
    --max_predictions_per_seq 20 --optimizer lamb --learning_rate 2e-3 --num_train_steps 200 \
    --num_warmup_steps 20 --save_checkpoints_steps 100 --iterations_per_loop 50 \
    --max_eval_steps 10 --random_seed 1

echo "== 7. Export the best pretrained checkpoint as a SavedModel for TF Serving (raw text in)"
if [ ! -d "$OUT/exports/albert_tiny/1" ]; then
  "$PY" -m export.export_saved_model --model_dir "$OUT/pretrain_tiny" --checkpoint best \
      --export_dir "$OUT/exports/albert_tiny" --version 1 --max_seq_length 128
fi

echo "== 8. Load it as a server would and fill in masks (serving_default, tokenization in-graph)"
"$PY" - "$OUT/exports/albert_tiny/1" <<'PYEOF'
import sys
import tensorflow as tf
import tensorflow_text  # noqa: F401 - the SentencePiece ops the export uses
fn = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
texts = ["Alice was beginning to get very [MASK] of sitting by her sister.",
         "It is a truth universally acknowledged, that a single [MASK] in possession of a good fortune, must be in want of a wife."]
out = fn(text=tf.constant(texts))
for text, pieces, probs in zip(texts, out["fill_mask_pieces"].numpy(),
                               out["fill_mask_probabilities"].numpy()):
    print(text)
    print("  [MASK]: " + ", ".join(f"{p.decode()} {q:.3f}" for p, q in zip(pieces[0], probs[0])))
PYEOF
