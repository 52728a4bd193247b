"""An outside judge of our pretraining loop: Hugging Face's `AlbertForPreTraining` (PyTorch)
trained from the same initial weights on the same TFRecord batches with the same optimizer
settings, beside our loop (`albert_tf.training.train_lib.PretrainingRun`, unchanged), for several
seeds.

    python -m bench.pretraining_judge --work_dir bench_results/judge --seeds 1,2,3 --steps 800

For each seed:
1. Our loop is built as `run_pretraining` builds it (seeded initialisation, the run's
   deterministic input stream). Its initial weights go into HF's model through the official
   weight names (`albert_tf.checkpoints.official_to_hf`), and the first `--steps` batches of its
   input stream are read once, so both sides see the same batches in the same order.
2. A parity check before training: HF's loss on the first batch beside ours, and one update from
   that batch at the peak learning rate (HF side: ALBERT's LAMB in PyTorch, `bench.torch_lamb`,
   from the official `lamb_optimizer.py`, with the official warmup/decay schedule and
   global-norm clipping at 1.0): the largest difference between the two updated models,
   relative to how far the update moved each weight.
3. Both train `--steps` steps (float32, no dropout); the masked-LM and sentence-order losses are
   summed over windows of `--window` steps exactly as our loop reports them (weighted sums over
   the window divided by the window's weights), then both models are scored on the main job's
   held-out records.

Judgement: seed noise at each window is the standard deviation across seeds of each side's
curve; ours tracks the judge when, at every window after warmup, the mean over seeds of
|ours - HF| is below that noise (the larger of the two sides' deviations), and the final held-out
accuracies differ by less than twice it. Writes WORK_DIR/judge.json, WORK_DIR/judge.md and
WORK_DIR/pretraining_judge.png (copied to docs/ by hand with the figures).
"""

from __future__ import annotations

import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("USE_TF", "0")  # transformers: no Keras-2 TensorFlow classes

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

from albert_tf import demo  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
flags.DEFINE_string("work_dir", "bench_results/judge", "Data, runs and results go here.")
flags.DEFINE_list("seeds", ["1", "2", "3"], "Seeds (initialisation and data order).")
flags.DEFINE_integer("steps", 800, "Training steps of each run.")
flags.DEFINE_integer("window", 20, "Steps per reported point (our loop's iterations_per_loop).")
flags.DEFINE_integer("batch_size", 32, "Sequences per step.")
flags.DEFINE_float("learning_rate", 5e-3, "Peak learning rate.")
flags.DEFINE_float("warmup_fraction", 0.1, "Warmup steps as a fraction of --steps.")
flags.DEFINE_enum("optimizer", "lamb", ["lamb", "adamw"], "ALBERT's LAMB or BERT's AdamW.")
flags.DEFINE_float("masked_lm_prob", 0.4, "Masking rate of the training records.")
flags.DEFINE_string("albert_config", os.path.join(ROOT, "albert_tf", "sample_data",
                                                  "albert_config_small.json"), "Model config.")
FLAGS = flags.FLAGS

SEQ = 64
CLIP = 1.0  # the official global-norm clipping


# ---------------------------------------------------------------------------------- PyTorch side

def official_lr(step: int, peak: float, total: int, warmup: int) -> float:
    """The official schedule at `step` previous updates: linear warmup, then linear decay to 0
    counted from step 0."""
    if warmup and step < warmup:
        return peak * step / warmup
    return peak * (1.0 - min(step, total) / total)


def clip_by_global_norm(parameters, clip: float) -> float:
    """TensorFlow's `clip_by_global_norm`: scale by clip / max(norm, clip); returns the norm."""
    import torch

    grads = [p.grad for p in parameters if p.grad is not None]
    norm = float(torch.sqrt(sum((g.double() ** 2).sum() for g in grads)))
    scale = clip / max(norm, clip)
    for g in grads:
        g.mul_(scale)
    return norm


def hf_model(config, state: dict):
    """`AlbertForPreTraining` with our weights (`state`: HF name -> array)."""
    import torch
    import transformers

    hf = transformers.AlbertForPreTraining(transformers.AlbertConfig(
        vocab_size=config.vocab_size, embedding_size=config.embedding_size,
        hidden_size=config.hidden_size, num_hidden_layers=config.num_hidden_layers,
        num_hidden_groups=config.num_hidden_groups, num_attention_heads=config.num_attention_heads,
        intermediate_size=config.intermediate_size, inner_group_num=config.inner_group_num,
        hidden_act="gelu_new", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        classifier_dropout_prob=0.0, max_position_embeddings=config.max_position_embeddings,
        type_vocab_size=config.type_vocab_size, layer_norm_eps=1e-12,
        attn_implementation="eager"))
    tensors = {k: torch.tensor(v) for k, v in state.items()}
    missing, unexpected = hf.load_state_dict(tensors, strict=False)
    derived = {"albert.embeddings.position_ids", "predictions.decoder.weight",
               "predictions.decoder.bias"}
    if set(missing) - derived or unexpected:
        raise RuntimeError(f"weights do not fit HF's model: missing {missing}, unexpected "
                           f"{unexpected}")
    hf.tie_weights()
    return hf


