"""Streaming sessions (``--enable-streaming-session``): the ledger belongs to the request, not the slot.

SGLang lends a finished turn's request-pool slot to the session's next turn without freeing it
(``srt/session/streaming_session.py``). Each turn is a new request with its own budget: a
budget-0 turn after a budget-64 turn must be strict greedy (no exceptions, the stock output),
and a later budget turn starts from its own budget.
"""

import pytest
import requests

from tests.server_utils import PAGED_STREAMING, check_receipt

pytestmark = pytest.mark.server

TURNS = ["The quick brown fox", " jumps over the lazy dog", " and then", " once more"]
BUDGETS = [64.0, 0.0, 64.0, 0.0]


def _session_turns(server, budgets):
    session = requests.post(server.url + "/open_session", json={"capacity_of_str_len": 4000, "streaming": True},
                            timeout=60)
    assert session.status_code == 200, session.text
    session_id, rid, outs = session.json(), None, []
    for text, budget in zip(TURNS, budgets):
        params = {"temperature": 0, "max_new_tokens": 16, "ignore_eos": True}
        if budget is not None:
            params["asd_budget"] = budget
        r = requests.post(server.url + "/generate", timeout=300,
                          json={"text": text, "session_params": {"id": session_id, "rid": rid}, "sampling_params": params})
        assert r.status_code == 200, r.text
        outs.append(r.json())
        rid = outs[-1]["meta_info"]["id"]
    requests.post(server.url + "/close_session", json={"session_id": session_id}, timeout=60)
    return outs


@pytest.mark.server_group("paged_streaming")
def test_each_turn_has_its_own_ledger(servers):
    extra = PAGED_STREAMING
    stock = _session_turns(servers.get("eagle", stock=True, extra=extra), [None] * len(TURNS))
    ours = _session_turns(servers.get("eagle", extra=extra), BUDGETS)
    first = ours[0]["meta_info"]
    assert ours[1]["meta_info"]["cached_tokens"] >= first["prompt_tokens"] + first["completion_tokens"] - 1, \
        "turn 2 must inherit turn 1's KV, i.e. run on its slot (the case under test)"
    assert ours[0]["meta_info"]["asd"]["exceptions"] > 0, "a noisy EAGLE head must trigger exceptions at budget 64"
    for i in (1, 3):
        receipt = ours[i]["meta_info"]["asd"]
        assert receipt["applied"] is False and receipt["reason"] == "strict" and receipt["exceptions"] == 0
    check_receipt(ours[2], 64.0)
    # A strict turn continues a (different) prefix; compare it with stock on the same session prefix.
    strict_only = _session_turns(servers.get("eagle", extra=extra), [0.0] * len(TURNS))
    assert [o["output_ids"] for o in strict_only] == [o["output_ids"] for o in stock]
