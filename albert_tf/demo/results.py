"""The main job's figures, read from the files its commands wrote, each beside its baseline:
held-out masked-LM and sentence order against their baselines, the compute spent, what
pretraining bought on SST-2 (both arms, every seed), the served answers, the charts."""

from __future__ import annotations

import glob
import os

import numpy as np

from albert_tf.analysis import baselines, charts, curves, flops
from albert_tf.config import AlbertConfig
from albert_tf.demo.commands import finetune_steps, predictions_for
from albert_tf.demo.job import Run, read_json, write_json
from albert_tf.demo.settings import SAMPLE_DIR, cpu_name


def timings(run: Run) -> dict:
    steps = {name: round(r.get("seconds", 0.0), 1) for name, r in run.state["steps"].items()}
    return {"total_s": round(sum(steps.values()), 1), **steps}


def mean_std(values) -> tuple[float, float]:
    a = np.asarray(values, float)
    return float(a.mean()), float(a.std(ddof=1)) if len(a) > 1 else 0.0


def gain_verdict(pretrained, random_init) -> dict:
    """A gain (or a loss) only when the difference of the means exceeds twice the larger
    standard deviation of the two arms."""
    mp, sp = mean_std(pretrained)
    mr, sr = mean_std(random_init)
    threshold = 2 * max(sp, sr)
    return {"pretrained_mean": mp, "pretrained_std": sp, "random_init_mean": mr,
            "random_init_std": sr, "difference": mp - mr, "threshold": threshold,
            "measurable_gain": bool(mp - mr > threshold),
            "measurable_loss": bool(mr - mp > threshold)}


