"""``scripts/device_verify_bench.py --dry-run`` runs end to end on the CPU (Triton interpreter),
so the device script cannot rot between the rare sessions that have a GPU."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import subprocess
import sys

import pytest

if importlib.util.find_spec("triton") is None:  # not imported here: see test_triton_parity.py
    pytest.skip("triton is not installed", allow_module_level=True)
SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "device_verify_bench.py"


def test_dry_run_writes_a_passing_report(tmp_path):
    out = tmp_path / "nested" / "verify_dry.json"
    p = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--out", str(out)], cwd=tmp_path,
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["dry_run"] and report["ok"]
    assert report["parity"] and all(c["ok"] for c in report["parity"])
    assert {c["kind"] for c in report["parity"]} == {"corner", "size", "sampled"}
    assert len(report["timing"]) == 2 and not report["skipped"]
    for rec in report["timing"]:
        assert set(rec["eager_ms"]) == {"strict", "asd_triton", "asd_select", "asd_torch"}
        assert rec["ratio_asd_triton_vs_strict"] > 0 and rec["ms_per_output_token"]["strict"] > 0
    assert len(report["sampled"]) == 2 and report["sampled_sglang_kernel"].startswith("standin")
    for rec in report["sampled"]:  # SGLang's sampling kernel (its stand-in port on CPU) against ASD's
        assert set(rec["eager_ms"]) == {"sglang", "asd_fused", "asd_torch"}
        assert rec["ratio_asd_fused_vs_sglang"] > 0 and isinstance(rec["goal_met"], bool)
    assert "parity" in p.stdout and "ok=True" in p.stdout  # the table is printed last
