"""Writing results: JSON, CSV, markdown tables and the speed/quality frontier plot (matplotlib,
imported only when a plot is drawn, with the non-interactive Agg backend)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any, Optional, Sequence

from sglang_asd.bench import runlog

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


def fmt_ci(value: Any, ci: Optional[Sequence[float]], digits: int = 3, signed: bool = False) -> str:
    """``1.046 [0.981, 1.102]``: a value and its interval (``n/a`` parts never invented)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return NOT_MEASURED
    spec = f"+.{digits}f" if signed else f".{digits}f"
    text = format(value, spec)
    if ci is not None and None not in ci:
        text += f" [{format(ci[0], spec)}, {format(ci[1], spec)}]"
    return text


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
    """A JSON file, or its published ``.gz`` (``runlog.resolve``)."""
    return json.loads(runlog.read_text(path))


def speedups_by_arm(speed: Optional[dict], min_repeats: int = 5) -> dict[str, dict]:
    """Arm label -> ``{"value", "ci", "n", "basis"}``: tokens/s against strict from a speed
    benchmark JSON. With at least ``min_repeats`` repeats the median over repeats and its
    interval; with fewer, the per-prompt ratio (geometric mean) and its interval over prompts.
    Strict is 1. Old files (``budgets`` rows) give the median alone."""
    if not speed:
        return {}
    out: dict[str, dict] = {"strict": {"value": 1.0, "ci": None, "n": None, "basis": "reference"}}
    for row in speed.get("arms", []):
        if row.get("arm") in (None, "strict"):
            continue
        by_repeats = (row.get("repeats_n") or 0) >= min_repeats or row.get("prompt_speedup") is None
        value = row.get("speedup_median") if by_repeats else row.get("prompt_speedup")
        if value is not None:
            out[row["arm"]] = {"value": value, "ci": row.get("speedup_ci" if by_repeats else "prompt_speedup_ci"),
                               "n": row.get("repeats_n" if by_repeats else "prompts_n"),
                               "basis": "repeats" if by_repeats else "prompts"}
    for row in speed.get("budgets", []):  # version 1 files
        if row.get("speedup_median") is not None:
            b = float(row["budget"])
            out["strict" if b == 0 else f"b{b:g}"] = {"value": float(row["speedup_median"]), "ci": None,
                                                       "n": None, "basis": "repeats"}
    return out


def plot_frontier(audit: dict, out_png: Path, speed: Optional[dict] = None) -> Path:
    """Write ``frontier_figure(audit, speed)`` to ``out_png``."""
    import matplotlib.pyplot as plt

    fig = frontier_figure(audit, speed)
    out_png = Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png)
    plt.close(fig)
    return out_png


def frontier_figure(audit: dict, speed: Optional[dict] = None):
    """One point per arm: x = tokens/s against strict (from ``speed``, with its interval) or the
    mean accept length; y = accuracy change against strict in points, with its paired 95%
    interval (pooled over scored tasks; one faint marker per task); ``n`` in every label. With
    no scored task, y = the share of outputs identical to strict."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    speedups = speedups_by_arm(speed)
    arms = audit.get("by_arm", [])
    use_speed = bool(speedups) and all(r["arm"] in speedups for r in arms if r["arm"] != "strict-rerun")
    scored = any(r.get("acc_delta") is not None for r in arms)

    def x_of(label: str, accept: Optional[float]) -> tuple[Optional[float], Optional[list]]:
        if use_speed:
            s = speedups.get(label) or (speedups["strict"] if label == "strict-rerun" else {})
            return s.get("value"), s.get("ci")
        return accept, None

    fig, ax = plt.subplots(figsize=(7.0, 4.8), dpi=120)
    if scored:
        by_task: dict[str, list] = {}
        for r in audit.get("results", []):
            x, _ = x_of(r["arm"], r.get("accept_length"))
            if r.get("acc_delta") is not None and x is not None:
                by_task.setdefault(f"{r['task']} (n={r['scored_pairs']})", []).append((x, 100.0 * r["acc_delta"]))
        for task, pts in sorted(by_task.items()):
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=14, alpha=0.45, label=task)
    drawn = 0
    for r in arms:
        x, xci = x_of(r["arm"], r.get("accept_length"))
        if scored:
            y = None if r.get("acc_delta") is None else 100.0 * r["acc_delta"]
            yci = r.get("acc_delta_ci")
            yci = None if yci is None else [100.0 * yci[0], 100.0 * yci[1]]
            n = r.get("scored_pairs")
        else:
            y = None if r.get("divergence_share") is None else 1.0 - r["divergence_share"]
            yci, n = None, r.get("pairs")
        if x is None or y is None:
            continue
        xerr = None if not xci else [[max(0.0, x - xci[0])], [max(0.0, xci[1] - x)]]
        yerr = None if not yci else [[max(0.0, y - yci[0])], [max(0.0, yci[1] - y)]]
        label = f"{r['arm']} (n={n})"
        if r["arm"] == "strict-rerun":
            # The noise floor sits on strict's x (its speed is strict's): a label beside it would
            # cover strict's or leave the axes at the plot's edge, so it is named in the legend.
            ax.errorbar([x], [y], xerr=xerr, yerr=yerr, fmt="x", color="grey", ms=6, capsize=3, lw=1.2,
                        label=f"noise floor: {label}")
        else:
            ax.errorbar([x], [y], xerr=xerr, yerr=yerr, fmt="o", color="black", ms=6, capsize=3, lw=1.2)
            ax.annotate(label, (x, y), textcoords="offset points", xytext=(5, 5), fontsize=8)
        drawn += 1
    if not drawn:
        ax.text(0.5, 0.5, "no measured points", ha="center", va="center", transform=ax.transAxes)
    if scored:
        ax.axhline(0.0, color="grey", lw=0.8, ls="--")
    if use_speed:
        ax.axvline(1.0, color="grey", lw=0.8, ls="--")
        bases = {v["basis"] for k, v in speedups.items() if k != "strict"}
        basis = "over prompts" if bases == {"prompts"} else "over repeats" if bases == {"repeats"} else "mixed"
        ax.set_xlabel(f"tokens/s vs strict at fixed work (95% CI {basis})")
    else:
        ax.set_xlabel("mean accept length (tokens / verify round)")
    ax.set_ylabel("accuracy - strict accuracy, points (paired 95% CI)" if scored
                  else "share of outputs identical to strict")
    ax.set_title(audit.get("title") or "ASD speed / quality frontier")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return fig
