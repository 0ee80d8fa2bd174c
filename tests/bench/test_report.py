"""Report and plot generation from synthetic result files."""

import json

from sglang_asd.bench import report

AUDIT = {
    "title": "synthetic",
    "results": [
        {"task": "gsm8k", "arm": "b8", "acc_delta": -0.01, "scored_pairs": 100, "accept_length": 3.4},
        {"task": "mmlu", "arm": "b8", "acc_delta": 0.01, "scored_pairs": 100, "accept_length": 2.2},
        {"task": "mtbench", "arm": "b8", "acc_delta": None, "scored_pairs": 0, "accept_length": 2.5},
    ],
    "by_arm": [
        {"arm": "strict", "acc_delta": 0.0, "acc_delta_ci": [0.0, 0.0], "scored_pairs": 200, "pairs": 280,
         "divergence_share": 0.0, "accept_length": 2.5},
        {"arm": "b8", "acc_delta": 0.0, "acc_delta_ci": [-0.03, 0.03], "scored_pairs": 200, "pairs": 280,
         "divergence_share": 0.6, "accept_length": 2.8},
        {"arm": "strict-rerun", "acc_delta": 0.0, "acc_delta_ci": [0.0, 0.0], "scored_pairs": 200, "pairs": 280,
         "divergence_share": 0.0, "accept_length": 2.5},
    ],
}
SPEED = {"arms": [
    {"arm": "strict", "speedup_median": 1.0},
    {"arm": "b8", "repeats_n": 3, "speedup_median": 1.07, "speedup_ci": [1.01, 1.1], "prompts_n": 16,
     "prompt_speedup": 1.06, "prompt_speedup_ci": [1.03, 1.09]},
    {"arm": "b32", "repeats_n": 5, "speedup_median": 1.1, "speedup_ci": [1.05, 1.2], "prompts_n": 16,
     "prompt_speedup": 1.12, "prompt_speedup_ci": [1.08, 1.15]},
]}


def _png_ok(path):
    data = path.read_bytes()
    return len(data) > 1000 and data[:8] == b"\x89PNG\r\n\x1a\n"


def test_speedups_by_arm_uses_prompts_when_repeats_are_few():
    got = report.speedups_by_arm(SPEED)
    assert got["strict"]["value"] == 1.0
    assert got["b8"] == {"value": 1.06, "ci": [1.03, 1.09], "n": 16, "basis": "prompts"}
    assert got["b32"] == {"value": 1.1, "ci": [1.05, 1.2], "n": 5, "basis": "repeats"}
    old = report.speedups_by_arm({"budgets": [{"budget": 8.0, "speedup_median": 1.05}]})  # version 1 files
    assert old["b8"]["value"] == 1.05 and old["b8"]["ci"] is None
    assert report.speedups_by_arm(None) == {}


def test_plot_with_accept_length_axis(tmp_path):
    assert _png_ok(report.plot_frontier(AUDIT, tmp_path / "frontier.png"))


def test_plot_with_speed_axis(tmp_path):
    assert _png_ok(report.plot_frontier(AUDIT, tmp_path / "f.png", speed=SPEED))


def _labels_off_their_box(fig):
    """Labels any part of which falls outside where it belongs: an arm's annotation outside the
    axes (over the tick labels, or off the figure), a legend entry or axis label off the figure."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    placed = [(t, ax.bbox) for ax in fig.axes for t in ax.texts]
    placed += [(t, fig.bbox) for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    placed += [(t, fig.bbox) for ax in fig.axes for t in (ax.xaxis.label, ax.yaxis.label)]
    extents = [(t.get_text(), t.get_window_extent(renderer), box) for t, box in placed if t.get_text()]
    return [text for text, e, box in extents if not (box.contains(*e.p0) and box.contains(*e.p1))]


def test_plot_keeps_every_label_on_the_figure_and_names_the_noise_floor():
    """The noise floor shares strict's x (speed axis: 1.0, the left edge): a label drawn on its
    left once fell off the figure. It is in the legend; every arm's label is inside the axes."""
    import matplotlib.pyplot as plt

    audit = {**AUDIT, "by_arm": [r for r in AUDIT["by_arm"] if r["arm"] != "strict-rerun"]
             + [{**AUDIT["by_arm"][2], "acc_delta": 0.003, "acc_delta_ci": [-0.007, 0.017]}]}
    for speed in (SPEED, None):
        fig = report.frontier_figure(audit, speed)
        try:
            assert _labels_off_their_box(fig) == []
            ax = fig.axes[0]
            assert [t.get_text() for t in ax.texts] == ["strict (n=200)", "b8 (n=200)"]
            assert "noise floor: strict-rerun (n=200)" in [t.get_text() for t in ax.get_legend().get_texts()]
        finally:
            plt.close(fig)


def test_plot_with_nothing_scored_or_measured(tmp_path):
    only_chat = {"results": [], "by_arm": [{"arm": "strict", "acc_delta": None, "divergence_share": 0.0,
                                            "accept_length": None, "pairs": 0}]}
    assert _png_ok(report.plot_frontier(only_chat, tmp_path / "empty.png"))


def test_fmt_ci():
    assert report.fmt_ci(1.0456, [0.98, 1.1]) == "1.046 [0.980, 1.100]"
    assert report.fmt_ci(-1.5, [-3.0, 0.25], digits=1, signed=True) == "-1.5 [-3.0, +0.2]"
    assert report.fmt_ci(2.0, None) == "2.000"
    assert report.fmt_ci(None, [1, 2]) == "n/a"
    assert report.fmt_ci(float("nan"), None) == "n/a"


def test_markdown_never_invents_numbers():
    md = report.markdown_table([{"a": None, "b": 1.23456, "c": float("nan"), "d": True}],
                               [("a", "A"), ("b", "B"), ("c", "C"), ("d", "D")])
    assert md.splitlines() == ["| A | B | C | D |", "| --- | --- | --- | --- |", "| n/a | 1.235 | n/a | yes |"]


def test_json_csv_jsonl(tmp_path):
    report.write_json(tmp_path / "x" / "a.json", {"k": 1})
    assert json.loads((tmp_path / "x" / "a.json").read_text()) == {"k": 1}
    report.write_csv(tmp_path / "a.csv", [{"a": 1, "b": None, "z": 9}], ["a", "b"])
    assert (tmp_path / "a.csv").read_text().splitlines() == ["a,b", "1,"]
    report.write_jsonl(tmp_path / "a.jsonl", [{"i": 0}, {"i": 1}])
    assert len((tmp_path / "a.jsonl").read_text().splitlines()) == 2
