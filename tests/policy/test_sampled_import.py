"""The sampled rule imports and runs with torch, numpy and sglang unavailable."""

from __future__ import annotations

import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]

SCRIPT = r"""
import sys

BLOCKED = {"torch", "numpy", "sglang", "sgl_kernel", "triton"}

class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"blocked import: {name}")
        return None

sys.meta_path.insert(0, Blocker())

from sglang_asd.policy.sampled import KLLedger, SampledConfig
from sglang_asd.policy.sampled_walk import sample_block

ledger = KLLedger(budget=8.0)
d = sample_block([0, 1], [1, -1], [-1, -1], [[0.5, 0.5], [0.5, 0.5]], [0.9, 0.1], 0.3, 1, ledger, SampledConfig(power=0.0))
assert d.accepted == (1,) and d.relaxed and ledger.spent > 0, d
loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
assert not loaded, loaded
print("ok")
"""


def test_sampled_rule_imports_without_torch_or_sglang():
    result = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
