"""Figures of the suite: saved to PNG, readable for 1 to 50 points and labels of any length.

- ``saved_figure``: the set-up and tear-down every plot shares (Agg, constrained layout, PNG).
- ``finish``: one legend for all panels, outside the axes (never over the data); a label longer than
  ``LABEL_CHARS`` is shortened to ``[n] its start…`` and written out whole in a key under the figure.
- ``length_ticks``: prefix-length ticks at the measured values only, as ``4k`` / ``185k`` / ``1M``,
  thinned and turned so that they never overlap.
"""

from __future__ import annotations

import textwrap
from contextlib import contextmanager
from pathlib import Path

LABEL_CHARS = 34       # longer legend labels get a key entry
KEY_WRAP_CHARS = 110   # key lines wrap here
MAX_TICKS = 8          # labelled ticks per axis
LEGEND_COLUMN_INCHES = 2.5   # a legend column of LABEL_CHARS at 7 pt
LEGEND_ROW_INCHES = 0.16
KEY_LINE_INCHES = 0.105


@contextmanager
def saved_figure(path: Path | str, *, columns: int = 1, size: tuple[float, float] = (6.4, 4), dpi: int = 120):
    """Yield (figure, axes: one, or a tuple of ``columns``) of a figure written to ``path`` on exit."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    from cycler import cycler

    figure, axes = plt.subplots(1, columns, figsize=size, layout="constrained", squeeze=False)
    for axis in axes[0]:  # 10 colours x 4 markers x 2 line styles: 80 lines before one repeats
        axis.set_prop_cycle(cycler(linestyle=["-", "--"]) * cycler(marker=["o", "s", "^", "D"])
                            * cycler(color=plt.get_cmap("tab10").colors))
    try:
        yield figure, (axes[0][0] if columns == 1 else tuple(axes[0]))
        figure.savefig(path, dpi=dpi)
    finally:
        plt.close(figure)


def compact_number(value: float) -> str:
    """4096 -> 4k, 185000 -> 185k, 1048576 -> 1M, 64 -> 64."""
    for scale, suffix in ((1 << 20, "M"), (1000, "k")):
        if value >= scale:
            shown = value / (1 << 20 if suffix == "M" else 1024 if value % 1024 == 0 else 1000)
            return f"{shown:.0f}{suffix}" if shown >= 10 or shown == int(shown) else f"{shown:.1f}{suffix}"
    return f"{value:g}"


def length_ticks(axis, values) -> None:
    """Ticks on the x axis at the measured ``values`` (log scale), at most MAX_TICKS labelled."""
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

    values = sorted({v for v in values if v and v > 0})
    if not values:
        return
    step = -(-len(values) // MAX_TICKS)
    shown = values[::step]
    axis.xaxis.set_major_locator(FixedLocator(shown))
    axis.xaxis.set_minor_locator(NullLocator())
    axis.xaxis.set_minor_formatter(NullFormatter())
    axis.set_xticklabels([compact_number(v) for v in shown], rotation=45 if len(shown) > 4 else 0,
                         ha="right" if len(shown) > 4 else "center")
    if len(values) == 1:  # one point: some room on either side
        axis.set_xlim(values[0] / 2, values[0] * 2)


def keyed_labels(names: list[str]) -> tuple[dict[str, str], list[str]]:
    """name -> legend label, and the key lines for the names that were shortened."""
    labels, key, number = {}, [], 0
    for name in names:
        if len(name) <= LABEL_CHARS:
            labels[name] = name
            continue
        number += 1
        labels[name] = f"[{number}] {name[:LABEL_CHARS - 6].rstrip()}…"
        key += textwrap.wrap(f"[{number}] {name}", KEY_WRAP_CHARS, subsequent_indent="    ")
    return labels, key


def finish(figure, axes) -> None:
    """One legend for every panel of ``figure``, outside the axes; long labels shortened with a key
    under the figure. Call after plotting, with the full names as the lines' labels."""
    handles, names = [], []
    for axis in axes:
        for handle, name in zip(*axis.get_legend_handles_labels()):
            if name not in names:
                handles.append(handle)
                names.append(name)
    if not names:
        return
    labels, key = keyed_labels(names)
    columns = 1 if len(names) <= 16 else 2 if len(names) <= 32 else 3
    rows = -(-len(names) // columns)
    width, height = figure.get_size_inches()  # room for the legend: a column of labels, and its rows
    figure.set_size_inches(width + LEGEND_COLUMN_INCHES * columns, max(height, LEGEND_ROW_INCHES * rows + 0.6))
    figure.legend(handles, [labels[n] for n in names], loc="outside right upper", fontsize=7, ncols=columns,
                  frameon=False)
    if key:
        width, height = figure.get_size_inches()
        extra = KEY_LINE_INCHES * len(key) + 0.2
        figure.set_size_inches(width, height + extra)
        figure.get_layout_engine().set(rect=(0, extra / (height + extra), 1, 1 - extra / (height + extra)))
        figure.text(0.01, 0.01, "\n".join(key), fontsize=6, family="monospace", va="bottom", ha="left")