def hf_state(model) -> dict:
    from albert_tf.checkpoints import model_weights, official_to_hf

    state = {}
    for w in model_weights(model):
        key, transpose = official_to_hf(w.official_name)
        value = w.to_official(w.variable.numpy())
        state[key] = np.ascontiguousarray(value.T if transpose else value)
    return state


def hf_terms(hf, batch) -> dict:
    """Summed loss terms of one batch, as our loop sums them (`albert_tf.models.losses`)."""
    import torch

    ids = torch.tensor(batch["input_ids"], dtype=torch.long)
    out = hf(input_ids=ids, attention_mask=torch.tensor(batch["input_mask"], dtype=torch.long),
             token_type_ids=torch.tensor(batch["segment_ids"], dtype=torch.long))
    positions = torch.tensor(batch["masked_lm_positions"], dtype=torch.long)
    weights = torch.tensor(batch["masked_lm_weights"], dtype=torch.float32)
    gold = torch.tensor(batch["masked_lm_ids"], dtype=torch.long)
    logits = torch.gather(out.prediction_logits, 1,
                          positions[..., None].expand(-1, -1, out.prediction_logits.shape[-1]))
    log_probs = torch.log_softmax(logits, -1)
    nll = -torch.gather(log_probs, -1, gold[..., None])[..., 0]
    sop_gold = torch.tensor(batch["next_sentence_labels"], dtype=torch.long).reshape(-1)
    sop_nll = torch.nn.functional.cross_entropy(out.sop_logits, sop_gold, reduction="none")
    return {"mlm_sum": (nll * weights).sum(), "mlm_weight": weights.sum(),
            "mlm_correct": ((logits.argmax(-1) == gold).float() * weights).sum(),
            "sop_sum": sop_nll.sum(), "sop_count": torch.tensor(float(len(sop_gold))),
            "sop_correct": (out.sop_logits.argmax(-1) == sop_gold).float().sum()}


def hf_train(hf, batches, steps, warmup, window, log_every=100):
    """Trains on `batches` as our loop does; returns [per-window metrics] and the first loss."""

    from bench.torch_lamb import TorchAlbertOptimizer

    optimizer = TorchAlbertOptimizer(hf.named_parameters(), FLAGS.optimizer == "lamb")
    params = [p for _, p in optimizer.params]
    history, sums, first_loss = [], None, None
    t0 = time.time()
    for step in range(steps):
        terms = hf_terms(hf, batches[step])
        loss = (terms["mlm_sum"] / (terms["mlm_weight"] + 1e-5)
                + terms["sop_sum"] / terms["sop_count"])
        if first_loss is None:
            first_loss = loss.item()
        hf.zero_grad(set_to_none=True)
        loss.backward()
        clip_by_global_norm(params, CLIP)
        optimizer.step(official_lr(step, FLAGS.learning_rate, steps, warmup))
        values = {k: float(v.detach()) for k, v in terms.items()}
        sums = values if sums is None else {k: sums[k] + values[k] for k in sums}
        if (step + 1) % window == 0:
            history.append(window_metrics(step + 1, sums))
            sums = None
        if (step + 1) % log_every == 0:
            h = history[-1]
            print(f"  HF step {step + 1}: mlm {h['masked_lm_loss']:.4f} sop "
                  f"{h['sentence_order_loss']:.4f} ({(step + 1) / (time.time() - t0):.1f} "
                  "steps/s)", flush=True)
    return history, first_loss


def window_metrics(step, sums) -> dict:
    return {"step": step, "masked_lm_loss": sums["mlm_sum"] / (sums["mlm_weight"] + 1e-5),
            "masked_lm_accuracy": sums["mlm_correct"] / (sums["mlm_weight"] + 1e-5),
            "sentence_order_loss": sums["sop_sum"] / sums["sop_count"],
            "sentence_order_accuracy": sums["sop_correct"] / sums["sop_count"]}


