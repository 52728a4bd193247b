"""Parameter counts: the closed formula, and the paper's Tables 1, 4 and 5.

    python -m albert_tf.params                  # all three tables, from the closed formula
    python -m albert_tf.params --tables 1       # only Table 1
    python -m albert_tf.params --build          # also build each model and check its count
    python -m albert_tf.params --plot           # also draw them (albert_params.png)

The counts come from the closed formula below, which the tests check against
`model.count_params()` of built Keras models (every sharing mode, random shapes, albert-base
exactly), so the tables cost no memory: BERT-xlarge has 1.28 billion parameters (5.7 GB of
float32 weights when built). `--build` builds each row's model and checks it against the
formula, skipping models over `--max_build_params`. The paper (arXiv 1909.11942) rounds to
millions, and not consistently: some cells are rounded to nearest, others truncated. Each row
says which reading matches, or that none does and why.
"""

from __future__ import annotations

from albert_tf.quiet import entry_point  # noqa: E402

entry_point(__name__)  # run as a program: TF's start-up lines filtered (albert_tf.quiet)

import dataclasses
import gc
import math

from absl import app, flags
from albert_tf.commands.cli import run_command

from albert_tf.config import AlbertConfig
from albert_tf.analysis import charts


# ---------------------------------------------------------------------------------------------
# Closed formula.
def embedding_params(c: AlbertConfig) -> int:
    """Word/position/token-type tables [*, E], LayerNorm, and the projection E -> H, which
    exists only when E != H (official rule)."""
    e = c.embedding_size
    projection = 0 if e == c.hidden_size else e * c.hidden_size + c.hidden_size
    return (c.vocab_size + c.max_position_embeddings + c.type_vocab_size) * e + 2 * e \
        + projection


def attention_params(c: AlbertConfig) -> int:
    """Q, K, V, output projections and the post-attention LayerNorm."""
    h = c.hidden_size
    return 4 * (h * h + h) + 2 * h


def ffn_params(c: AlbertConfig) -> int:
    """H -> I -> H and the post-FFN LayerNorm."""
    h, i = c.hidden_size, c.intermediate_size
    return (h * i + i) + (i * h + h) + 2 * h


def backbone_param_count(c: AlbertConfig) -> int:
    """Parameters of `AlbertBackbone(c)`: embeddings, the owned sublayers, the pooler."""
    attention_owners = c.num_hidden_groups if c.attention_shared else c.num_hidden_layers
    ffn_owners = c.num_hidden_groups if c.ffn_shared else c.num_hidden_layers
    return (embedding_params(c)
            + c.inner_group_num * (attention_owners * attention_params(c)
                                   + ffn_owners * ffn_params(c))
            + c.hidden_size * c.hidden_size + c.hidden_size)


def pretrainer_param_count(c: AlbertConfig) -> int:
    """Backbone + MLM head (H -> E dense, LayerNorm, output bias [V]; decoder tied) + SOP."""
    e, h = c.embedding_size, c.hidden_size
    return backbone_param_count(c) + (h * e + e + 2 * e + c.vocab_size) + (2 * h + 2)


def built_param_count(config: AlbertConfig) -> int:
    """Builds `AlbertBackbone(config)` with Keras and returns `count_params()`."""
    import keras

    from albert_tf.models.backbone import AlbertBackbone

    model = AlbertBackbone(config)
    count = model.count_params()
    del model
    keras.backend.clear_session()
    gc.collect()
    return count


# ---------------------------------------------------------------------------------------------
# Paper comparison.
@dataclasses.dataclass
class Row:
    label: str
    config: AlbertConfig
    paper_millions: float | None
    note: str = ""


def compare(count: int, paper_millions: float | None) -> str:
    """How a paper figure (millions) relates to an exact count."""
    if paper_millions is None:
        return "-"
    millions = count / 1e6
    if round(millions) == paper_millions:
        return "= (rounded)"
    if math.floor(millions) == paper_millions:
        return "= (truncated)"
    return f"differs by {millions - paper_millions:+.2f}M"


