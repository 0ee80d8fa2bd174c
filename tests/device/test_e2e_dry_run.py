"""``scripts/device_e2e.py --dry-run`` (and the ``.sh`` wrapper) on CPU: step list, server argument
lists parsed by SGLang's own parser, and the report's JSON schema. Starts no server, needs no GPU."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "device_e2e.py"
STEPS = ["0", "1a", "1b", "2_eagle", "2_ngram", "3", "4", "5", "standin", "6", "7"]
STEP_KEYS = {"name", "ok", "seconds", "details", "error"}


def _run(*args, script=(sys.executable, str(SCRIPT)), env=None):
    return subprocess.run([*script, *args], capture_output=True, text=True, timeout=180, cwd=ROOT,
                          env=dict(os.environ, **(env or {})))


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("e2e_dry")
    p = _run("--dry-run", "--out", str(out))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    return json.loads((out / "e2e.json").read_text())


def test_plan_lists_every_step_in_order(report):
    assert report["schema"] == 1 and report["dry_run"] is True
    assert [s["step"] for s in report["plan"]] == STEPS
    assert [s["name"] for s in report["steps"]] == STEPS
    for st in report["steps"]:
        assert STEP_KEYS <= set(st) and st["skipped"] == "dry-run" and st["ok"] is None


def test_every_server_argv_parses_with_sglang(report):
    check = report["argument_check"]
    assert check["checked"] is True, check
    assert check["unknown_flags"] == {}


def test_servers_keep_sglang_defaults_and_the_kit_supply(report):
    servers = {s["name"]: s for step in report["plan"] for s in step["servers"]}
    assert set(servers) == {"stock_eagle_chain", "asd_eagle_chain", "stock_eagle3_tree", "asd_eagle3_tree",
                            "asd_ngram", "asd_adaptive", "asd_triton_watch", "asd_llama31_8b_shape"}
    for name, s in servers.items():
        argv = s["argv"]
        assert "--disable-cuda-graph" not in argv and "--disable-overlap-schedule" not in argv, name
        assert argv[argv.index("--attention-backend") + 1] == "triton" and argv[argv.index("--device") + 1] == "cuda"
        assert s["module"] == ("sglang_asd.stock_server" if name.startswith("stock") else "sglang_asd.launch_server")
    for step in ("1a", "1b"):
        for s in next(p for p in report["plan"] if p["step"] == step)["servers"]:
            assert "--enable-deterministic-inference" in s["argv"]
    tree = servers["asd_eagle3_tree"]["argv"]
    assert int(tree[tree.index("--speculative-eagle-topk") + 1]) > 1
    assert servers["asd_triton_watch"]["env"] == {"SGLANG_CRASH_ON_TRITON_LOAD_AFTER_READY": "1"}
    assert "--speculative-adaptive" in servers["asd_adaptive"]["argv"]


def test_steps_subset_and_unknown_step(tmp_path):
    p = _run("--dry-run", "--out", str(tmp_path), "--steps", "1a,3")
    assert p.returncode == 0, p.stderr[-2000:]
    assert [s["name"] for s in json.loads((tmp_path / "e2e.json").read_text())["steps"]] == ["1a", "3"]
    p = _run("--dry-run", "--out", str(tmp_path), "--steps", "1a,9")
    assert p.returncode == 2 and "unknown steps" in p.stderr


def test_shell_wrapper_dry_run_goes_straight_to_the_plan(tmp_path):
    p = _run("--dry-run", script=("bash", str(ROOT / "scripts/device_e2e.sh")),
             env={"OUT": str(tmp_path), "PYTHON": sys.executable})
    assert p.returncode == 0, p.stderr[-2000:]
    assert (tmp_path / "e2e.json").exists() and not (tmp_path / "e2e.log").exists()


def test_every_server_gets_the_kit_folder_and_so_the_cuda_stand_in_on_its_path(tmp_path):
    sys.path.insert(0, str(ROOT / "scripts" / "device"))
    import e2e_lib

    kit = str(ROOT / "scripts" / "device")
    assert e2e_lib.with_kit_on_path({"PYTHONPATH": "/a:/b"})["PYTHONPATH"] == f"/a:/b:{kit}"
    assert e2e_lib.with_kit_on_path({"PYTHONPATH": kit})["PYTHONPATH"] == kit
    assert e2e_lib.with_kit_on_path({}) == {"PYTHONPATH": kit}
    env = e2e_lib.with_kit_on_path({k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    p = subprocess.run([sys.executable, "-c", "import cuda_standin; print(cuda_standin.__file__)"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    assert pathlib.Path(p.stdout.strip()) == ROOT / "scripts/device/cuda_standin/__init__.py"
