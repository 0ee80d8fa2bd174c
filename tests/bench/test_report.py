"""Report and plot generation from synthetic result files."""

import json

from sglang_asd.bench import report

AUDIT = {
    "title": "synthetic",
    "results": [
        {"task": "gsm8k", "budget": 0.0, "accuracy": 0.80, "accept_length_mean": 3.0, "accept_length": 3.0},
        {"task": "gsm8k", "budget": 8.0, "accuracy": 0.79, "accept_length_mean": 3.4, "accept_length": 3.4},
        {"task": "mmlu", "budget": 0.0, "accuracy": 0.60, "accept_length_mean": 2.0, "accept_length": 2.0},
        {"task": "mmlu", "budget": 8.0, "accuracy": 0.61, "accept_length_mean": 2.2, "accept_length": 2.2},
        {"task": "mtbench", "budget": 0.0, "accuracy": None, "accept_length_mean": 2.5, "accept_length": 2.5},
    ],
    "by_budget": [
        {"budget": 0.0, "accuracy_mean": 0.70, "divergence_share": 0.0, "accept_length_mean": 2.5},
        {"budget": 8.0, "accuracy_mean": 0.70, "divergence_share": 0.6, "accept_length_mean": 2.8},
    ],
}
SPEED = {"budgets": [{"budget": 8.0, "speedup_median": 1.07}]}


def _png_ok(path):
    data = path.read_bytes()
    return len(data) > 1000 and data[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_with_accept_length_axis(tmp_path):
    out = report.plot_frontier(AUDIT, tmp_path / "frontier.png")
    assert _png_ok(out)


def test_plot_with_speed_axis(tmp_path):
    assert report.speedups_by_budget(SPEED) == {0.0: 1.0, 8.0: 1.07}
    assert _png_ok(report.plot_frontier(AUDIT, tmp_path / "f.png", speed=SPEED))


def test_plot_with_nothing_scored_or_measured(tmp_path):
    only_chat = {"results": [], "by_budget": [{"budget": 0.0, "accuracy_mean": None, "divergence_share": 0.0,
                                                "accept_length_mean": None}]}
    assert _png_ok(report.plot_frontier(only_chat, tmp_path / "empty.png"))


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
