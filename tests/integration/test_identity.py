"""Budget 0 is strict greedy: token for token equal to stock SGLang, for every algorithm.

Stock SGLang here is ``sglang_asd.stock_server``: the same SGLang with the CPU kernel stand-in
and no ASD hooks. Each algorithm is also checked against non-speculative greedy decoding.
"""

import pytest

pytestmark = pytest.mark.server

PROMPTS = ["The quick brown fox", "def add(a, b):", "Once upon a time in a land far away", "1, 2, 3,"]
MAX_NEW = 24
ALGORITHMS = ["standalone", "eagle", "eagle_tree", "eagle3", "ngram"]


def _outputs(server, **params):
    return [server.generate(p, max_new_tokens=MAX_NEW, **params)["output_ids"] for p in PROMPTS]


@pytest.fixture(scope="module")
def plain_outputs(servers):
    return _outputs(servers.get("plain", stock=True))


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_budget_zero_equals_stock_sglang(servers, plain_outputs, algorithm):
    stock = _outputs(servers.get(algorithm, stock=True))
    asd = servers.get(algorithm)
    assert _outputs(asd) == stock, "no budget must be stock SGLang, token for token"
    assert _outputs(asd, asd_budget=0) == stock, "budget 0 must be stock SGLang, token for token"
    assert _outputs(asd, asd_budget=8, asd_gate=0) == stock, "gate 0 must be strict"
    assert _outputs(asd, asd_budget=8, asd_max_exceptions_per_block=0) == stock, "cap 0 must be strict"
    assert stock == plain_outputs, f"{algorithm}: speculative greedy must equal plain greedy"
