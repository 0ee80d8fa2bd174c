"""The pure rules (greedy and sampled) import and run with torch, numpy and sglang unavailable."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]

BLOCKER = r"""
import sys

BLOCKED = {"torch", "numpy", "sglang", "sgl_kernel", "triton"}

class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"blocked import: {name}")
        return None

sys.meta_path.insert(0, Blocker())
"""

CHECK = r"""
loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
assert not loaded, loaded
print("ok")
"""

RULES = {
    "greedy": r"""
from sglang_asd.policy import ASDConfig, Ledger, select_chain, select_tree

ledger = Ledger(budget=8.0)
chain = select_chain([1, 2], [1, 3, 4], [0.0, 0.25], ledger, ASDConfig())
tree = select_tree([0, 1, 2], [-1, 0, 1], [1, 3, 4], [0.0, 0.0, 0.25], 2, ledger, ASDConfig())
assert chain.accepted == (1, 2) and tree.path == (1, 2), (chain, tree)
""",
    "sampled": r"""
from sglang_asd.policy.sampled import KLLedger, SampledConfig
from sglang_asd.policy.sampled_walk import sample_block

ledger = KLLedger(budget=8.0)
d = sample_block([0, 1], [1, -1], [-1, -1], [[0.5, 0.5], [0.5, 0.5]], [0.9, 0.1], 0.3, 1, ledger, SampledConfig(power=0.0))
assert d.accepted == (1,) and d.relaxed and ledger.spent > 0, d
""",
}


@pytest.mark.parametrize("rule", sorted(RULES))
def test_rule_imports_without_torch_or_sglang(rule):
    script = BLOCKER + RULES[rule] + CHECK
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
