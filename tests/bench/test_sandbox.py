"""The code executor: passes, failures, timeouts, infinite loops, limits, no network."""

import os
import time

import pytest

from sglang_asd.bench.scoring import sandbox


def test_passes():
    r = sandbox.run_program("assert sum(range(4)) == 6\nprint('ok')", timeout=5)
    assert r.passed and r.status == "passed" and r.returncode == 0 and r.error == ""


def test_fails_with_the_error_line():
    r = sandbox.run_program("def f():\n    return 1\nassert f() == 2, 'f is wrong'", timeout=5)
    assert r.status == "failed" and not r.passed
    assert "AssertionError: f is wrong" in r.error


def test_syntax_error_fails():
    assert sandbox.run_program("def broken(:\n", timeout=5).status == "failed"


def test_infinite_loop_times_out_quickly():
    t0 = time.monotonic()
    r = sandbox.run_program("while True:\n    pass\n", timeout=1.0)
    assert r.status == "timeout" and not r.passed
    assert time.monotonic() - t0 < 5


def test_sleep_times_out():
    r = sandbox.run_program("import time\ntime.sleep(60)\n", timeout=1.0)
    assert r.status == "timeout" and "timed out after 1 s" in r.error


def test_memory_limit():
    r = sandbox.run_program("x = bytearray(4 << 30)\n", timeout=5, memory_mb=512)
    assert r.status == "failed" and "MemoryError" in r.error


def test_no_network():
    r = sandbox.run_program("import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=1)\n", timeout=5)
    assert r.status == "failed"
    assert r.network in ("netns", "guard")


def test_no_process_spawning_and_no_deleting(tmp_path):
    victim = tmp_path / "keep.txt"
    victim.write_text("x")
    r = sandbox.run_program(f"import os\nos.remove({str(victim)!r})\n", timeout=5)
    assert r.status == "failed" and "PermissionError" in r.error
    assert victim.exists()
    r = sandbox.run_program("import subprocess\nsubprocess.run(['true'])\n", timeout=5)
    assert r.status == "failed" and "PermissionError" in r.error


def test_runs_in_a_temp_dir_that_is_removed():
    r = sandbox.run_program("import os\nassert os.getcwd() != " + repr(os.getcwd()) +
                            "\nopen('scratch.txt', 'w').write('x')\n", timeout=5)
    assert r.passed


def test_environment_is_not_inherited(monkeypatch):
    monkeypatch.setenv("ASD_SECRET_FOR_TEST", "1")
    r = sandbox.run_program("import os\nassert 'ASD_SECRET_FOR_TEST' not in os.environ\n", timeout=5)
    assert r.passed


def test_run_many_keeps_order():
    out = sandbox.run_many(["assert True", "assert False", "assert True"], timeout=5, workers=2)
    assert [r.status for r in out] == ["passed", "failed", "passed"]


def test_bad_timeout():
    with pytest.raises(ValueError, match="got 0"):
        sandbox.run_program("pass", timeout=0)