def hf_evaluate(hf, heldout: str, preds: int) -> dict:
    """The held-out metrics over whole batches of 64, in our evaluation's order."""
    import torch

    from albert_tf import features as F
    from albert_tf.input_pipeline import list_files, ordered_dataset

    files = list_files(heldout)
    with open(heldout + ".json") as f:
        batches = json.load(f)["counts"]["examples"] // 64
    sums = None
    with torch.no_grad():
        for batch in ordered_dataset(files, 64, F.pretraining_schema(SEQ, preds),
                                     num_batches=batches):
            terms = {k: float(v) for k, v in hf_terms(
                hf, {k: v.numpy() for k, v in batch.items()}).items()}
            sums = terms if sums is None else {k: sums[k] + terms[k] for k in sums}
    return window_metrics(None, sums)


# ---------------------------------------------------------------------------------- the judge

def judge_seed(seed: int, paths: dict, work: str) -> dict:
    import tensorflow as tf
    import torch

    from albert_tf.config import AlbertConfig
    from albert_tf.training.train_lib import PretrainingConfig, PretrainingRun

    torch.manual_seed(seed)
    steps, window = FLAGS.steps, FLAGS.window
    warmup = max(1, round(FLAGS.warmup_fraction * steps))
    preds = demo.predictions_for(FLAGS.masked_lm_prob, SEQ)
    heldout_preds = demo.predictions_for(0.15, SEQ)
    out = os.path.join(work, "ours", f"seed{seed}")
    tf.io.gfile.rmtree(out) if tf.io.gfile.exists(out) else None
    config = AlbertConfig.from_json_file(FLAGS.albert_config)
    cfg = PretrainingConfig(
        albert_config=config, input_file=paths["train_records"] + "-*.tfrecord",
        output_dir=out, eval_input_file=paths["heldout_records"], max_seq_length=SEQ,
        max_predictions_per_seq=preds, train_batch_size=FLAGS.batch_size,
        eval_batch_size=64, optimizer=FLAGS.optimizer, learning_rate=FLAGS.learning_rate,
        num_train_steps=steps, num_warmup_steps=warmup, save_checkpoints_steps=steps,
        iterations_per_loop=window, do_eval=True, max_eval_steps=10 ** 6, seed=seed,
        verbose=False)
    run = PretrainingRun(cfg)
    state = hf_state(run.model)
    iterator = run.trainer.iterator_at(run.plan, 0)  # the stream the loop reads from step 0
    batches = [{k: v.numpy() for k, v in next(iterator).items()} for _ in range(steps)]

    # Parity before training: the first batch, one update at the peak learning rate (no
    # warmup, so the step is a real one), through our loop and through HF + bench.torch_lamb.
    hf = hf_model(config, state)
    check = hf_model(config, state)
    one = PretrainingRun(PretrainingConfig(**{**cfg.__dict__, "output_dir": out + "-one",
                                              "num_train_steps": 1, "num_warmup_steps": 0,
                                              "iterations_per_loop": 1, "do_eval": False}))
    ours_loss = one.run()["history"][0]["loss"]
    tf.io.gfile.rmtree(out + "-one")
    from bench.torch_lamb import TorchAlbertOptimizer

    optimizer = TorchAlbertOptimizer(check.named_parameters(), FLAGS.optimizer == "lamb")
    terms = hf_terms(check, batches[0])
    loss = terms["mlm_sum"] / (terms["mlm_weight"] + 1e-5) + terms["sop_sum"] / terms["sop_count"]
    check.zero_grad()
    loss.backward()
    grad_norm = clip_by_global_norm([p for _, p in optimizer.params], CLIP)
    optimizer.step(official_lr(0, FLAGS.learning_rate, 1, 0))
    after = hf_state(one.model)
    hf_params = dict(check.named_parameters())
    worst, still = 0.0, []
    for key, value in after.items():
        mine = hf_params[key].detach().numpy()
        moved = float(np.abs(mine - state[key]).max())
        if moved < 1e-6:  # no real update: the key bias, whose gradient is 0 (softmax shift)
            still.append(key)
            continue
        worst = max(worst, float(np.abs(mine - value).max()) / moved)
    parity = {"first_loss_hf": loss.item(), "first_loss_ours": ours_loss,
              "grad_norm_hf": grad_norm, "update_max_relative_difference": worst,
              "not_updated": still}
    print(f"seed {seed}: first loss HF {loss.item():.6f} ours {ours_loss:.6f}; the first "
          f"update differs by at most {worst:.2e} of its size (not updated on either side: "
          f"{', '.join(still) or 'none'})", flush=True)

    t0 = time.time()
    summary = run.run()
    ours_s = time.time() - t0
    ours_history = [{k: h[k] for k in ("step", "masked_lm_loss", "masked_lm_accuracy",
                                       "sentence_order_loss", "sentence_order_accuracy")}
                    for h in summary["history"]]
    t0 = time.time()
    hf_history, _ = hf_train(hf, batches, steps, warmup, window)
    hf_s = time.time() - t0
    return {"seed": seed, "parity": parity, "ours": ours_history, "hf": hf_history,
            "ours_heldout": {k: summary["eval"][k] for k in
                             ("masked_lm_accuracy", "masked_lm_loss", "sentence_order_accuracy",
                              "sentence_order_loss", "examples")},
            "hf_heldout": hf_evaluate(hf, paths["heldout_records"], heldout_preds),
            "seconds": {"ours": ours_s, "hf": hf_s}}