def base_shape(**changes) -> AlbertConfig:
    return AlbertConfig.from_preset("albert-base").replace(**changes)


# Reasons printed beside cells the architecture cannot reproduce.
_BERT_NOTE = "without the pooler: {alt:.2f}M, paper {alt_vs_paper}"
_XXLARGE_NOTE = ("no ALBERT-xxlarge shape gives 235M: V=30000, E=128, H=4096, I=16384, one "
                 "shared block is 222.60M (+0.56M MLM head); the paper's Table 3 says 233M")
_XLARGE_NOTE = "Table 1 says 60M, Table 3 says 59M for the same model"


def _without_pooler(c: AlbertConfig, count: int) -> float:
    h = c.hidden_size
    return (count - (h * h + h)) / 1e6


def table1_rows() -> list[Row]:
    return [
        Row("BERT base", AlbertConfig.from_preset("bert-base"), 108, _BERT_NOTE),
        Row("BERT large", AlbertConfig.from_preset("bert-large"), 334, _BERT_NOTE),
        Row("BERT xlarge", AlbertConfig.from_preset("bert-xlarge"), 1270, _BERT_NOTE),
        Row("ALBERT base", AlbertConfig.from_preset("albert-base"), 12),
        Row("ALBERT large", AlbertConfig.from_preset("albert-large"), 18),
        Row("ALBERT xlarge", AlbertConfig.from_preset("albert-xlarge"), 60, _XLARGE_NOTE),
        Row("ALBERT xxlarge", AlbertConfig.from_preset("albert-xxlarge"), 235, _XXLARGE_NOTE),
    ]


_PAPER_TABLE4 = {"none": {64: 87, 128: 89, 256: 93, 768: 108},
                 "all": {64: 10, 128: 12, 256: 16, 768: 31}}
_PAPER_TABLE5 = {768: {"all": 31, "attention": 83, "ffn": 57, "none": 108},
                 128: {"all": 12, "attention": 64, "ffn": 38, "none": 89}}
_SHARING_LABEL = {"all": "all-shared", "attention": "shared-attention", "ffn": "shared-FFN",
                  "none": "not-shared"}
_NOT_SHARED_768_NOTE = ("108M is the paper's BERT-base figure (E = H: no projection); "
                        "without the pooler: {alt:.2f}M, paper {alt_vs_paper}")


def table4_rows() -> list[Row]:
    rows = []
    for sharing in ("none", "all"):
        for e, paper in _PAPER_TABLE4[sharing].items():
            note = _NOT_SHARED_768_NOTE if (sharing, e) == ("none", 768) else ""
            rows.append(Row(f"{_SHARING_LABEL[sharing]} E={e}",
                            base_shape(embedding_size=e, sharing=sharing), paper, note))
    return rows


def table5_rows() -> list[Row]:
    rows = []
    for e, cells in _PAPER_TABLE5.items():
        for sharing, paper in cells.items():
            note = _NOT_SHARED_768_NOTE if (sharing, e) == ("none", 768) else ""
            rows.append(Row(f"E={e} {_SHARING_LABEL[sharing]}",
                            base_shape(embedding_size=e, sharing=sharing), paper, note))
    return rows


TABLES = {
    "1": ("Table 1: presets (backbone parameters)", table1_rows),
    "4": ("Table 4: embedding size E, ALBERT-base shape", table4_rows),
    "5": ("Table 5: cross-layer sharing, ALBERT-base shape", table5_rows),
}


