"""Budget 0 is strict greedy: token for token equal to stock SGLang, for every algorithm.

Stock SGLang here is ``sglang_asd.stock_server``: the same SGLang with the CPU kernel stand-in
and no ASD hooks. Each algorithm is also checked against non-speculative greedy decoding.
"""

import pytest

pytestmark = pytest.mark.server

PROMPTS = ["The quick brown fox", "def add(a, b):", "Once upon a time in a land far away", "1, 2, 3,"]
MAX_NEW = 24
ALGORITHMS = ["standalone", "standalone_fix", "eagle", "eagle_tree", "eagle3", "ngram"]


def _responses(server, **params):
    return [server.generate(p, max_new_tokens=MAX_NEW, **params) for p in PROMPTS]


def _outputs(server, **params):
    return [r["output_ids"] for r in _responses(server, **params)]


def _verify_rounds(responses):
    return [r["meta_info"]["spec_verify_ct"] for r in responses]


@pytest.fixture(scope="session")  # session: the algorithm-grouped order (tests/conftest.py) leaves this module
def plain_outputs(servers):
    return _outputs(servers.get("plain", stock=True))


@pytest.mark.stock_twin
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_budget_zero_equals_stock_sglang(servers, plain_outputs, algorithm):
    stock = _outputs(servers.get(algorithm, stock=True))
    asd = servers.get(algorithm)
    assert _outputs(asd) == stock, "no budget must be stock SGLang, token for token"
    assert _outputs(asd, asd_budget=0) == stock, "budget 0 must be stock SGLang, token for token"
    assert _outputs(asd, asd_budget=8, asd_gate=0) == stock, "gate 0 must be strict"
    assert _outputs(asd, asd_budget=8, asd_max_exceptions_per_block=0) == stock, "cap 0 must be strict"
    assert stock == plain_outputs, f"{algorithm}: speculative greedy must equal plain greedy"


@pytest.mark.stock_twin
@pytest.mark.parametrize("algorithm", ["standalone", "eagle", "eagle_tree"])
def test_budget_zero_runs_the_stock_draft_flow(servers, algorithm):
    """Not only the tokens: without opt-in flags the drafts are stock SGLang's (same verify rounds)."""
    stock = _responses(servers.get(algorithm, stock=True))
    asd = _responses(servers.get(algorithm), asd_budget=0)
    assert _verify_rounds(asd) == _verify_rounds(stock)
    assert [r["output_ids"] for r in asd] == [r["output_ids"] for r in stock]
