"""A bf16 server on CPU (the launcher's default dtype): linear layers and LM head with float32 accumulation
(``cpu_backend/seams/cpu_paths.py``) in stock SGLang and in ASD alike, so budget 0 is still stock SGLang
token for token, and budgets spend within their receipts. The rest of the suite serves float32
(near-ties in bf16 depend on batch shapes; these checks use one request at a time).

These servers start their children with SGLang's spawn (``CONFIG_ENV`` in tests/conftest.py), every
other test server by fork (``cpu_backend/seams/start_method.py``): spawned children bootstrap themselves
(the stand-in, the CPU-path hooks, in the ASD server the scheduler hooks) as on a GPU install."""

import pytest

from tests.server_utils import check_receipt

pytestmark = [pytest.mark.server, pytest.mark.server_group("bf16")]

PROMPTS = ["The quick brown fox", "def add(a, b):", "Once upon a time in a land far away"]
ANNOUNCED = ("sglang_asd: bfloat16 linear layers run with float32 accumulation",
             "sglang_asd: the bfloat16 LM head runs with float32 accumulation")
FORKED = "sglang_asd: the scheduler and detokenizer processes start by fork"


def test_bf16_budget_zero_is_stock_with_float32_accumulation(servers):
    stock, asd = servers.get("eagle_bf16", stock=True), servers.get("eagle_bf16")
    for server in (stock, asd):
        log = server.log_path.read_text(errors="replace")
        assert all(line in log for line in ANNOUNCED), f"{server.name}: layers or LM head not in float32 accumulation"
        assert FORKED not in log, f"{server.name}: SGLANG_ASD_CPU_START_METHOD=spawn must keep SGLang's spawn"
    spent = 0.0
    for prompt in PROMPTS:
        reference = stock.generate(prompt, max_new_tokens=24, ignore_eos=True)["output_ids"]
        assert asd.generate(prompt, max_new_tokens=24, ignore_eos=True)["output_ids"] == reference, prompt
        assert asd.generate(prompt, max_new_tokens=24, ignore_eos=True, asd_budget=0)["output_ids"] == reference
        spent += check_receipt(asd.generate(prompt, max_new_tokens=24, ignore_eos=True, asd_budget=8), 8.0)["spent"]
    assert spent > 0, "the noisy EAGLE head must trigger exceptions in bf16 too"