def render_table(title: str, rows: list[Row], counter=None) -> str:
    """Formats the table from the closed formula; with `counter` (e.g. `built_param_count`)
    each row's count is also taken from it and must equal the formula's."""
    header = ("model", "L", "H", "E", "sharing", "parameters", "ours (M)", "paper (M)",
              "paper vs ours", "note")
    lines = []
    for row in rows:
        c = row.config
        expected = backbone_param_count(c)
        count = expected if counter is None else counter(c)
        if count != expected:
            raise AssertionError(f"{row.label}: built model has {count:,} parameters, closed "
                                 f"formula gives {expected:,}")
        alt = _without_pooler(c, count)
        note = row.note.format(alt=alt, alt_vs_paper=compare(round(alt * 1e6), row.paper_millions))
        paper = "-" if row.paper_millions is None else f"{row.paper_millions:g}"
        lines.append((row.label, str(c.num_hidden_layers), str(c.hidden_size),
                      str(c.embedding_size), c.sharing, f"{count:,}", f"{count / 1e6:.2f}",
                      paper, compare(count, row.paper_millions), note))
    widths = [max(len(r[i]) for r in [header] + lines) for i in range(len(header))]
    fmt = lambda r: "| " + " | ".join(v.ljust(w) for v, w in zip(r, widths)) + " |"  # noqa: E731
    out = [title, fmt(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [fmt(r) for r in lines]
    return "\n".join(out)


def plot_tables(keys, path: str) -> str:
    """The tables as a chart: one panel per table, our exact count (closed formula) beside the
    paper's figure for every row, in millions on a log scale. Writes the PNG at `path`."""
    plt = charts.pyplot()
    from matplotlib.ticker import FuncFormatter, NullFormatter

    fig, axes = plt.subplots(1, len(keys), figsize=(5.2 * len(keys), 4.4), squeeze=False)
    for ax, key in zip(axes[0], keys):
        title, make_rows = TABLES[key]
        rows = make_rows()
        ys = list(range(len(rows)))[::-1]
        ours = [backbone_param_count(r.config) / 1e6 for r in rows]
        paper = [r.paper_millions for r in rows]
        ax.barh([y + 0.2 for y in ys], ours, height=0.4, label="ours (exact)", color="#3a78b5")
        ax.barh([y - 0.2 for y in ys], [p or 0 for p in paper], height=0.4, label="paper",
                color="#e59a3c")
        for y, value in zip(ys, ours):
            ax.text(value * 1.05, y + 0.2, f"{value:.1f}M", va="center", fontsize=7)
        ax.set_yticks(ys)
        ax.set_yticklabels([r.label for r in rows], fontsize=8)
        ax.set_xscale("log")
        ax.set_xlim(min(ours) / 2, max(ours) * 3)
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_xlabel("parameters (millions, log scale)")
        ax.set_title(title, fontsize=9)
        ax.grid(axis="x", alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return charts.save(fig, path)


def define_flags():
    """Command-line flags (defined only when run as a program)."""
    flags.DEFINE_list("tables", ["1", "4", "5"], "Which paper tables to print: 1, 4, 5.")
    flags.DEFINE_bool("build", False, "Also build each model with Keras and check its "
                      "count_params() against the closed formula.")
    flags.DEFINE_integer("max_build_params", 150_000_000, "With --build: rows with more "
                         "parameters than this are not built (4 bytes each in float32).")
    flags.DEFINE_bool("plot", False, "Also draw the tables as a chart (--plot_file).")
    flags.DEFINE_string("plot_file", "albert_params.png", "Where --plot writes its PNG.")


def main(argv):
    del argv
    FLAGS = flags.FLAGS
    for key in FLAGS.tables:
        if key not in TABLES:
            raise app.UsageError(f"--tables: unknown table {key!r}; choose from {sorted(TABLES)}")
    def built_when_small(config):
        count = backbone_param_count(config)
        return built_param_count(config) if count <= FLAGS.max_build_params else count

    counter = built_when_small if FLAGS.build else None

    for key in FLAGS.tables:
        title, rows = TABLES[key]
        print(render_table(title, rows(), counter), end="\n\n", flush=True)
    if FLAGS.build:
        skipped = sorted({r.label for key in FLAGS.tables for r in TABLES[key][1]()
                          if backbone_param_count(r.config) > FLAGS.max_build_params})
        print(f"built and checked every row but {', '.join(skipped) or 'none'} (over "
              f"--max_build_params={FLAGS.max_build_params:,})")
    if FLAGS.plot:
        print(f"wrote {plot_tables(FLAGS.tables, FLAGS.plot_file)}")


def cli():
    """The command (`python -m` and the console script in pyproject.toml)."""
    run_command(main, define_flags)


if __name__ == "__main__":
    cli()