def curve_slope(points) -> float | None:
    """Held-out accuracy gained per 1,000 steps over the second half of the evaluations."""
    if len(points) < 2:
        return None
    half = points[len(points) // 2 - (1 if len(points) % 2 == 0 else 0):]
    (s0, a0), (s1, a1) = half[0], half[-1]
    return (a1 - a0) / max(1, s1 - s0) * 1000 if s1 > s0 else None


def baselines_of(run: Run, paths: dict, evaluated: int) -> dict:
    """What the model must beat (`albert_tf.analysis.baselines`), on the `evaluated` held-out
    examples; cached in RUN_DIR/baselines.json. The masked-LM baseline's piece by name."""
    s = run.settings
    seq = s["max_seq_length"]
    heldout_preds = predictions_for(s["heldout_masked_lm_prob"], seq)
    cache = run.path("baselines.json")
    base = read_json(cache) if os.path.exists(cache) else None
    if base is None or base.get("masked_lm", {}).get("eval_examples") != evaluated:
        base = {"masked_lm": baselines.most_frequent_piece(
                    paths["train_records"] + "-*.tfrecord", paths["heldout_records"], seq,
                    heldout_preds, evaluated,
                    train_max_predictions_per_seq=predictions_for(s["masked_lm_prob"], seq)),
                "sentence_order": baselines.sentence_order_balance(
                    paths["heldout_records"], seq, heldout_preds, evaluated),
                "sst-2": baselines.majority_class(
                    "sst-2", os.path.join(SAMPLE_DIR, "glue", "SST-2"))}
        write_json(cache, base)
    with open(paths["vocab"] + ".vocab", encoding="utf-8") as f:
        base["pieces"] = [line.split("\t")[0] for line in f]
    base["masked_lm"]["piece"] = base["pieces"][base["masked_lm"]["piece_id"]]
    return base


def pretraining_figures(run: Run, final: dict, base: dict, steps: int) -> dict:
    """{"mlm", "sop", "compute"}: the final held-out evaluation against its baselines, and the
    compute the pretraining spent beside the paper's ALBERT-base."""
    s, sizing = run.settings, run.state.get("sizing", {})
    seq, batch = s["max_seq_length"], s["pretrain_batch_size"]
    config = AlbertConfig.from_json_file(os.path.join(SAMPLE_DIR, s["albert_config"]))
    mlm, sop = base["masked_lm"], base["sentence_order"]
    return {
        "mlm": {"heldout_accuracy": final["masked_lm_accuracy"],
                "unigram_baseline": mlm["accuracy"],
                "ratio": final["masked_lm_accuracy"] / mlm["accuracy"],
                "examples": final["examples"], "positions": mlm["eval_positions"],
                "baseline_piece": mlm["piece"], "heldout_loss": final["masked_lm_loss"]},
        "sop": {"heldout_accuracy": final["sentence_order_accuracy"],
                "constant_baseline": sop["accuracy"], "examples": sop["examples"],
                "swapped_share": sop["swapped_share"],
                "heldout_loss": final["sentence_order_loss"]},
        "compute": {
            "steps": steps, "batch_size": batch, "seq_length": seq,
            "tokens": steps * batch * seq,
            "flops_estimate": flops.pretraining_flops(
                flops.config_dims(config), steps, batch, seq,
                predictions_for(s["masked_lm_prob"], seq)),
            "budget_s": s["budget_minutes"] * 60.0,
            # the paper's ALBERT-base: 125k steps of 4,096 sequences of 512, 20 predictions
            "paper_base_flops": flops.pretraining_flops(flops.model_dims("albert-base"),
                                                        125_000, 4096, 512, 20),
            "examples_per_second": sizing.get("examples_per_second"),
            "mixed_precision": s["mixed_precision"]}}


def gain_figures(run: Run, base: dict) -> dict:
    """SST-2 dev accuracy of both fine-tuning arms, every seed, and the verdict."""
    s = run.settings
    arms = {init: [read_json(run.path("finetune", f"{init}_seed{seed}", "eval_results.json"))
                   for seed in s["finetune_seeds"]] for init in ("pretrained", "random")}
    pretrained = [r["accuracy"] for r in arms["pretrained"]]
    random_init = [r["accuracy"] for r in arms["random"]]
    return {"task": s["finetune_task"], "metric": "accuracy", "labels": s["finetune_examples"],
            "seeds": list(s["finetune_seeds"]), "dev_examples": arms["random"][0]["examples"],
            "pretrained": pretrained, "random_init": random_init,
            "majority_baseline": base["sst-2"]["accuracy"], "steps": finetune_steps(s),
            **gain_verdict(pretrained, random_init)}


def heldout_curves(results: dict, pretrain_dir: str, steps: int) -> None:
    """The training curves (TensorBoard) and the held-out curve from the evaluation files
    (written whole, one per evaluation; a resumed run re-evaluates a checkpoint whose
    evaluation was cut short), into `results`."""
    curve = {name: curves.read_scalars(os.path.join(pretrain_dir, name))
             for name in ("train", "eval")}
    evaluations = sorted((read_json(path) for path in glob.glob(
        os.path.join(pretrain_dir, "eval_results_step_*.json"))), key=lambda e: e["global_step"])
    evaluations = [e for e in evaluations if e["global_step"] <= steps]
    points = [(e["global_step"], e["masked_lm_accuracy"]) for e in evaluations]
    results["mlm"]["curve"] = points
    results["mlm"]["slope_per_1000_steps"] = curve_slope(points)
    results["sop"]["curve"] = [(e["global_step"], e["sentence_order_accuracy"])
                               for e in evaluations]
    for name in ("masked_lm_accuracy", "masked_lm_loss", "sentence_order_accuracy"):
        curve["eval"][name] = [(e["global_step"], e[name]) for e in evaluations]
    results["curves"] = curve


def collect_results(run: Run, paths: dict, pretrain_dir: str, steps: int) -> dict:
    """Every figure of the report (results.json holds them but the curves and the CSV)."""
    final = read_json(os.path.join(pretrain_dir, f"eval_results_step_{steps}.json"))
    base = baselines_of(run, paths, final["examples"])  # the evaluation's whole batches
    results = {"settings": run.settings, "machine": cpu_name(),
               "sizing": run.state.get("sizing", {}),
               **pretraining_figures(run, final, base, steps),
               "pretraining_gain": gain_figures(run, base)}
    served = {name: read_json(run.path("serve", f"{name}.json"))
              for name in ("fill_mask", "sentiment")}
    fill_mask = read_json(run.path("fill_mask", "fill_mask.json"))
    frequent = {base["pieces"][i] for i in base["masked_lm"]["frequent_ids"]}
    fill_mask["frequent_top1"] = sum(rows[0][0]["piece"] in frequent
                                     for rows in fill_mask["models"]["trained"])
    results.update(fill_mask=fill_mask, served=served,
                   served_fill_mask_matches=served_matches(served["fill_mask"], fill_mask))
    with open(run.path("transitions", "transitions.csv"), encoding="utf-8") as f:
        results["transitions_csv"] = f.read()
    heldout_curves(results, pretrain_dir, steps)
    results["charts"] = draw_charts(run, results)
    results["steps"] = run.state["steps"]
    results["timings"] = timings(run)
    return results


def served_matches(served: dict, analysis: dict) -> bool:
    """Whether the served SavedModel's top pieces equal the analysis' for the trained model."""
    pieces = served["outputs"]["fill_mask_pieces"]
    trained = analysis["models"]["trained"]
    return all([a["piece"] for a in trained[i][0]] == list(pieces[i][0])
               for i in range(len(trained)))


def draw_charts(run: Run, results: dict) -> list:
    charts_dir = run.path("charts")
    ptrain, peval = results["curves"]["train"], results["curves"]["eval"]
    mlm, sop = results["mlm"], results["sop"]
    curves.plot_panels([
        ("held-out masked-LM accuracy (15% masking)", "accuracy",
         [("held-out", peval.get("masked_lm_accuracy", []), {"marker": "o"})],
         [(f"most frequent piece `{mlm['baseline_piece']}` ({mlm['unigram_baseline']:.3f})",
           mlm["unigram_baseline"])]),
        ("masked-LM loss", "cross-entropy",
         [(f"train ({run.settings['masked_lm_prob']:.0%} masking)",
           ptrain.get("masked_lm_loss", []), {}),
          ("held-out (15%)", peval.get("masked_lm_loss", []), {"marker": "o"})]),
        ("sentence-order accuracy", "accuracy",
         [("train", ptrain.get("sentence_order_accuracy", []), {}),
          ("held-out (pairs)", peval.get("sentence_order_accuracy", []), {"marker": "o"})],
         [(f"held-out constant guess ({sop['constant_baseline']:.3f})",
           sop["constant_baseline"])]),
    ], os.path.join(charts_dir, "pretraining.png"), "Pretraining on the bundled sample")
    gain = results["pretraining_gain"]
    plot_arms(gain, os.path.join(charts_dir, "finetuning.png"))
    return ["charts/pretraining.png", "charts/finetuning.png", "transitions/transitions.png"]


def plot_arms(gain: dict, path: str) -> str:
    """Dev accuracy per seed of both arms, their means and the majority baseline."""
    plt = charts.pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    for x, (label, key) in enumerate((("random init", "random_init"),
                                      ("pretrained", "pretrained"))):
        values = gain[key]
        ax.scatter([x] * len(values), values, color=f"C{x}", zorder=3, label=f"{label} (seeds)")
        mean, std = mean_std(values)
        ax.errorbar([x + 0.15], [mean], yerr=[std], fmt="s", color=f"C{x}", capsize=4)
    ax.axhline(gain["majority_baseline"], color="0.45", linestyle="--", linewidth=1,
               label=f"majority class ({gain['majority_baseline']:.3f})")
    ax.set_xticks([0, 1], ["random init", "pretrained"])
    ax.set_xlim(-0.5, 1.5)
    ax.set_ylabel("dev accuracy")
    ax.set_title(f"{gain['task'].upper()}, {gain['labels']:,} labels, "
                 f"{len(gain['seeds'])} seeds (mean +- std)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return charts.save(fig, path)
