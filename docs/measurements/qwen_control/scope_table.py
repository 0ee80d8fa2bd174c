"""Scoped arms against the same budget unscoped, paired by item, from a calibrate run log.

``python docs/measurements/qwen_control/scope_table.py DIR [--reference b8] [--arms ans8,p16]``: DIR holds
``calibrate_log.jsonl`` (or its published ``.gz``). Over the items every arm answered, per scoped arm
against the reference arm: accuracy and its paired change with Tango's interval (items lost / gained),
mean spend, exceptions and positions the scope kept strict per request (receipt ``scope.skipped``), the
share of answers holding the span's open marker, how often the text equals the reference's, the answers
written as a Python program (with their accuracy) and those whose first exception is at output
position 1 or 2 (the answer's format is chosen there). Speed
at fixed work is in the run's own report (``calibrate.md``: each arm against strict).
"""

from __future__ import annotations

import collections
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from task_table import arg_parser, by_task, paired_change  # noqa: E402  (shared with the per-task table)


def items(folder: Path) -> dict[str, dict[str, dict]]:
    """arm -> tag -> the item record, for the items answered without error (every task of the run)."""
    by_arm: dict[str, dict[str, dict]] = collections.defaultdict(dict)
    for arms in by_task(folder).values():
        for arm, recs in arms.items():
            by_arm[arm].update(recs)
    return by_arm


def table(by_arm: dict, reference: str, arms: list[str], marker: str) -> list[str]:
    tags = sorted(set.intersection(*(set(by_arm[a]) for a in [reference, "strict", *arms])))
    rows = ["| arm | n | accuracy | Δ accuracy vs " + reference + ", pp [95% CI] | lost/gained | spent/req (nats) | "
            "exceptions/req | kept strict by the scope/req | answers with `" + marker + "` | text = " + reference + " | "
            "Python answers (their accuracy) | first event at output position <= 2 |",
            "| --- | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    ref = [bool(by_arm[reference][t].get("correct")) for t in tags]
    for arm in ["strict", reference, *arms]:
        recs = [by_arm[arm][t] for t in tags]
        right = [bool(r.get("correct")) for r in recs]
        change, lost, gained = paired_change(ref, right)
        delta = "reference" if arm == reference else change
        receipt = [r.get("receipt") or {} for r in recs]
        code = [r for r in recs if "```python" in r["text"]]  # answers written as a program
        mean = lambda f: statistics.mean(f(x) for x in receipt)  # noqa: E731
        rows.append(
            f"| {arm} | {len(tags)} | {sum(right) / len(tags):.3f} | {delta} | "
            f"{'' if arm == reference else f'{lost}/{gained}'} | {mean(lambda x: x.get('spent', 0.0)):.2f} | "
            f"{mean(lambda x: x.get('exceptions', 0)):.2f} | {mean(lambda x: (x.get('scope') or {}).get('skipped', 0)):.2f} | "
            f"{sum(marker in r['text'] for r in recs) / len(tags):.2f} | "
            f"{sum(r['text'] == by_arm[reference][t]['text'] for r, t in zip(recs, tags)) / len(tags):.2f} | "
            f"{len(code)} ({sum(bool(r.get('correct')) for r in code) / max(len(code), 1):.2f}) | "
            f"{sum(1 for r in recs if r.get('first_event_pos') is not None and r['first_event_pos'] <= 2)} |")
    return rows


def main() -> None:
    p = arg_parser(__doc__)
    p.add_argument("--reference", default="b8", help="the unscoped arm at the same budget (default b8)")
    p.add_argument("--arms", default="ans8,p16", help="the scoped arms (default ans8,p16)")
    p.add_argument("--marker", default="boxed", help="the answer span's open marker, as text (default boxed)")
    a = p.parse_args()
    print("\n".join(table(items(a.folder), a.reference, a.arms.split(","), a.marker)))


if __name__ == "__main__":
    main()
