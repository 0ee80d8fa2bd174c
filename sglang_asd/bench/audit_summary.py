"""The audit's statistics: every arm paired with strict on the same items.

Items are the same under every arm, so each comparison is paired: an arm's answer to an item
with a seed (``sampling``: several seeded samples per item when sampled; seed 0 when greedy) against
strict's answer to the same item with the same seed. Per task and arm (and pooled over the scored
tasks):

- ``acc_delta``: accuracy(arm) - accuracy(strict) over the (item, seed) pairs scored under both,
  with a paired-bootstrap 95% interval (``acc_delta_ci``; with several seeds per item the items are
  resampled, each with all its pairs, since two samples of one item are not independent), the
  discordant pairs (``lost``: right under strict, wrong under the arm; ``gained``: the reverse) and
  the exact McNemar p-value on them (which takes the pairs as independent: with several seeds per
  item it is optimistic, and the interval is the one to read);
- ``len_delta``: mean completion tokens (arm - strict) with its paired-bootstrap interval;
- ``divergence_share``: items whose output text differs from the strict output of the item;
  ``similarity_mean``: mean difflib ratio to it (MT-Bench has no judge offline: read these);
- acceptance and receipts: accept length (pooled tokens / verify rounds), verify rounds,
  regret spent and exceptions per request, the share of requests ASD was applied to.

``strict-rerun`` (``--noise-floor``) is strict run a second time: its row is the floor that any
divergence or accuracy change should be read against.
"""

from __future__ import annotations

import difflib
from typing import Optional

from sglang_asd.bench import stats
from sglang_asd.bench.arms import STRICT, Arm, describe
from sglang_asd.bench.metrics import first_errors, result_metrics
from sglang_asd.bench.sampling import seed_of

METRIC_KEYS = ("completion_tokens_mean", "accept_length", "verify_ct_mean", "spent_mean", "exceptions_mean",
               "applied_share", "not_applied_reasons")


