"""docs/measurements/issue33/check_receipts.py, the sampled chain's check of what its servers did: good
receipts pass; a greedy-verified server (``reason: sampling``), another rule, an overspent ledger,
events that do not add up to ``spent``, or a strict answer that was relaxed each stop it, named."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "measurements" / "issue33" / "check_receipts.py"


def _receipt(spent=0.4, **changes):
    events = [{"pos": 3, "token": 7, "q": 0.4, "a": 0.63, "charge": spent / 2, "accepted": True}] * 2
    return {"applied": True, "reason": None, "rule": "asd-sampled-1", "budget": 8.0, "spent": spent,
            "remaining": 8.0 - spent, "relaxed": 2, "events": events, "events_truncated": False, **changes}


def _audit(folder: Path, b8_receipt: dict, strict_receipt=None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    strict_receipt = strict_receipt or {"applied": False, "reason": "strict", "rule": "asd-sampled-1", "spent": 0.0}
    rows = [{"kind": "asd-audit-log"}]
    for seed in (0, 1):
        rows.append({"kind": "item", "arm": "strict", "fields": {"asd_budget": 0.0}, "task": "gsm8k", "tag": "q0",
                     "seed": seed, "ok": True, "receipt": strict_receipt})
        rows.append({"kind": "item", "arm": "b8", "fields": {"asd_budget": 8, "asd_sampled_floor": 0.5},
                     "task": "gsm8k", "tag": "q0", "seed": seed, "ok": True, "receipt": b8_receipt})
    (folder / "audit_items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _check(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)


def test_good_receipts_pass(tmp_path):
    _audit(tmp_path, _receipt())
    r = _check("--audit", tmp_path)
    assert r.returncode == 0, r.stderr
    assert "audit b8: 2 answers, applied 2, spent mean 0.400 max 0.400 (budget 8)" in r.stdout


@pytest.mark.parametrize("receipt,strict,named", [
    ({"applied": False, "reason": "sampling", "rule": "asd-sampled-1", "spent": 0.0}, None, "reason sampling"),
    (_receipt(rule="asd-1"), None, "rule asd-1"),
    (_receipt(spent=9.0), None, "spent 9.0 > budget 8.0"),
    (dict(_receipt(), spent=0.5), None, "!= spent 0.5"),
    (_receipt(), _receipt(), "strict receipt True/None"),
])
def test_a_bad_receipt_stops_the_chain(tmp_path, receipt, strict, named):
    _audit(tmp_path, receipt, strict)
    r = _check("--audit", tmp_path)
    assert r.returncode == 1 and named in r.stderr, r.stderr


def test_nothing_to_check_is_a_failure(tmp_path):
    assert _check("--audit", tmp_path / "none").returncode == 1


def test_a_speed_pass_with_unapplied_requests_stops_the_chain(tmp_path):
    def passes(share, reasons):
        rows = [{"kind": "asd-speed-log"}, {"kind": "pass", "arm": "strict", "fields": {"asd_budget": 0.0}, "repeat": 0,
                                            "index": 0, "applied_share": 0.0, "not_applied_reasons": {"strict": 1}}]
        rows.append({"kind": "pass", "arm": "b8", "fields": {"asd_budget": 8}, "repeat": 0, "index": 1,
                     "applied_share": share, "not_applied_reasons": reasons, "spent_mean": 0.3, "exceptions_mean": 2})
        (tmp_path / "speed_passes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    passes(1.0, {})
    assert _check("--speed", tmp_path).returncode == 0
    passes(0.0, {"sampling": 1})
    r = _check("--speed", tmp_path)
    assert r.returncode == 1 and "speed b8 repeat 0 pass 1: applied 0.0, reasons {'sampling': 1}" in r.stderr
