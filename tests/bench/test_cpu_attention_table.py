"""docs/measurements/cpu_attention/table.py: each (load, arm)'s runs in run order, the median per
kernel and their ratio, from speed summaries laid out as run.sh leaves them."""

import json
import subprocess
import sys
from pathlib import Path

TABLE = Path(__file__).resolve().parents[2] / "docs" / "measurements" / "cpu_attention" / "table.py"


def _summary(out: Path, name: str, arms: dict, disturbed: bool = False) -> None:
    (out / name).mkdir(parents=True)
    (out / name / "speed.json").write_text(json.dumps({
        "complete": True, "passes": [{"disturbed": disturbed}],
        "arms": [{"arm": arm, "tok_s_median": tok_s} for arm, tok_s in arms.items()],
    }))


def test_medians_per_kernel_and_their_ratio(tmp_path):
    _summary(tmp_path, "c1_1_fused", {"strict": 5.0, "b8": 6.0})
    _summary(tmp_path, "c1_2_reference", {"strict": 4.0, "b8": 6.0})
    _summary(tmp_path, "c1_3_fused", {"strict": 7.0, "b8": 6.6})
    _summary(tmp_path, "c1_4_reference", {"strict": 6.0, "b8": 5.4}, disturbed=True)
    _summary(tmp_path, "c24L_1_fused", {"strict": 55.0})
    _summary(tmp_path, "c24L_2_reference", {"strict": 50.0})
    r = subprocess.run([sys.executable, str(TABLE), str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rows = [line for line in r.stdout.splitlines() if line.startswith("| 4 x") or line.startswith("| 24 x")]
    assert rows == [
        "| 4 x 64 tokens, 1 at a time | b8 | 6.00 (f), 6.00 (r), 6.60 (f), 5.40 (r, disturbed) | 6.30 | 5.70 | 1.105 |",
        "| 4 x 64 tokens, 1 at a time | strict | 5.00 (f), 4.00 (r), 7.00 (f), 6.00 (r, disturbed) | 6.00 | 5.00 | 1.200 |",
        "| 24 x 256 tokens, 24 at once | strict | 55.00 (f), 50.00 (r) | 55.00 | 50.00 | 1.100 |",
    ]