def similarity(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def latest(records: list[dict]) -> dict[tuple[str, str, str, int], dict]:
    """The last logged record per (arm, task, item, seed): a retried item replaces its failed try."""
    out: dict[tuple[str, str, str, int], dict] = {}
    for r in records:
        out[(r["arm"], r["task"], r["tag"], seed_of(r))] = r
    return out


def pairs(strict: dict[tuple[str, int], dict], records: list[dict]) -> list[tuple[dict, dict]]:
    """``(strict record, arm record)`` of every (item, seed) answered (ok) under both; ``strict`` by
    (item, seed)."""
    out = []
    for r in records:
        s = strict.get((r["tag"], seed_of(r)))
        if r["ok"] and s is not None and s["ok"]:
            out.append((s, r))
    return out


def paired_stats(ps: list[tuple[dict, dict]], seed: int = 0) -> dict:
    """Accuracy and length deltas, intervals and McNemar over aligned pairs; the intervals resample
    items (task, tag), each with all its seeds' pairs (``stats.clustered_diff_ci``)."""
    item = lambda s: (s.get("task"), s["tag"])  # noqa: E731
    scored = [(s["correct"], r["correct"], item(s)) for s, r in ps
              if s["correct"] is not None and r["correct"] is not None]
    ref, cand = [float(a) for a, _, _ in scored], [float(b) for _, b, _ in scored]
    lost, gained = stats.discordant([a for a, _, _ in scored], [b for _, b, _ in scored])
    lens = [(s["completion_tokens"], r["completion_tokens"], item(s)) for s, r in ps
            if s.get("completion_tokens") is not None and r.get("completion_tokens") is not None]
    differs = sum(1 for s, r in ps if s["hash"] != r["hash"])
    return {
        "pairs": len(ps), "scored_pairs": len(scored),
        "acc_delta": stats.mean_diff(ref, cand) if scored else None,
        "acc_delta_ci": stats.clustered_diff_ci(ref, cand, [k for *_, k in scored], seed=seed) if scored else None,
        "lost": lost if scored else None, "gained": gained if scored else None,
        "mcnemar_p": stats.mcnemar_exact(lost, gained) if scored else None,
        "len_delta": stats.mean_diff([a for a, _, _ in lens], [b for _, b, _ in lens]) if lens else None,
        "len_delta_ci": stats.clustered_diff_ci([a for a, _, _ in lens], [b for _, b, _ in lens], [k for *_, k in lens],
                                                seed=seed) if lens else None,
        "divergence_share": differs / len(ps) if ps else None,
        "similarity_mean": stats.mean(similarity(s["text"], r["text"]) for s, r in ps) if ps else None,
    }


def task_row(task: str, arm: Arm, records: list[dict], strict: dict[str, dict], planned: int, seed: int = 0) -> dict:
    ok = [r for r in records if r["ok"]]
    scored = [r["correct"] for r in ok if r["correct"] is not None]
    m = result_metrics(records)
    row = {"task": task, "arm": arm.label, "budget": arm.budget, "fields": describe(arm), "n": len(ok),
           "planned": planned, "accuracy": sum(scored) / len(scored) if scored else None, "scored": len(scored),
           "correct": sum(scored), **{k: m[k] for k in METRIC_KEYS}, "errors": m["errors"],
           "first_errors": first_errors(records)}
    row.update(paired_stats(pairs(strict, records), seed))
    return row


def summarize(records: list[dict], arms: list[Arm], tasks: list[str], planned: dict[str, int],
              seed: int = 0) -> tuple[list[dict], list[dict]]:
    """``(per task and arm rows, per arm rows pooled over tasks)`` from the logged items."""
    last = latest(records)
    rows, pooled = [], []
    for arm in arms:
        arm_pairs: list[tuple[dict, dict]] = []
        arm_records: list[dict] = []
        for task in tasks:
            strict = {(tag, s): r for (a, t, tag, s), r in last.items() if a == STRICT and t == task}
            recs = [r for (a, t, _, _), r in last.items() if a == arm.label and t == task]
            if not recs:
                continue
            rows.append(task_row(task, arm, recs, strict, planned[task], seed))
            arm_pairs += pairs(strict, recs)
            arm_records += recs
        if not arm_records:
            continue
        ok = [r for r in arm_records if r["ok"]]
        scored = [r["correct"] for r in ok if r["correct"] is not None]
        m = result_metrics(arm_records)
        row = {"arm": arm.label, "budget": arm.budget, "fields": describe(arm), "n": len(ok),
               "planned": sum(planned[t] for t in tasks), "scored": len(scored),
               "accuracy": sum(scored) / len(scored) if scored else None, "correct": sum(scored),
               **{k: m[k] for k in METRIC_KEYS}, "errors": m["errors"]}
        row.update(paired_stats(arm_pairs, seed))
        pooled.append(row)
    rows.sort(key=lambda r: tasks.index(r["task"]))  # task by task, arms in order (a stable sort)
    return rows, pooled


def warnings_for(rows: list[dict]) -> list[str]:
    out = []
    errors = sum(r["errors"] for r in rows)
    if errors:
        out.append(f"{errors} request(s) failed, e.g. {next((e for r in rows for e in r['first_errors']), '?')}")
    if rows and all(r["verify_ct_mean"] is None for r in rows):
        out.append("no spec_verify_ct in responses: the server is not running speculative decoding")
    for r in rows:
        if not r.get("budget"):
            continue
        if r["applied_share"] is None:
            out.append(f"{r['task']} {r['arm']}: no ASD receipts (is this an sglang-asd server?)")
        elif r["applied_share"] < 1.0:
            out.append(f"{r['task']} {r['arm']}: ASD applied to {r['applied_share']:.0%} of requests "
                       f"(reasons: {', '.join(sorted(r['not_applied_reasons']))})")
    return out


def complete_line(rows: list[dict], planned_total: int) -> str:
    """``complete: 560 of 846 items`` (answered items over planned items, every arm)."""
    done = sum(r["n"] for r in rows)
    return f"{'complete' if done >= planned_total else 'PARTIAL'}: {done} of {planned_total} items"


def p_value_text(p: Optional[float]) -> Optional[str]:
    if p is None:
        return None
    return f"{p:.3f}" if p >= 0.001 else "<0.001"
