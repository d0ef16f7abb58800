"""Every figure the suite writes stays readable for 1 to 50 points and labels of any length: the
legend sits outside every axes, x tick labels never overlap, every text lies inside the figure.
The figures are rendered (Agg) and their drawn text boxes compared; the PNGs of the last run stay
in the test's folder to be looked at."""

import pytest

matplotlib = pytest.importorskip("matplotlib")

from harness.bench.report import plot  # noqa: E402
from harness.decode.report import plot_budget, plot_steps  # noqa: E402
from harness.measure import figures  # noqa: E402

LONG = "cuda_ws[BLOCK_N=64,MIN_BLOCKS=1,PRODUCER=1,ROW_TILES=2,SPLIT_K=1,STAGES=3,WARPS_M=4,WARPS_N=2,kv_splits=0]"


def _bench_records(points: int, implementations: int, long_labels: bool) -> list[dict]:
    lengths = [int(1024 * 1.25 ** i) for i in range(points)]
    records = []
    for n in range(implementations):
        config = {"BLOCK_N": 64 + n, "note": LONG} if long_labels else {}
        for length in lengths:
            records.append({"variant": f"variant_{n}", "config": config, "prefix_len": length, "tree_nodes": 64,
                            "heads": 8, "median_ms": 0.01 * length / 1024 * (1 + n / 10), "pct_roofline": 30 + n,
                            "counters": {"status": "ok", "tensor_pipe_pct": 40.0}})
    return records


def _check_readable(path) -> None:
    """Re-render ``path``'s figure is not possible from a PNG; instead the plotting functions are run
    under a hook that keeps the last figure: see _rendered."""
    figure = _rendered.pop(str(path))
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    page = figure.bbox
    axes_boxes = [axis.get_window_extent(renderer) for axis in figure.axes]
    for legend in figure.legends:
        box = legend.get_window_extent(renderer)
        assert not any(box.overlaps(a) for a in axes_boxes), f"{path}: the legend covers the axes"
        assert page.contains(box.x0, box.y0) and page.contains(box.x1 - 1, box.y1 - 1), f"{path}: legend off the page"
    for axis in figure.axes:
        labels = [t for t in axis.get_xticklabels() if t.get_visible() and t.get_text()]
        boxes = sorted((t.get_window_extent(renderer) for t in labels), key=lambda b: b.x0)
        assert all(a.x1 <= b.x0 + 1 or a.y1 <= b.y0 + 1 for a, b in zip(boxes, boxes[1:])), f"{path}: x ticks overlap"
    for text in figure.texts:
        box = text.get_window_extent(renderer)
        assert box.y0 >= page.y0 - 1 and box.x1 <= page.x1 + 1, f"{path}: the key runs off the figure"


_rendered = {}


@pytest.fixture(autouse=True)
def _keep_figures(monkeypatch):
    """savefig as usual, and keep the figure (not closed) for the checks."""
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    original = Figure.savefig

    def savefig(self, path, *args, **kwargs):
        original(self, path, *args, **kwargs)
        _rendered[str(path)] = self

    monkeypatch.setattr(Figure, "savefig", savefig)
    monkeypatch.setattr(plt, "close", lambda *a, **k: None)
    yield
    _rendered.clear()
    plt.close("all")


@pytest.mark.parametrize("points, implementations, long_labels", [
    pytest.param(1, 1, False, id="one-point"),
    pytest.param(1, 3, True, id="one-point-long-labels"),
    pytest.param(5, 8, True, id="few-points-long-labels"),
    pytest.param(50, 12, False, id="fifty-points"),
    pytest.param(50, 40, True, id="fifty-points-forty-long-labels"),
])
def test_bench_report_figures_are_readable(tmp_path, points, implementations, long_labels):
    written = plot(_bench_records(points, implementations, long_labels), tmp_path / "r")
    assert [p.name for p in written] == ["r-latency.png", "r-roofline.png", "r-tensor.png"]
    for path in written:
        assert path.stat().st_size > 5000
        _check_readable(path)


def _decode_records(contexts: list[int], budgets: list[int]) -> list[dict]:
    return [{"variant": "auto", "context": c, "budget": b, "median_step_ms": 1 + c / 1e4 + b / 100,
             "tokens_per_s": 100 + b, "status": "ok", "phase_timing": "overlapped", "draft_on": "host"}
            for c in contexts for b in budgets]


@pytest.mark.parametrize("contexts, budgets", [([4096], [64]), ([2 ** i for i in range(10, 18)], [16, 32, 64, 128])])
def test_decode_figures_are_readable(tmp_path, contexts, budgets):
    records = _decode_records(contexts, budgets)
    plot_steps(records, tmp_path / "steps.png")
    plot_budget(records, tmp_path / "budget.png")
    for name in ("steps.png", "budget.png"):
        _check_readable(tmp_path / name)


def test_long_labels_are_shortened_with_a_key():
    labels, key = figures.keyed_labels(["short", LONG])
    assert labels["short"] == "short" and labels[LONG].startswith("[1] ") and len(labels[LONG]) <= figures.LABEL_CHARS
    assert "".join(line.strip() for line in key).replace(" ", "") == f"[1]{LONG}".replace(" ", "")


@pytest.mark.parametrize("value, text", [(64, "64"), (4096, "4k"), (32768, "32k"), (131072, "128k"), (185000, "185k"),
                                         (1 << 20, "1M"), (1500, "1.5k")])
def test_compact_numbers(value, text):
    assert figures.compact_number(value) == text
