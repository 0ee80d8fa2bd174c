"""Test and benchmark aids for the verifier: draft trees, seeded verify rounds, strict oracles.

    from sglang_asd.testing import make_round, strict_verify, verify_tree_greedy_port

Never imported by the runtime (``tests/verify/test_testing_kit.py`` checks it); it lives in the
distribution, as ``torch.testing`` does, so tests, ``scripts/`` and device checks import it
with no path edits.

- ``trees``: parent arrays (chains, EAGLE topk drafts as SGLang organizes them, arbitrary
  trees) and the one conversion to SGLang's linked lists (``sglang_links``).
- ``rounds``: ``make_round``, one seeded batched verify round with planted argmaxes.
- ``strict``: SGLang's strict greedy verify twice: ``verify_tree_greedy_port`` (a line-by-line
  port of the kernel, the oracle) and ``strict_verify`` (vectorized torch, the benchmarks'
  strict arm).
"""

from sglang_asd.testing.rounds import VerifyRound, make_round
from sglang_asd.testing.strict import sglang_strict_result, strict_verify, verify_tree_greedy_port
from sglang_asd.testing.trees import chain_parents, eagle_draft, eagle_parents, random_tree, sglang_links

__all__ = [
    "VerifyRound",
    "chain_parents",
    "eagle_draft",
    "eagle_parents",
    "make_round",
    "random_tree",
    "sglang_links",
    "sglang_strict_result",
    "strict_verify",
    "verify_tree_greedy_port",
]
