"""Writing results: JSON, CSV, markdown tables and the speed/quality frontier plot (matplotlib,
imported only when a plot is drawn, with the non-interactive Agg backend)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any, Optional, Sequence

NOT_MEASURED = "n/a"


def write_json(path: Path, data: Any) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    return path


def write_jsonl(path: Path, rows: Sequence[dict]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for row in rows:
            f.write(json.dumps(row, default=str) + "\n")
    return path


def write_csv(path: Path, rows: Sequence[dict], columns: Sequence[str]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({c: ("" if row.get(c) is None else row.get(c)) for c in columns})
    return path


def fmt(value: Any, digits: int = 3) -> str:
    """A table cell: None -> ``n/a`` (never a made-up number), floats rounded."""
    if value is None:
        return NOT_MEASURED
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if not math.isfinite(value):
            return NOT_MEASURED
        return f"{value:.{digits}f}"
    return str(value)


def _cell(key: str, value: Any, digits: int) -> str:
    if key == "budget" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:g}"
    return fmt(value, digits)


def markdown_table(rows: Sequence[dict], columns: Sequence[tuple[str, str]], digits: int = 3) -> str:
    """``columns`` = [(key, header)]; one row per dict. Budgets print as ``8``, other floats rounded."""
    head = "| " + " | ".join(h for _, h in columns) + " |"
    rule = "| " + " | ".join("---" for _ in columns) + " |"
    body = ["| " + " | ".join(_cell(k, row.get(k), digits) for k, _ in columns) + " |" for row in rows]
    return "\n".join([head, rule, *body]) + "\n"


def load_json(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def speedups_by_budget(speed: Optional[dict]) -> dict[float, float]:
    """Budget -> median tokens/s ratio ASD/strict from a speed benchmark JSON (budget 0 -> 1.0)."""
    if not speed:
        return {}
    out = {0.0: 1.0}
    for row in speed.get("budgets", []):
        if row.get("speedup_median") is not None:
            out[float(row["budget"])] = float(row["speedup_median"])
    return out


def plot_frontier(audit: dict, out_png: Path, speed: Optional[dict] = None) -> Path:
    """One point per budget: x = speedup over strict (from ``speed``) or mean accept length;
    y = accuracy (mean over scored tasks, and one faint line per task); or, with no scored task,
    the share of outputs identical to the strict output."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    speedups = speedups_by_budget(speed)
    per_budget = audit.get("by_budget", [])
    use_speed = bool(speedups) and all(float(r["budget"]) in speedups for r in per_budget)

    def x_of(row: dict) -> Optional[float]:
        return speedups.get(float(row["budget"])) if use_speed else row.get("accept_length_mean")

    scored = any(r.get("accuracy_mean") is not None for r in per_budget)
    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=120)
    if scored:
        by_task: dict[str, list[tuple[float, float]]] = {}
        for r in audit.get("results", []):
            x = x_of({"budget": r["budget"], "accept_length_mean": r.get("accept_length_mean")})
            if r.get("accuracy") is not None and x is not None:
                by_task.setdefault(r["task"], []).append((x, r["accuracy"]))
        for task, pts in sorted(by_task.items()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", alpha=0.35, lw=1, label=task)
    points = []
    for r in per_budget:
        y = r.get("accuracy_mean") if scored else (
            None if r.get("divergence_share") is None else 1.0 - r["divergence_share"])
        x = x_of(r)
        if x is not None and y is not None:
            points.append((x, y, r["budget"]))
    points.sort()
    if points:
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", color="black", lw=2,
                label="mean" if scored else "identical to strict")
        for x, y, b in points:
            ax.annotate(f"B={b:g}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
        lo, hi = min(p[1] for p in points), max(p[1] for p in points)
        if hi - lo < 0.05:  # keep a flat frontier readable: at least 5 points of accuracy visible
            mid = min(max((lo + hi) / 2, 0.025), 0.975)
            ax.set_ylim(mid - 0.035, mid + 0.035)
    else:
        ax.text(0.5, 0.5, "no measured points", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("throughput ASD / strict (fixed work)" if use_speed else "mean accept length (tokens / verify round)")
    ax.set_ylabel("accuracy" if scored else "share of outputs identical to strict")
    ax.set_title(audit.get("title") or "ASD speed / quality frontier")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    out_png = Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png)
    plt.close(fig)
    return out_png
