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
STEPS = ["0", "1a", "1b", "1c", "1d", "1e", "2_eagle", "2_ngram", "2_dspark", "2_dflash", "2_scope", "3", "4", "5", "standin",
         "6", "7"]
BLOCK = {"stock_dspark": "DSPARK", "asd_dspark": "DSPARK", "asd_dspark_exact": "DSPARK",
         "stock_dflash": "DFLASH", "asd_dflash": "DFLASH", "asd_dflash_exact": "DFLASH"}
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
                            "asd_ngram", "asd_adaptive", "asd_triton_watch", "asd_llama31_8b_shape", *BLOCK}
    for name, s in servers.items():
        argv = s["argv"]
        assert "--disable-cuda-graph" not in argv and "--disable-overlap-schedule" not in argv, name
        assert argv[argv.index("--attention-backend") + 1] == "triton" and argv[argv.index("--device") + 1] == "cuda"
        assert s["module"] == ("sglang_asd.stock_server" if name.startswith("stock") else "sglang_asd.launch_server")
    for step in ("1a", "1b", "1c", "1d"):
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


def _plan(report, step):
    return next(p for p in report["plan"] if p["step"] == step)


def _arg(argv, flag):
    return argv[argv.index(flag) + 1]


def test_block_drafter_steps_serve_tiny_drafts_with_sglang_gpu_defaults(report):
    """1c / 1d: stock and ASD DSPARK / DFLASH, noisy tiny drafts on the bigram target, deterministic;
    1e: the exact drafts; 2_dspark / 2_dflash churn the ASD servers of 1c / 1d."""
    servers = {s["name"]: s for step in report["plan"] for s in step["servers"]}
    for name, algo in BLOCK.items():
        argv = servers[name]["argv"]
        assert _arg(argv, "--speculative-algorithm") == algo and _arg(argv, "--model-path") == "fixture:tiny-llama-bigram"
        relation = "exact" if name.endswith("_exact") else "noisy"
        assert _arg(argv, "--speculative-draft-model-path") == f"fixture:tiny-{algo.lower()}-{relation}"
        assert _arg(argv, "--dtype") == "float32" and _arg(argv, "--device") == "cuda"
        assert not {"--disable-cuda-graph", "--disable-overlap-schedule", "--disable-radix-cache"} & set(argv), name
        assert ("--enable-deterministic-inference" in argv) == (relation == "noisy"), name
        if algo == "DSPARK":
            assert _arg(argv, "--speculative-dspark-block-size") == "3"
        else:
            assert _arg(argv, "--speculative-num-draft-tokens") == "4"
        # the draft's attention backend follows the target's Triton: never SGLang's FlashInfer fallback
        assert "--speculative-draft-attention-backend" not in argv and _arg(argv, "--attention-backend") == "triton"
    assert [s["name"] for s in _plan(report, "1c")["servers"]] == ["stock_dspark", "asd_dspark"]
    assert [s["name"] for s in _plan(report, "1d")["servers"]] == ["stock_dflash", "asd_dflash"]
    assert [s["name"] for s in _plan(report, "1e")["servers"]] == ["asd_dspark_exact", "asd_dflash_exact"]
    assert [s["name"] for s in _plan(report, "2_dspark")["servers"]] == ["asd_dspark"]
    assert [s["name"] for s in _plan(report, "2_dflash")["servers"]] == ["asd_dflash"]


def test_identity_steps_run_at_once_and_churn_steps_run_at_once(report):
    together = {p["step"]: sorted(p["runs_with"]) for p in report["plan"]}
    identity, churn = ["1a", "1b", "1c", "1d", "1e"], ["2_dflash", "2_dspark", "2_eagle", "2_ngram"]
    for s in identity:
        assert together[s] == [t for t in identity if t != s]
    for s in churn:
        assert together[s] == [t for t in churn if t != s]
    assert all(not v for k, v in together.items() if k not in identity + churn)


