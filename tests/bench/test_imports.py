"""The benchmark tools run against any server URL: they must not need SGLang or torch."""

import subprocess
import sys

MODULES = ["sglang_asd.bench.speed", "sglang_asd.bench.audit", "sglang_asd.bench.load_summary",
           "sglang_asd.bench.scoring", "sglang_asd.bench.arms", "sglang_asd.bench.runlog",
           "sglang_asd.bench.speed_summary", "sglang_asd.bench.speed_report", "sglang_asd.bench.monitor",
           "sglang_asd.bench.host", "sglang_asd.bench.server", "sglang_asd.bench.audit_summary",
           "sglang_asd.bench.audit_report", "sglang_asd.bench.sampling", "sglang_asd.testing.server",
           "sglang_asd.bench.calibrate", "sglang_asd.bench.calibrate_summary", "sglang_asd.bench.calibrate_report",
           "sglang_asd.calibrate"]


def test_bench_imports_without_sglang_or_torch():
    code = ("import sys\n"
            "for name in ('sglang', 'torch', 'sgl_kernel'):\n"
            "    sys.modules[name] = None  # any import of them now fails\n"
            + "".join(f"import {m}\n" for m in MODULES))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_cli_help():
    for module in ("sglang_asd.bench.speed", "sglang_asd.bench.audit", "sglang_asd.calibrate"):
        r = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and "--url" in r.stdout and "--launch" in r.stdout, r.stderr