def judgement(runs: list, warmup: int) -> dict:
    """Per window: mean |ours - HF| over seeds against the seed noise (std across seeds)."""
    out = {}
    for metric in ("masked_lm_loss", "sentence_order_loss", "masked_lm_accuracy",
                   "sentence_order_accuracy"):
        ours = np.array([[h[metric] for h in r["ours"]] for r in runs])
        hf = np.array([[h[metric] for h in r["hf"]] for r in runs])
        steps = [h["step"] for h in runs[0]["ours"]]
        noise = np.maximum(ours.std(0, ddof=1), hf.std(0, ddof=1))
        gap = np.abs(ours - hf).mean(0)
        after = np.array(steps) > warmup
        out[metric] = {"steps": steps, "ours_mean": ours.mean(0).tolist(),
                       "hf_mean": hf.mean(0).tolist(), "gap": gap.tolist(),
                       "noise": noise.tolist(),
                       "windows_within_noise": int((gap[after] <= noise[after]).sum()),
                       "windows": int(after.sum()),
                       "max_gap": float(gap[after].max()),
                       "max_gap_over_noise": float((gap[after] / np.maximum(noise[after],
                                                                            1e-12)).max())}
    for metric in ("masked_lm_accuracy", "sentence_order_accuracy"):
        ours = np.array([r["ours_heldout"][metric] for r in runs])
        hf = np.array([r["hf_heldout"][metric] for r in runs])
        noise = max(ours.std(ddof=1), hf.std(ddof=1))
        out[f"heldout_{metric}"] = {"ours": ours.tolist(), "hf": hf.tolist(),
                                    "difference_of_means": float(ours.mean() - hf.mean()),
                                    "noise": float(noise),
                                    "within_twice_noise": bool(abs(ours.mean() - hf.mean())
                                                               <= 2 * noise)}
    out["tracks"] = bool(all(out[m]["windows_within_noise"] == out[m]["windows"]
                             for m in ("masked_lm_loss", "sentence_order_loss"))
                         and all(out[f"heldout_{m}"]["within_twice_noise"]
                                 for m in ("masked_lm_accuracy", "sentence_order_accuracy")))
    return out


