"""Shared pieces of the GPU end-to-end run (``scripts/device_e2e.py``): the step record, the time
budget, servers started in parallel, a small /generate client and the log bundle.

Servers are ``sglang_asd.launch_server`` (ASD) or ``sglang_asd.stock_server`` (stock SGLang, no
hooks) started through ``sglang_asd.testing.server.LaunchedServer``; every server log lands in one
folder that is packed into ``$OUT/server_logs.tar.gz`` after each step (the run tool returns at most
8 files from ``$OUT``).
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import json
import os
import pathlib
import random
import tarfile
import threading
import time
import traceback
from typing import Callable, Optional

import requests

from sglang_asd.testing.server import LaunchedServer

# What every tiny-model server on the GPU runs with. SGLang's defaults stay on (overlap scheduler,
# CUDA graphs, radix cache); the kernel supply is the kit's (docs/GPU.md): Triton attention, the
# PyTorch sampler. Thirteen servers share the GPU and start at once: SGLang sizes the KV pool from the
# memory free when a server starts times --mem-fraction-static, so a small fraction would go
# negative as the others allocate; a generous one is harmless because --max-total-tokens caps the
# pool (200k tokens of a 2-layer model: ~100 MB). Decode graphs are captured up to batch 64.
GPU_COMMON = ["--device", "cuda", "--attention-backend", "triton", "--sampling-backend", "pytorch",
              "--mem-fraction-static", "0.3", "--max-total-tokens", "200000", "--cuda-graph-max-bs-decode", "64",
              "--dtype", "float32", "--log-level", "info"]
# --cpu (pre-validation on a CPU machine only): the launcher adds its CPU defaults to these.
CPU_COMMON = ["--dtype", "float32", "--log-level", "info"]
EAGLE_CHAIN = ["--model-path", "fixture:tiny-llama", "--speculative-algorithm", "EAGLE",
               "--speculative-draft-model-path", "fixture:tiny-eagle-noisy", "--speculative-num-steps", "3",
               "--speculative-num-draft-tokens", "4", "--speculative-eagle-topk", "1"]
EAGLE3_TREE = ["--model-path", "fixture:tiny-llama", "--speculative-algorithm", "EAGLE3",
               "--speculative-draft-model-path", "fixture:tiny-eagle3-noisy", "--speculative-num-steps", "3",
               "--speculative-num-draft-tokens", "6", "--speculative-eagle-topk", "2"]
NGRAM = ["--model-path", "fixture:tiny-llama", "--speculative-algorithm", "NGRAM",
         "--speculative-num-draft-tokens", "4"]
# SGLang's block drafters on the bigram target their tiny drafts are built for
# (``sglang_asd.fixtures.block_drafts``): DSPARK gamma 3 (verify window 4), DFLASH block 4. Both
# resolve their draft attention backend to the target's (Triton), and SGLang's own default
# --max-running-requests for them (48).
TINY_BLOCK_TARGET = ["--model-path", "fixture:tiny-llama-bigram"]
DSPARK_BLOCK = ["--speculative-algorithm", "DSPARK", "--speculative-dspark-block-size", "3"]
DFLASH_BLOCK = ["--speculative-algorithm", "DFLASH", "--speculative-num-draft-tokens", "4"]


def block_drafter(algo: str, relation: str = "noisy") -> list[str]:
    """Serve arguments of a tiny block draft (``algo`` dspark / dflash) with its bigram target."""
    return TINY_BLOCK_TARGET + (DSPARK_BLOCK if algo == "dspark" else DFLASH_BLOCK) + [
        "--speculative-draft-model-path", f"fixture:tiny-{algo}-{relation}"]


DETERMINISTIC = ["--enable-deterministic-inference"]
# What scripts/device_e2e.sh builds on the device (and prevalidate.sh here) before the run.
TINY_FIXTURES = ["tiny-llama", "tiny-eagle-noisy", "tiny-eagle3-noisy", "tiny-llama-bigram",
                 "tiny-dspark-noisy", "tiny-dspark-exact", "tiny-dflash-noisy", "tiny-dflash-exact"]
VOCAB = 2048  # tiny tokenizer; ids below 5 are special
KIT_DIR = pathlib.Path(__file__).resolve().parent  # scripts/device, home of the CUDA stand-in ``cuda_standin``


def with_kit_on_path(env: dict) -> dict:
    """``env`` with the kit's folder on ``PYTHONPATH``: with ``SGLANG_ASD_KERNEL_STANDIN=cuda-e2e``
    every SGLang process imports the kit's CUDA stand-in (``cuda_standin``) by name."""
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return dict(env, PYTHONPATH=os.pathsep.join(parts if str(KIT_DIR) in parts else parts + [str(KIT_DIR)]))


