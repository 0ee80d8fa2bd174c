"""``ASDRoundOutput.consume``: what one verify round posts to each request's host ledger."""

from types import SimpleNamespace

import pytest
import torch

from sglang_asd.policy import ASDConfig
from sglang_asd.sglang_seams.state.request_ledger import RequestASD, RequestLedger
from sglang_asd.server_settings import ASDServerSettings
from sglang_asd.sglang_seams.state import runtime
from sglang_asd.sglang_seams.state.round_output import ASDRoundOutput


@pytest.fixture(autouse=True)
def _runtime(monkeypatch):
    monkeypatch.setattr(runtime, "_RUNTIME", None)
    runtime.set_runtime(ASDServerSettings())


def _round():
    # Row 0: exact, exception (0.5 nats), exact, exact -> suffix tokens at draft positions 2 and 3.
    # Row 1: exception at position 2 only, nothing after it. Row 2: strict row (not active).
    return ASDRoundOutput(
        active=torch.tensor([True, True, False]),
        exception_mask=torch.tensor([[False, True, False, False], [False, False, True, False], [False] * 4]),
        suffix_mask=torch.tensor([[False, False, True, True], [False] * 4, [False] * 4]),
        exception_regret=torch.tensor([[0.0, 0.5, 0.0, 0.0], [0.0, 0.0, 0.25, 0.0], [0.0] * 4]),
        draft_token=torch.tensor([[10, 11, 12, 13], [20, 21, 22, 23], [30, 31, 32, 33]]),
        target_token=torch.tensor([[10, 91, 12, 13], [20, 21, 92, 93], [30, 31, 32, 33]]),
    )


def _reqs(n):
    return [SimpleNamespace(asd_ledger=RequestLedger(choice=RequestASD(8.0, ASDConfig()))) for _ in range(n)]


def test_a_full_round_posts_events_at_output_positions_and_counts_suffix_tokens():
    reqs = _reqs(3)
    commits = [SimpleNamespace(output_index=7, token_ids=(10, 11, 12, 13, 14)),
               SimpleNamespace(output_index=3, token_ids=(20, 21, 22, 93)),
               SimpleNamespace(output_index=0, token_ids=(30,))]
    _round().copy_to_host(lambda t: t.clone()).consume(SimpleNamespace(reqs=reqs), commits)
    r0, r1, r2 = (r.asd_ledger.receipt() for r in reqs)
    assert r0["events"] == [{"pos": 8, "draft": 11, "target": 91, "regret": 0.5}] and r0["suffix_tokens"] == 2
    assert r0["spent"] == 0.5 and r0["remaining"] == 7.5
    assert r1["events"] == [{"pos": 5, "draft": 22, "target": 92, "regret": 0.25}] and r1["suffix_tokens"] == 0
    assert r2["exceptions"] == 0 and r2["spent"] == 0.0


def test_a_round_cut_before_its_suffix_charges_only_what_became_visible():
    reqs = _reqs(3)
    # Row 0 stopped after two tokens (a stop token or max_new_tokens): its suffix never became visible.
    # Row 1 stopped before its exception: nothing is charged. Row 2 finished in an earlier round
    # (the overlap scheduler's one-step lag): no commit, nobody is charged.
    commits = [SimpleNamespace(output_index=7, token_ids=(10, 11)),
               SimpleNamespace(output_index=3, token_ids=(20, 21)),
               None]
    _round().consume(SimpleNamespace(reqs=reqs), commits)
    r0, r1, r2 = (r.asd_ledger.receipt() for r in reqs)
    assert r0["exceptions"] == 1 and r0["suffix_tokens"] == 0
    assert r1["exceptions"] == 0 and r1["spent"] == 0.0 and r1["suffix_tokens"] == 0
    assert r2["exceptions"] == 0
