"""The table of ``run.sh``: tok/s of every (load, arm) under each attention kernel, and fused / reference.

``python docs/measurements/cpu_attention/table.py OUT`` reads ``OUT/<load>_<run>_<kernel>/speed.json``
(the speed tool's summaries) and prints, per load and arm, each run's tok/s in run order, the median
per kernel and the ratio of the medians. A run with a disturbed or incomplete pass is flagged.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

LOADS = {"c1": "4 x 64 tokens, 1 at a time", "c24": "24 x 64 tokens, 24 at once",
         "c24L": "24 x 256 tokens, 24 at once"}
KERNELS = ("fused", "reference")


def runs(out: Path) -> dict[tuple[str, str], list[tuple[int, str, float, bool]]]:
    """(load, arm) -> [(run, kernel, tok/s, clean)] in run order."""
    table: dict[tuple[str, str], list] = {}
    for path in sorted(out.glob("*_*_*/speed.json")):
        load, run, kernel = path.parent.name.rsplit("_", 2)
        summary = json.loads(path.read_text())
        clean = bool(summary.get("complete")) and not any(p.get("disturbed") for p in summary.get("passes", []))
        for arm in summary["arms"]:
            table.setdefault((load, arm["arm"]), []).append((int(run), kernel, arm["tok_s_median"], clean))
    return {key: sorted(rows) for key, rows in table.items()}


def main(out: Path) -> str:
    lines = ["| load | arm | tok/s by run (kernel) | fused, median | reference, median | fused / reference |",
             "| --- | --- | --- | ---: | ---: | ---: |"]
    for (load, arm), rows in sorted(runs(out).items(), key=lambda kv: (list(LOADS).index(kv[0][0]), kv[0][1])):
        cells = ", ".join(f"{tok_s:.2f} ({kernel[0]}{'' if clean else ', disturbed'})" for _, kernel, tok_s, clean in rows)
        med = {k: statistics.median([t for _, kernel, t, _ in rows if kernel == k]) for k in KERNELS}
        lines.append(f"| {LOADS[load]} | {arm} | {cells} | {med['fused']:.2f} | {med['reference']:.2f} | "
                     f"{med['fused'] / med['reference']:.3f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(main(Path(sys.argv[1])))