def plot(runs, verdict, path):
    from albert_tf.analysis import charts

    plt = charts.pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.9))
    for ax, metric, title in ((axes[0], "masked_lm_loss", "masked-LM loss"),
                              (axes[1], "sentence_order_loss", "sentence-order loss")):
        for r in runs:
            steps = [h["step"] for h in r["ours"]]
            ax.plot(steps, [h[metric] for h in r["ours"]], color="C0", linewidth=1, alpha=0.8,
                    label="albert_tf (our loop)" if r is runs[0] else None)
            ax.plot(steps, [h[metric] for h in r["hf"]], color="C1", linewidth=1,
                    linestyle="--", alpha=0.9,
                    label="Hugging Face AlbertForPreTraining" if r is runs[0] else None)
        v = verdict[metric]
        ax.set_title(f"{title}, {len(runs)} seeds (largest mean |gap| {v['max_gap']:.1e})",
                     fontsize=9)
        ax.set_xlabel("step")
        ax.set_ylabel(f"{title} (train, per {FLAGS.window} steps)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    ax = axes[2]
    for i, (metric, title) in enumerate((("masked_lm_loss", "masked-LM loss"),
                                         ("sentence_order_loss", "sentence-order loss"))):
        v = verdict[metric]
        ax.semilogy(v["steps"], np.maximum(v["gap"], 1e-9), color=f"C{i}", linewidth=1,
                    label=f"{title}: mean |ours - HF|")
        ax.semilogy(v["steps"], v["noise"], color=f"C{i}", linewidth=1, linestyle=":",
                    label=f"{title}: seed-to-seed std")
    ax.set_title("the gap against seed noise (log scale)", fontsize=9)
    ax.set_xlabel("step")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    fig.suptitle("Same initial weights, same batches, same optimizer: our loop and an outside "
                 "implementation", fontsize=10)
    fig.tight_layout()
    return charts.save(fig, path)


def main(argv):
    del argv
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    work = os.path.abspath(FLAGS.work_dir)
    os.makedirs(work, exist_ok=True)
    paths = demo.corpus_paths(work)
    preds = demo.predictions_for(FLAGS.masked_lm_prob, SEQ)
    commands = (demo.corpus_commands(paths) + demo.vocab_commands(paths)
                + [demo.train_records_command(paths, paths["train_records"], SEQ,
                                              FLAGS.masked_lm_prob, preds, 10)]
                + demo.heldout_commands(paths, SEQ))
    import subprocess
    import sys

    for args, done in commands:
        if not os.path.exists(done):
            subprocess.run([sys.executable, "-m", *args], check=True,
                           env=dict(os.environ, PYTHONPATH=ROOT))
    result_file = os.path.join(work, "judge.json")
    done = json.load(open(result_file))["runs"] if os.path.exists(result_file) else []
    runs = [r for r in done if str(r["seed"]) in FLAGS.seeds]
    for seed in FLAGS.seeds:
        if any(str(r["seed"]) == seed for r in runs):
            continue
        runs.append(judge_seed(int(seed), paths, work))
        with open(result_file, "w") as f:
            json.dump({"runs": runs}, f)
    warmup = max(1, round(FLAGS.warmup_fraction * FLAGS.steps))
    verdict = judgement(runs, warmup)
    settings = {k: getattr(FLAGS, k) for k in ("steps", "window", "batch_size", "learning_rate",
                                               "warmup_fraction", "optimizer",
                                               "masked_lm_prob")}
    settings["albert_config"] = os.path.relpath(FLAGS.albert_config, ROOT)
    with open(result_file, "w") as f:
        json.dump({"settings": settings, "runs": runs, "judgement": verdict}, f, indent=1)
    plot(runs, verdict, os.path.join(work, "pretraining_judge.png"))
    write_markdown(runs, verdict, os.path.join(work, "judge.md"))
    print(open(os.path.join(work, "judge.md")).read())


def write_markdown(runs, verdict, path):
    lines = ["| seed | first loss ours / HF | first update: max difference / its size | "
             "held-out MLM ours / HF | held-out SOP ours / HF | seconds ours / HF |",
             "|---|---|---|---|---|---|"]
    for r in runs:
        p = r["parity"]
        lines.append(
            f"| {r['seed']} | {p['first_loss_ours']:.5f} / {p['first_loss_hf']:.5f} | "
            f"{p['update_max_relative_difference']:.1e} | "
            f"{r['ours_heldout']['masked_lm_accuracy']:.4f} / "
            f"{r['hf_heldout']['masked_lm_accuracy']:.4f} | "
            f"{r['ours_heldout']['sentence_order_accuracy']:.4f} / "
            f"{r['hf_heldout']['sentence_order_accuracy']:.4f} | "
            f"{r['seconds']['ours']:.0f} / {r['seconds']['hf']:.0f} |")
    lines += ["", "| curve (train, per window) | windows after warmup within seed noise | "
              "max mean gap | max mean gap / noise |", "|---|---|---|---|"]
    for metric in ("masked_lm_loss", "sentence_order_loss", "masked_lm_accuracy",
                   "sentence_order_accuracy"):
        v = verdict[metric]
        lines.append(f"| {metric} | {v['windows_within_noise']} of {v['windows']} | "
                     f"{v['max_gap']:.4f} | {v['max_gap_over_noise']:.3f} |")
    lines += ["", "| held-out (final) | ours (mean) | HF (mean) | difference | seed noise |",
              "|---|---|---|---|---|"]
    for metric in ("masked_lm_accuracy", "sentence_order_accuracy"):
        v = verdict[f"heldout_{metric}"]
        lines.append(f"| {metric} | {np.mean(v['ours']):.4f} | {np.mean(v['hf']):.4f} | "
                     f"{v['difference_of_means']:+.4f} | {v['noise']:.4f} |")
    lines += ["", "Ours tracks the outside judge: **" + (
        "yes" if verdict["tracks"] else "no" if len(runs) > 1 else
        "not judged: seed noise needs at least 2 seeds") + "**."]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    app.run(main)
