"""Predicted-vs-measured scatter plots (matplotlib, Agg backend)."""

from __future__ import annotations

import os
from typing import Mapping

import numpy as np


def plot_predictions(path: str | os.PathLike, title: str, unit: str,
                     results: Mapping[str, tuple[np.ndarray, np.ndarray, float | None]]) -> None:
    """One panel per model: measured (x) vs predicted (y), log-log, with the
    ``y = x`` line and the +-10 % band. ``results``: model -> (measured,
    predicted, MAPE)."""
    # lazy: matplotlib is heavy and only the report's plots need it
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = max(len(results), 1)
    cols = min(n, 4)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 3.4 * rows), squeeze=False)
    for ax, (name, (true, pred, mape)) in zip(axes.flat, results.items()):
        ok = np.isfinite(true) & np.isfinite(pred) & (true > 0) & (pred > 0)
        t, p = true[ok], pred[ok]
        if len(t):
            lo, hi = min(t.min(), p.min()) / 1.2, max(t.max(), p.max()) * 1.2
            ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="0.85", lw=0)
            ax.plot([lo, hi], [lo, hi], color="0.4", lw=0.8)
            ax.scatter(t, p, s=6, alpha=0.6)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlim(lo, hi)
            ax.set_ylim(lo, hi)
        label = f"{name}\nMAPE {mape:.2f} %" if mape is not None else name
        ax.set_title(label, fontsize=9)
        ax.set_xlabel(f"measured [{unit}]", fontsize=8)
        ax.set_ylabel(f"predicted [{unit}]", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(results):]:
        ax.axis("off")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