@dataclasses.dataclass(frozen=True)
class ServerSpec:
    """One server of the run: ``stock`` = ``sglang_asd.stock_server``; ``env`` adds to the run's env."""

    name: str
    args: tuple
    stock: bool = False
    env: tuple = ()  # ((KEY, VALUE), ...)

    @property
    def module(self) -> str:
        return "sglang_asd.stock_server" if self.stock else "sglang_asd.launch_server"

    def argv(self) -> list[str]:
        return list(self.args)


class Budget:
    """Global time budget: a step starts only while enough of it is left."""

    def __init__(self, total_s: float):
        self.t0, self.total_s = time.monotonic(), total_s

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        return self.total_s - self.elapsed()


class Recorder:
    """Appends each step's result to ``out/e2e.json`` (rewritten whole after every step)."""

    def __init__(self, out: pathlib.Path, meta: dict):
        self.path = out / "e2e.json"
        self.report = {"schema": 1, **meta, "steps": []}
        self._lock = threading.Lock()
        self.flush()

    def add(self, name: str, ok: Optional[bool], seconds: float, details: dict, error: Optional[str] = None,
            skipped: Optional[str] = None) -> dict:
        rec = {"name": name, "ok": ok, "seconds": round(seconds, 2), "details": details, "error": error}
        if skipped:
            rec["skipped"] = skipped
        with self._lock:
            self.report["steps"].append(rec)
            self.flush()
        state = "SKIP" if skipped else ("PASS" if ok else "FAIL")
        log(f"[{state}] {name} ({seconds:.1f} s){': ' + error if error else ''}{': ' + skipped if skipped else ''}")
        return rec

    def flush(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.report, indent=1, default=str) + "\n")
        tmp.replace(self.path)


T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[e2e {time.monotonic() - T0:6.1f}s] {msg}", flush=True)


def run_step(rec: Recorder, name: str, fn: Callable[[], dict], budget: Budget, min_left_s: float) -> dict:
    """Run one step unless the budget is short; any exception becomes the step's error."""
    if budget.left() < min_left_s:
        return rec.add(name, None, 0.0, {}, skipped=f"time: {budget.left():.0f} s left, the step needs ~{min_left_s:.0f}")
    log(f"step {name} ...")
    t0 = time.monotonic()
    try:
        details = fn() or {}
        ok = bool(details.pop("ok", True))
        error = details.pop("error", None)
        return rec.add(name, ok, time.monotonic() - t0, details, error)
    except Exception as e:
        return rec.add(name, False, time.monotonic() - t0, {"traceback": traceback.format_exc()[-4000:]},
                       f"{type(e).__name__}: {e}"[:2000])


def run_steps_together(rec: Recorder, items: list, budget: Budget) -> list[dict]:
    """``items`` = ``[(name, fn, min_left_s)]`` run at once, one thread each (one alone runs here);
    each is recorded on its own as it ends, exactly as :func:`run_step` records it."""
    if len(items) == 1:
        return [run_step(rec, *items[0][:2], budget, items[0][2])]
    log(f"steps {', '.join(n for n, _, _ in items)} at once ...")
    with cf.ThreadPoolExecutor(max_workers=len(items), thread_name_prefix="step") as ex:
        futures = [ex.submit(run_step, rec, name, fn, budget, min_left) for name, fn, min_left in items]
        return [f.result() for f in futures]


