"""The main job's report: RUN_DIR/report.md rendered from a Jinja2 template
(templates/report.md.j2) over the results, report.html converted from it by Python-Markdown
(tables, fenced code) into templates/report.html.j2, and results.json."""

from __future__ import annotations

import math
import os
import shutil

import jinja2
import markdown

from albert_tf.paths import atomic_write
from albert_tf.demo.job import Run, shown_path, write_json

TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")
TITLE = "albert_tf main job"
RUNTIMES = {"cpp": "C++ (`LoadSavedModel` + `Session::Run`, as TF Serving loads a model)",
            "python": "Python (`tf.saved_model.load`)"}


def scale_text(results: dict) -> str:
    """What this run's scale shows and does not, from its own curve."""
    mlm, sop = results["mlm"], results["sop"]
    slope = mlm.get("slope_per_1000_steps")
    parts = [f"Held-out masked-LM accuracy reached {mlm['ratio']:.1f}x its baseline."]
    if slope is not None:
        parts.append(f"Over the second half of the run it still rose by {slope:+.3f} per 1,000 "
                     "steps, so a larger budget buys more" if slope > 0.002 else
                     f"Over the second half of the run it changed by {slope:+.3f} per 1,000 "
                     "steps: the curve has flattened at this learning-rate schedule")
        parts[-1] += " (`--budget_minutes` scales the run)."
    margin = sop["heldout_accuracy"] - sop["constant_baseline"]
    sigma = math.sqrt(0.25 / max(1, sop["examples"]))
    if margin > 2 * sigma:
        parts.append(f"Sentence order is {margin:+.3f} above its constant baseline on "
                     f"{sop['examples']:,} held-out pairs (2 sigma of that many coin flips is "
                     f"{2 * sigma:.3f}).")
    else:
        parts.append(f"Sentence order is not above its constant baseline ({margin:+.3f}; 2 "
                     f"sigma of {sop['examples']:,} coin flips is {2 * sigma:.3f}): at this "
                     "scale the model does not tell the order of two held-out segments better "
                     "than a constant guess.")
    return " ".join(parts)


def gain_text(results: dict) -> str:
    g = results["pretraining_gain"]
    if g["measurable_gain"]:
        return (f"Pretraining gained {g['difference']:+.4f} in mean accuracy, more than twice "
                f"the larger standard deviation ({g['threshold']:.4f}): a measurable gain.")
    if g["measurable_loss"]:
        verdict = (f"No gain at this scale; a measurable loss: the pretrained arm's mean is "
                   f"{-g['difference']:.4f} below random initialisation's, more than twice the "
                   f"larger standard deviation ({g['threshold']:.4f}). An outside ALBERT "
                   "(Hugging Face's) pretrained for minutes on this machine measured the same "
                   "direction on SST-2 (docs/pretraining.md).")
    else:
        verdict = (f"No measurable gain at this scale: the difference of the means, "
                   f"{g['difference']:+.4f}, is within twice the larger standard deviation "
                   f"({g['threshold']:.4f}).")
    fm = results["fill_mask"]
    return (f"{verdict} What the pretrained model has learned, from this run's own figures: "
            f"its masked-LM accuracy is {results['mlm']['ratio']:.1f}x that of always "
            f"answering `{results['mlm']['baseline_piece']}`, and {fm['frequent_top1']} of the "
            f"{len(fm['inputs'])} fill-mask answers below are among the 20 pieces most often "
            "masked in training: it has learned which pieces are frequent more than how the "
            "context decides them, and only the latter would help a sentiment classifier. "
            f"The paper pretrained ALBERT-base with about "
            f"{results['compute']['paper_base_flops']:.1e} FLOPs, "
            f"{results['compute']['paper_base_flops'] / results['compute']['flops_estimate']:.0e}"
            " times this run's, on about 16 GB of text. On the bundled corpus (about 818k "
            "tokens) the data is the bound, not the compute: an outside judge (Hugging Face's "
            "ALBERT on a lent H100) pretrained on it for 28 epochs reached held-out masked-LM "
            "accuracy 0.141 and SST-2 0.663 +- 0.005 against 0.656 +- 0.002 from random (3 "
            "seeds), so a larger `--budget_minutes` or an accelerator does not move this run "
            "toward the paper; what would is more text, a larger corpus of your own through "
            "the same commands (docs/pretraining.md).")


def _cell(text) -> str:
    """A Markdown table cell: `|` escaped, one line."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _answers(rows) -> str:
    return ", ".join(f"`{a['piece']}` {a['probability']:.3g}" for a in rows[0])


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             autoescape=False)  # Markdown; the HTML is escaped by Markdown
    env.filters.update(cell=_cell, answers=_answers, round4=lambda x: f"{x:.4f}")
    return env


def context(run: Run, results: dict) -> dict:
    """What the template shows: the results, and the sentences that depend on them."""
    compute, sizing = results["compute"], results.get("sizing", {})
    st = results["served"]["sentiment"]
    labels = st["outputs"].get("label", [])
    names, sentiment = {0: "negative (0)", 1: "positive (1)"}, []
    for i, text in enumerate(st["inputs"]):
        label = labels[i] if i < len(labels) else None
        sentiment.append((text, names.get(label, str(label)),
                          ", ".join(f"{q:.3f}" for q in st["outputs"]["probabilities"][i])))
    runtime = RUNTIMES[st["runtime"]]
    if st["runtime"] == "python" and not shutil.which("g++"):
        runtime = runtime[:-1] + "; no g++ on this machine)"
    fitted = (f"this machine ran {compute['examples_per_second']:.0f} examples/s in a "
              f"{sizing['probe']['steps']}-step probe, so {compute['steps']:,} steps fit the "
              "budget" if sizing.get("fitted") else "the step count was given "
              "(`--pretrain_steps`), not fitted to the budget")
    return {"results": results, "run_dir": shown_path(run.dir), "s": results["settings"],
            "mlm": results["mlm"], "sop": results["sop"], "compute": compute,
            "gain": results["pretraining_gain"], "t": results["timings"], "sizing": sizing,
            "fm": results["fill_mask"], "fitted": fitted, "runtime": runtime,
            "sentiment": sentiment, "scale_text": scale_text(results),
            "gain_text": gain_text(results)}


def render(run: Run, results: dict) -> tuple[str, str]:
    """(report.md, report.html)."""
    env = _environment()
    text = env.get_template("report.md.j2").render(context(run, results))
    body = markdown.markdown(text, extensions=["tables", "fenced_code"])
    page = env.get_template("report.html.j2").render(title=TITLE, body=body)
    return text, page


def write_report(run: Run, results: dict) -> str:
    """report.md, report.html and results.json (every figure but the curves and the CSV)."""
    for name, text in zip(("report.md", "report.html"), render(run, results)):
        with atomic_write(run.path(name)) as f:
            f.write(text)
    summary = {k: v for k, v in results.items() if k not in ("curves", "transitions_csv")}
    write_json(run.path("results.json"), summary)
    return run.path("report.md")
