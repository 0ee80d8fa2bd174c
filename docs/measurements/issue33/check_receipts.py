"""Issue 33's chain checks what its servers did before its numbers are read: every sampled request of
an arm with a budget was served by the sampled rule within its budget, and strict by exact sampling.

``python docs/measurements/issue33/check_receipts.py --audit OUT/audit --speed OUT/speed``

- audit (every item's receipt is logged): an arm with ``asd_budget`` B > 0 must show
  ``applied: true``, ``rule: asd-sampled-1``, ``spent <= B`` and ``spent = sum of its events'
  charges`` (when the events were not truncated); strict (B = 0) ``applied: false, reason:
  strict``. A receipt saying ``reason: sampling`` means the server verified greedily
  (``SGLANG_ASD_CPU_SAMPLING`` was not on): the whole run is then greedy evidence, not sampled;
- speed (a pass logs its receipts' summary): a budget arm's requests were all applied
  (``applied_share`` 1, no reasons) and its mean spent is within its budget.

Prints one line per arm (requests, applied, mean and largest spent, relaxed nodes per request) and
exits 1 naming every violation.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sglang_asd.bench import runlog

RULE = "asd-sampled-1"


def _records(path: Path, kind: str) -> list[dict]:
    if not runlog.exists(path):   # the live log, or the published .gz
        return []
    return [r for r in map(json.loads, runlog.read_text(path).splitlines()[1:]) if r.get("kind") == kind]


def check_audit(folder: Path) -> tuple[list[str], list[str]]:
    lines, bad = [], []
    by_arm: dict[str, list[dict]] = {}
    for r in _records(folder / "audit_items.jsonl", "item"):
        if r.get("ok"):
            by_arm.setdefault(r["arm"], []).append(r)
    for arm, items in by_arm.items():
        budget = float(items[0]["fields"].get("asd_budget", 0))
        receipts = [i.get("receipt") or {} for i in items]
        for i, rec in zip(items, receipts):
            where = f"audit {arm} {i['task']} {i['tag']} seed {i.get('seed')}"
            if budget == 0:
                if rec.get("applied") or rec.get("reason") != "strict":
                    bad.append(f"{where}: strict receipt {rec.get('applied')}/{rec.get('reason')}")
                continue
            if not rec.get("applied") or rec.get("rule") != RULE:
                bad.append(f"{where}: applied {rec.get('applied')}, rule {rec.get('rule')}, reason {rec.get('reason')}")
            elif rec["spent"] > budget + 1e-6:
                bad.append(f"{where}: spent {rec['spent']} > budget {budget}")
            elif not rec.get("events_truncated") and abs(sum(e["charge"] for e in rec["events"]) - rec["spent"]) > 1e-4:
                bad.append(f"{where}: events charge {sum(e['charge'] for e in rec['events'])} != spent {rec['spent']}")
        spent = [rec.get("spent") or 0.0 for rec in receipts]
        relaxed = [rec.get("relaxed") or 0 for rec in receipts]
        lines.append(f"audit {arm}: {len(items)} answers, applied {sum(bool(r.get('applied')) for r in receipts)}, "
                     f"spent mean {sum(spent) / len(spent):.3f} max {max(spent):.3f} (budget {budget:g}), "
                     f"relaxed nodes/answer {sum(relaxed) / len(relaxed):.2f}")
    return lines, bad


def check_speed(folder: Path) -> tuple[list[str], list[str]]:
    lines, bad = [], []
    by_arm: dict[str, list[dict]] = {}
    for p in _records(folder / "speed_passes.jsonl", "pass"):
        by_arm.setdefault(p["arm"], []).append(p)
    for arm, passes in by_arm.items():
        budget = passes[0]["fields"].get("asd_budget")
        if not budget:
            continue
        for p in passes:
            where = f"speed {arm} repeat {p['repeat']} pass {p['index']}"
            if p.get("applied_share") != 1.0 or p.get("not_applied_reasons"):
                bad.append(f"{where}: applied {p.get('applied_share')}, reasons {p.get('not_applied_reasons')}")
            if (p.get("spent_mean") or 0.0) > budget + 1e-6:
                bad.append(f"{where}: mean spent {p['spent_mean']} > budget {budget}")
        spent = [p["spent_mean"] for p in passes if p.get("spent_mean") is not None]
        lines.append(f"speed {arm}: {len(passes)} passes, spent/request mean {sum(spent) / max(1, len(spent)):.3f} "
                     f"(budget {budget:g}), relaxed nodes/request "
                     f"{sum(p.get('exceptions_mean') or 0 for p in passes) / len(passes):.2f}")
    return lines, bad


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--audit", type=Path, help="an audit's --out folder")
    p.add_argument("--speed", type=Path, help="a speed run's --out folder")
    args = p.parse_args(argv)
    lines, bad = [], []
    for folder, check in ((args.audit, check_audit), (args.speed, check_speed)):
        if folder is not None:
            more, worse = check(folder)
            lines += more
            bad += worse
    print("\n".join(lines))
    for b in bad[:20]:
        print(f"VIOLATION {b}", file=sys.stderr)
    if bad:
        print(f"{len(bad)} violation(s)", file=sys.stderr)
    return 1 if bad or not lines else 0


if __name__ == "__main__":
    sys.exit(main())
