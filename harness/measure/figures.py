"""One matplotlib figure saved to a PNG: the set-up and tear-down every plot of the suite shares."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path


@contextmanager
def saved_figure(path: Path | str, *, columns: int = 1, size: tuple[float, float] = (6.4, 4)):
    """Yield the axes (one, or a tuple of ``columns``) of a figure written to ``path`` on exit."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, columns, figsize=size)
    try:
        yield axes
        figure.tight_layout()
        figure.savefig(path, dpi=120)
    finally:
        plt.close(figure)
