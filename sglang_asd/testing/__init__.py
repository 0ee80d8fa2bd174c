"""Test and benchmark aids for the verifier: draft trees, seeded verify rounds, strict oracles.

    from sglang_asd.testing import make_round, strict_verify, verify_tree_greedy_port

Never imported by the serving runtime (``tests/verify/test_testing_kit.py`` checks it; the
benchmark tools in ``sglang_asd.bench`` use its launcher); it lives in the distribution, as
``torch.testing`` does, so tests, ``scripts/`` and device checks import it with no path edits.

- ``trees``: parent arrays (chains, EAGLE topk drafts as SGLang organizes them, arbitrary
  trees) and the one conversion to SGLang's linked lists (``sglang_links``).
- ``rounds``: ``make_round``, one seeded batched verify round with planted argmaxes.
- ``strict``: SGLang's strict greedy verify twice: ``verify_tree_greedy_port`` (a line-by-line
  port of the kernel, the oracle) and ``strict_verify`` (vectorized torch, the benchmarks'
  strict arm).
- ``server``: ``LaunchedServer``, a server started as a child process, waited for and stopped
  (the benchmark tools' ``--launch``, the tests' server pool, the GPU kit). It needs no torch,
  so the names above load on first use: ``import sglang_asd.testing.server`` imports no torch.
"""

import importlib

_HOME = {"VerifyRound": "rounds", "make_round": "rounds", "sglang_strict_result": "strict",
         "strict_verify": "strict", "verify_tree_greedy_port": "strict", "chain_parents": "trees",
         "eagle_draft": "trees", "eagle_parents": "trees", "random_tree": "trees", "sglang_links": "trees"}

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


def __getattr__(name: str):
    """``from sglang_asd.testing import make_round``: the torch kit's names, imported when first used."""
    if name not in _HOME:
        raise AttributeError(f"module 'sglang_asd.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(f"sglang_asd.testing.{_HOME[name]}"), name)
