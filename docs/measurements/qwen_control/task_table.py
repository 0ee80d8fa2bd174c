"""Every arm of a calibrate run against strict, task by task, paired by item.

``python docs/measurements/qwen_control/task_table.py DIR [--arms b0.5,b1,...] [--reference strict]``: DIR
holds ``calibrate_log.jsonl`` (or its published ``.gz``). Per task and arm, over the items every listed
arm answered: accuracy and its paired change against the reference with Tango's interval (items lost /
gained), spend per request (mean and worst, nats), exceptions per request, tokens per verify round
(completion tokens over verify rounds, summed over the items) and mean length. The run's own report
(``calibrate.md``) pools the tasks and adds speed at fixed work and the verdicts.
"""

from __future__ import annotations

import argparse
import collections
import statistics
from pathlib import Path

from sglang_asd.bench import runlog
from sglang_asd.bench.calibrate import LOG_KIND, LOG_NAME
from sglang_asd.bench.stats import discordant, paired_proportion_diff_ci


def by_task(folder: Path) -> dict[str, dict[str, dict[str, dict]]]:
    """task -> arm -> tag -> the last item record answered without error."""
    _, records = runlog.read_log(folder / LOG_NAME, LOG_KIND)
    out: dict = collections.defaultdict(lambda: collections.defaultdict(dict))
    for r in records:
        if r.get("kind") == "item" and r.get("ok"):
            out[r["task"]][r["arm"]][r["tag"]] = r
    return out


def paired_change(ref: list[bool], right: list[bool]) -> tuple[str, int, int]:
    """The accuracy change of ``right`` against ``ref`` (the same items, in order) in points with Tango's
    interval, ``"+13.0 [+3.4, +23.0]"``, and the items lost and gained."""
    lost, gained = discordant(ref, right)
    lo, hi = paired_proportion_diff_ci(lost, gained, len(ref))
    return f"{100 * (sum(right) - sum(ref)) / len(ref):+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]", lost, gained


def arg_parser(doc: str) -> argparse.ArgumentParser:
    """The parser every table of this folder starts from: its docstring as help, one run folder."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", type=Path, help="a calibrate run: calibrate_log.jsonl or its published .gz")
    return p


def rows(task: str, arms: dict[str, dict[str, dict]], order: list[str], reference: str) -> list[str]:
    names = [a for a in order if a in arms]
    tags = sorted(set.intersection(*(set(arms[a]) for a in names)))
    ref = [bool(arms[reference][t].get("correct")) for t in tags]
    out = []
    for arm in names:
        recs = [arms[arm][t] for t in tags]
        right = [bool(r.get("correct")) for r in recs]
        change, lost, gained = paired_change(ref, right)
        delta = "reference" if arm == reference else f"{change} ({lost}/{gained})"
        spent = [(r.get("receipt") or {}).get("spent", 0.0) for r in recs]
        exceptions = statistics.mean((r.get("receipt") or {}).get("exceptions", 0) for r in recs)
        tokens = sum(r["completion_tokens"] for r in recs)
        rounds = sum(r.get("spec_verify_ct") or 0 for r in recs)
        per_round = f"{tokens / rounds:.2f}" if rounds else "n/a"
        out.append(f"| {task} | {arm} | {len(tags)} | {sum(right) / len(tags):.3f} | {delta} | "
                   f"{statistics.mean(spent):.2f}, {max(spent):.2f} | {exceptions:.2f} | {per_round} | "
                   f"{tokens / len(tags):.0f} |")
    return out


def main() -> None:
    p = arg_parser(__doc__)
    p.add_argument("--arms", help="arms in table order (default: strict, then the log's in their order)")
    p.add_argument("--reference", default="strict", help="the arm every other is paired with (default strict)")
    a = p.parse_args()
    tasks = by_task(a.folder)
    order = a.arms.split(",") if a.arms else \
        [a.reference] + sorted({arm for t in tasks.values() for arm in t} - {a.reference})
    lines = ["| task | arm | n | accuracy | Δ accuracy vs " + a.reference + ", pp [95% CI] (lost/gained) | "
             "spent/req mean, worst (nats) | exceptions/req | tokens / verify round | tokens/answer |",
             "| --- | --- | ---: | ---: | --- | --- | ---: | ---: | ---: |"]
    for task in sorted(tasks):
        lines += rows(task, tasks[task], order, a.reference)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
