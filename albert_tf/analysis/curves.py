"""Training curves: scalars from the TensorBoard event files the training loop writes
(`OUTPUT_DIR/train`, `OUTPUT_DIR/eval`), and charts of them."""

from __future__ import annotations

import glob
import os
from albert_tf.analysis import charts


def read_scalars(logdir: str) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value), ...]} (sorted by step; a later event for a step wins) from every
    event file in `logdir`; {} when there is none."""
    import numpy as np
    import tensorflow as tf
    from tensorflow.core.util import event_pb2

    scalars: dict[str, dict[int, float]] = {}
    for path in sorted(glob.glob(os.path.join(logdir, "events.out.tfevents.*"))):
        for record in tf.data.TFRecordDataset(path):
            event = event_pb2.Event.FromString(record.numpy())
            for value in event.summary.value:
                kind = value.WhichOneof("value")
                if kind == "simple_value":
                    number = value.simple_value
                elif kind == "tensor" and value.tensor.dtype in (tf.float32.as_datatype_enum,
                                                                 tf.float64.as_datatype_enum):
                    number = float(np.asarray(tf.make_ndarray(value.tensor)).reshape(-1)[0])
                else:
                    continue
                scalars.setdefault(value.tag, {})[int(event.step)] = float(number)
    return {tag: sorted(points.items()) for tag, points in scalars.items()}


def plot_panels(panels, path: str, title: str | None = None) -> str:
    """One PNG of several panels side by side.

    Args:
        panels: [(panel title, y label, [(series label, [(step, value)], style dict)],
            optional horizontal reference lines [(label, y)])].
        path: where to write the PNG.
    """
    plt = charts.pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.6), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        name, ylabel, series = panel[:3]
        references = panel[3] if len(panel) > 3 else []
        for label, points, style in series:
            if points:
                steps, values = zip(*points)
                ax.plot(steps, values, label=label, **style)
        for i, (label, y) in enumerate(references):
            ax.axhline(y, color="0.45", linestyle=(0, (4, 2 + 2 * i)), linewidth=1, label=label)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return charts.save(fig, path)
