"""The rollout benchmark's plots stay readable for long mode names (modes that carry their own knobs)."""

from matplotlib.backends.backend_agg import FigureCanvasAgg

from rl.bench.plots import length_histograms, timelines

MODES = ["plain", "darts+sart@avg_redundancy=1.75@min_redundancy=1.5", "darts+sart@long_wait=1.5@max_redundancy=2.5"]


def _runs() -> list[dict]:
    samples = [
        {"group": g, "index": i, "length": 5 + 3 * i, "start": 0.1 * i, "end": 0.5 + 0.2 * i, "fate": "kept"}
        for g in range(4)
        for i in range(4)
    ]
    return [{"mode": m, "repeat": 0, "samples": samples, "metrics": {"time_to_batch_s": 1.0}} for m in MODES]


def _label_boxes(fig) -> list:
    """Window extents of every visible axis label and panel title that names a mode."""
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    texts = [t for ax in fig.axes for t in (ax.yaxis.label, ax.title, ax._left_title) if t.get_text() in MODES]
    return [t.get_window_extent(renderer) for t in texts]


def test_long_mode_names_do_not_overlap_in_any_panel_plot():
    for fig in (timelines(_runs()), length_histograms(_runs())):
        boxes = _label_boxes(fig)
        assert len(boxes) == len(MODES)
        width, height = fig.bbox.width, fig.bbox.height
        for i, a in enumerate(boxes):
            assert a.x0 >= 0 and a.y0 >= 0 and a.x1 <= width and a.y1 <= height, "label outside the figure"
            for b in boxes[i + 1 :]:
                assert not a.overlaps(b), "two panels' mode labels overlap"