def test_groups_keep_plan_order_and_split_on_selection():
    sys.path.insert(0, str(ROOT / "scripts"))
    import device_e2e

    assert device_e2e.groups(["0", "1a", "1c", "1d", "1e", "2_eagle", "2_dspark", "2_dflash", "3"]) == \
        [["0"], ["1a", "1c", "1d", "1e"], ["2_eagle", "2_dspark", "2_dflash"], ["3"]]
    assert device_e2e.groups(["1c", "2_dflash", "4"]) == [["1c"], ["2_dflash"], ["4"]]
    assert device_e2e.groups(device_e2e.parse_args(["--steps", "1e,1d"]).steps) == [["1d", "1e"]]


def test_steps_run_together_record_each_on_its_own(tmp_path):
    sys.path.insert(0, str(ROOT / "scripts" / "device"))
    import threading

    import e2e_lib

    rec = e2e_lib.Recorder(tmp_path, {"dry_run": False})
    barrier = threading.Barrier(2, timeout=30)  # both run at once, or this times out

    def ok():
        barrier.wait()
        return {"ok": True, "n": 1}

    def bad():
        barrier.wait()
        raise RuntimeError("boom")

    out = e2e_lib.run_steps_together(rec, [("a", ok, 1), ("b", bad, 1), ("c", ok, 10_000)], e2e_lib.Budget(100))
    by = {r["name"]: r for r in out}
    assert by["a"]["ok"] is True and by["a"]["details"] == {"n": 1}
    assert by["b"]["ok"] is False and "boom" in by["b"]["error"]
    assert by["c"]["skipped"].startswith("time")
    assert sorted(s["name"] for s in json.loads((tmp_path / "e2e.json").read_text())["steps"]) == ["a", "b", "c"]


def _answer(out, events, spent, budget_exc=None):
    r = {"applied": True, "spent": spent, "exceptions": len(events) if budget_exc is None else budget_exc,
         "events": events, "events_truncated": False}
    return {"output_ids": out, "meta_info": {"asd": r, "finish_reason": {"type": "stop"}}}


def test_receipt_check_wants_events_at_output_positions():
    sys.path.insert(0, str(ROOT / "scripts" / "device"))
    import e2e_steps

    ev = lambda pos, draft, target, regret: {"pos": pos, "draft": draft, "target": target, "regret": regret}
    good = _answer([7, 8, 9, 10], [ev(1, 8, 3, 0.25), ev(3, 10, 4, 0.5)], 0.75)
    assert e2e_steps.check_receipts([good], [1.0])["n_violations"] == 0
    cases = {
        "past the output": _answer([7, 8], [ev(2, 8, 3, 0.25)], 0.25),
        "another token emitted there": _answer([7, 8, 9], [ev(2, 8, 3, 0.25)], 0.25),
        "draft == target": _answer([7, 8, 9], [ev(1, 8, 8, 0.25)], 0.25),
        "not increasing": _answer([7, 8, 9], [ev(2, 9, 3, 0.25), ev(1, 8, 3, 0.25)], 0.5),
        "sum != spent": _answer([7, 8, 9], [ev(1, 8, 3, 0.25)], 0.5),
        "over budget": _answer([7, 8, 9], [ev(1, 8, 3, 2.0)], 2.0),
    }
    for why, answer in cases.items():
        assert e2e_steps.check_receipts([answer], [1.0])["n_violations"] == 1, why


def test_the_kit_builds_every_fixture_its_servers_serve():
    """device_e2e.sh (on the device) and prevalidate.sh build the tiny fixtures from the project's own
    code before the run: every ``fixture:NAME`` a server of steps 0-5 serves is in both build lines."""
    sys.path.insert(0, str(ROOT / "scripts" / "device"))
    import e2e_lib
    import e2e_steps

    served = {a.split(":", 1)[1] for spec in e2e_steps.SERVERS.values() for a in spec.argv() if a.startswith("fixture:")}
    assert {"tiny-llama-bigram", "tiny-dspark-noisy", "tiny-dflash-noisy", "tiny-dspark-exact",
            "tiny-dflash-exact"} <= served
    assert served <= set(e2e_lib.TINY_FIXTURES)
    for script in ("scripts/device_e2e.sh", "scripts/device/prevalidate.sh"):
        text = (ROOT / script).read_text().replace("\\\n", " ")
        line = next(ln for ln in text.splitlines() if "sglang_asd.fixtures build" in ln)
        assert served <= set(line.split()), (script, served - set(line.split()))
    from sglang_asd.fixtures.registry import FIXTURES

    assert served <= set(FIXTURES)
