"""matplotlib set up for files, not screens: the Agg backend, one style, PNGs written atomically."""

from __future__ import annotations

import os

from albert_tf.paths import atomic_write


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed)."""
    try:
        import matplotlib
    except ImportError as e:
        raise ImportError("Charts need matplotlib: pip install -r requirements.txt "
                          "(or pip install matplotlib)") from e
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def save(fig, path: str, dpi: int = 110) -> str:
    """Writes `fig` to `path` (PNG) whole (`albert_tf.paths.atomic_write`) and closes it."""
    os.makedirs(os.path.dirname(os.path.abspath(path)) or ".", exist_ok=True)
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format="png", dpi=dpi, bbox_inches="tight",
                    metadata={"Software": None})  # no version stamp: same data, same bytes
    pyplot().close(fig)
    return path