class ServerPool:
    """Start servers in parallel in background threads; a step waits for the one it needs."""

    def __init__(self, log_dir: pathlib.Path, start_timeout_s: float, base_env: dict, parallel: int = 8):
        self.log_dir, self.timeout, self.base_env = log_dir, start_timeout_s, base_env
        self._pool = cf.ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="server-start")
        self._servers: dict[str, tuple[LaunchedServer, cf.Future]] = {}

    def start(self, spec: ServerSpec) -> None:
        if spec.name in self._servers:
            return
        env = dict(with_kit_on_path(self.base_env), PYTHONUNBUFFERED="1", **dict(spec.env))
        srv = LaunchedServer(spec.argv(), self.log_dir / f"{spec.name}.log", timeout=self.timeout,
                             module=spec.module, env=env)
        t0 = time.monotonic()

        def wait_ready() -> tuple[str, float]:
            url = srv.__enter__()
            return url, round(time.monotonic() - t0, 1)

        self._servers[spec.name] = (srv, self._pool.submit(wait_ready))

    def url(self, spec: ServerSpec) -> tuple[str, float]:
        """The server's URL once it serves (start it if needed), and its start-up seconds."""
        self.start(spec)
        return self._servers[spec.name][1].result(timeout=self.timeout + 30)

    def log_tail(self, name: str, lines: int = 40) -> str:
        try:
            return "\n".join((self.log_dir / f"{name}.log").read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def alive(self, spec: ServerSpec) -> bool:
        entry = self._servers.get(spec.name)
        return bool(entry and entry[0].proc is not None and entry[0].proc.poll() is None)

    def stop(self, name: str) -> Optional[int]:
        entry = self._servers.pop(name, None)
        if entry is None:
            return None
        srv, fut = entry
        if not fut.done():
            fut.cancel()
        return srv.stop(grace=20)

    def stop_all(self) -> None:
        for name in list(self._servers):
            self.stop(name)
        self._pool.shutdown(wait=False, cancel_futures=True)


# ---------------------------------------------------------------- client


def generate(url: str, sampling: dict, input_ids: Optional[list] = None, text: Optional[str] = None,
             timeout: float = 120.0) -> dict:
    """POST /generate; returns the JSON answer, or ``{"error": ...}`` (never raises)."""
    body = {"sampling_params": sampling}
    body.update({"input_ids": input_ids} if input_ids is not None else {"text": text})
    try:
        r = requests.post(url + "/generate", json=body, timeout=timeout)
        if r.status_code != 200:
            return {"error": f"HTTP {r.status_code}: {r.text[:300]}"}
        return r.json()
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"[:300]}


def generate_many(url: str, jobs: list[dict], concurrency: int, timeout: float = 180.0) -> list[dict]:
    """Send ``jobs`` (kwargs of :func:`generate`) ``concurrency`` at a time; answers in job order."""
    with cf.ThreadPoolExecutor(max_workers=concurrency) as ex:
        return list(ex.map(lambda j: generate(url, timeout=timeout, **j), jobs))


def prompts(n: int, seed: int, min_len: int = 8, max_len: int = 48) -> list[list[int]]:
    """Seeded random token-id prompts over the tiny vocabulary's ordinary tokens."""
    rng = random.Random(seed)
    return [[rng.randrange(5, VOCAB) for _ in range(rng.randint(min_len, max_len))] for _ in range(n)]


def receipt(answer: dict) -> Optional[dict]:
    return (answer.get("meta_info") or {}).get("asd")


def healthy(url: str) -> bool:
    try:
        return requests.get(url + "/health", timeout=10).status_code == 200
    except requests.RequestException:
        return False


def pack_logs(log_dir: pathlib.Path, out: pathlib.Path) -> None:
    """All server and setup logs as one ``server_logs.tar.gz`` in ``out``."""
    tmp = out / "server_logs.tar.gz.tmp"
    with tarfile.open(tmp, "w:gz") as tar:
        for p in sorted(log_dir.glob("*")):
            if p.is_file():
                tar.add(p, arcname=f"logs/{p.name}")
    tmp.replace(out / "server_logs.tar.gz")


def grep_log(path: pathlib.Path, needles: tuple, limit: int = 20) -> list[str]:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    return [ln[-400:] for ln in lines if any(n in ln for n in needles)][:limit]


def env_summary() -> dict:
    keys = ("SGLANG_ASD_KERNEL_STANDIN", "SGLANG_FORCE_FUSED_OP_BACKEND", "SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK",
            "SGLANG_ASD_CACHE", "TRITON_CACHE_DIR", "PYTHONPATH")
    return {k: os.environ.get(k) for k in keys}
