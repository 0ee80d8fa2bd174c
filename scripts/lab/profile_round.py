"""Where a speculative round's time goes: a sampling profile of the scheduler, by phase and by op.

``python scripts/lab/profile_round.py --launch 'SERVER ARGS' [--plain-launch 'ARGS'] [--arms strict:0,b8:8]
    [--prompts 4] [--max-new-tokens 64] [--rate 200] --out DIR``

For each server (the speculative one, and the plain one if given) the tool starts it
(``sglang_asd.testing.server.LaunchedServer``), sends one warm-up request, then, per arm, records
the scheduler process with py-spy (``--nonblocking``, raw stacks, its busiest thread: the one that
runs the forwards) while it sends the prompts one at a time, greedy, at fixed work
(``ignore_eos``). Every sample is put in one *phase* (the outermost step of SGLang's round it lies
in) and one *op* (the innermost kind of work), and the table gives milliseconds per verify round
(per decode step for plain decoding) in each cell. The check against the clock: the samples'
seconds against the wall time of the same requests (``sampled / wall``; below 1 where the
scheduler waits: the HTTP and detokenizer processes, the client).

Output in ``DIR``: ``profile.md`` (the tables), ``profile.json`` (the counts), ``<arm>.raw.txt`` (py-spy's
raw stacks, for a flame graph).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1])]

import requests  # noqa: E402

from sglang_asd.bench import datasets  # noqa: E402
from sglang_asd.testing.server import LaunchedServer  # noqa: E402

# Phases, checked in this order against the frames of a sample (outermost step of the round).
PHASES = (
    ("draft extend", ("_draft_extend_for_decode", "forward_draft_extend")),
    ("draft root (draft fix)", ("_root_forward",)),
    ("draft steps", ("EagleDraftWorker.draft", "draft_forward")),
    ("verify", ("EAGLEWorkerV2.verify", "run_eagle_verify", "NGRAMWorker.verify", ".verify (")),
    ("prefill", ("_execute_extend", "forward_extend")),
    ("decode forward", ("_execute_decode", "forward_decode", "ModelRunner.forward")),
)
HOST = "scheduler & host"
# Ops, checked in this order (the innermost kind of work a sample is in).
OPS = (
    ("LM head", lambda f: any(k in f for k in ("_compute_lm_head", "lm_head_around", "LogitsProcessor._get_logits"))),
    ("linear GEMMs", lambda f: any(k in f for k in ("fp32_accumulate_linear", "linear_apply_around",
                                                    "UnquantizedLinearMethod.apply", "functional.linear"))),
    ("attention (stand-in)", lambda f: "cpu_backend/attention" in f),
    ("other stand-in ops", lambda f: "cpu_backend/" in f),
    ("ASD verify", lambda f: "sglang_asd/verify/" in f),
    ("ASD seams", lambda f: "sglang_asd/" in f),
)
OTHER_MODEL = "other model ops"
OTHER = "Python and torch overhead"


def classify(frames: list[str]) -> tuple[str, str]:
    """(phase, op) of one sample; ``frames`` outermost first."""
    joined = ";".join(frames)
    phase = next((name for name, keys in PHASES if any(k in joined for k in keys)), HOST)
    # The scheduler's own frames: what lies below its event loop (the forked launcher's frames, ours, are above).
    loop = next((i for i, f in enumerate(frames) if "run_event_loop" in f), -1)
    frames = frames[loop + 1:]
    for name, test in OPS:
        if any(test(f) for f in frames):
            return phase, name
    return phase, OTHER_MODEL if "ModelRunner.forward" in joined else OTHER


def read_raw(path: Path) -> dict[str, list[tuple[list[str], int]]]:
    """py-spy's raw output (``--threads``): thread -> [(frames outermost first, samples)]."""
    threads: dict[str, list] = collections.defaultdict(list)
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        threads[frames[0]].append((frames[1:], int(count)))
    return threads


def tally(path: Path) -> tuple[dict, int]:
    """Samples per (phase, op) on the busiest thread, and that thread's total."""
    threads = read_raw(path)
    if not threads:
        return {}, 0
    main = max(threads.values(), key=lambda stacks: sum(n for _, n in stacks))
    cells: collections.Counter = collections.Counter()
    for frames, n in main:
        cells[classify(frames)] += n
    return {f"{p}|{o}": n for (p, o), n in cells.items()}, sum(cells.values())


def scheduler_pid(launcher_pid: int) -> int:
    """The scheduler process among the launcher's process group (SGLang names it ``sglang::scheduler``)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            if "sglang::scheduler" in cmd and os.getpgid(int(pid)) == os.getpgid(launcher_pid):
                return int(pid)
        except (OSError, ProcessLookupError):
            continue
    raise RuntimeError("no sglang::scheduler process in the server's process group")


def py_spy() -> str:
    """The py-spy binary beside this Python (a venv's ``bin/``), else on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    found = str(beside) if beside.exists() else shutil.which("py-spy")
    if found is None:
        raise SystemExit("profile_round: py-spy is not installed (pip install py-spy)")
    return found


def generate(url: str, prompt: str, max_new: int, budget: Optional[float]) -> dict:
    params = {"temperature": 0, "max_new_tokens": max_new, "ignore_eos": True}
    if budget is not None:
        params["asd_budget"] = budget
    r = requests.post(url + "/generate", json={"text": prompt, "sampling_params": params}, timeout=1800)
    r.raise_for_status()
    return r.json()["meta_info"]


def profile_arm(url: str, pid: int, label: str, budget: Optional[float], prompts: list[str], max_new: int,
                rate: int, out: Path) -> dict:
    raw = out / f"{label}.raw.txt"
    spy = subprocess.Popen([py_spy(), "record", "--pid", str(pid), "--rate", str(rate),
                            "--nonblocking", "--threads", "--format", "raw", "--output", str(raw)],
                           stdout=subprocess.DEVNULL, stderr=(out / f"{label}.py-spy.log").open("w"))
    time.sleep(2.0)  # py-spy attaches
    tokens = rounds = 0
    t0 = time.perf_counter()
    for i, prompt in enumerate(prompts):
        meta = generate(url, prompt, max_new, budget)
        tokens += meta["completion_tokens"]
        rounds += meta.get("spec_verify_ct") or 0
        print(f"[profile] {label}: {i + 1}/{len(prompts)} prompts", file=sys.stderr, flush=True)
    wall = time.perf_counter() - t0
    time.sleep(1.0)
    spy.send_signal(signal.SIGINT)
    spy.wait(timeout=120)
    cells, total = tally(raw)
    return {"label": label, "budget": budget, "tokens": tokens, "rounds": rounds, "wall_s": wall,
            "samples": total, "rate": rate, "cells": cells}


def table(arm: dict) -> str:
    """Milliseconds per verify round (per decode step without speculation) by phase and op."""
    steps = arm["rounds"] or arm["tokens"]
    ms = 1000.0 / arm["rate"] / max(steps, 1)
    phases = [p for p, _ in PHASES] + [HOST]
    ops = [o for o, _ in OPS] + [OTHER_MODEL, OTHER]
    cell = {tuple(k.split("|")): n * ms for k, n in arm["cells"].items()}
    ops = [o for o in ops if any(cell.get((p, o)) for p in phases)]
    phases = [p for p in phases if any(cell.get((p, o)) for o in ops)]
    unit = "round" if arm["rounds"] else "step"
    lines = [f"| ms per {unit} | " + " | ".join(ops) + " | total |", "| --- |" + " ---: |" * (len(ops) + 1)]
    for p in phases:
        row = [cell.get((p, o), 0.0) for o in ops]
        lines.append(f"| {p} | " + " | ".join(f"{v:.1f}" for v in row) + f" | {sum(row):.1f} |")
    col = [sum(cell.get((p, o), 0.0) for p in phases) for o in ops]
    lines.append("| **total** | " + " | ".join(f"{v:.1f}" for v in col) + f" | **{sum(col):.1f}** |")
    sampled = arm["samples"] / arm["rate"]
    per_token = arm["wall_s"] / max(arm["tokens"], 1) * 1000
    head = (f"**{arm['label']}**: {arm['tokens']} tokens"
            + (f" in {arm['rounds']} verify rounds ({arm['tokens'] / arm['rounds']:.2f} tokens per round)"
               if arm["rounds"] else "")
            + f", {arm['tokens'] / arm['wall_s']:.2f} tok/s ({per_token:.0f} ms per token); wall "
            f"{arm['wall_s']:.1f} s, sampled {sampled:.1f} s (sampled / wall {sampled / arm['wall_s']:.2f})")
    return head + "\n\n" + "\n".join(lines) + "\n"


def parse_arms(spec: str) -> list[tuple[str, Optional[float]]]:
    arms = []
    for item in spec.split(","):
        label, _, budget = item.partition(":")
        arms.append((label, float(budget) if budget else None))
    return arms


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python scripts/lab/profile_round.py", description=__doc__.splitlines()[0])
    p.add_argument("--launch", required=True, help="arguments of the speculative server (sglang_asd.launch_server)")
    p.add_argument("--plain-launch", help="arguments of a server without speculation, profiled as arm 'plain'")
    p.add_argument("--arms", default="strict:0,b8:8", help="LABEL:BUDGET,... on the speculative server")
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--dataset", default="gsm8k,mtbench", help="prompt sources (bench.datasets tasks)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    prompts = [q.text for q in datasets.mixed_prompts(datasets.parse_tasks(args.dataset), args.prompts)]
    servers = ([("plain", args.plain_launch, [("plain", None)])] if args.plain_launch else []) + [
        ("spec", args.launch, parse_arms(args.arms))]
    arms = []
    for name, launch, server_arms in servers:
        server = LaunchedServer(launch, args.out / f"{name}_server.log")
        with server as url:
            pid = scheduler_pid(server.proc.pid)
            generate(url, prompts[0], 8, None)  # warm-up
            for label, budget in server_arms:
                arms.append(profile_arm(url, pid, label, budget, prompts, args.max_new_tokens, args.rate, args.out))
    (args.out / "profile.json").write_text(json.dumps({"argv": sys.argv[1:], "arms": arms}, indent=1))
    (args.out / "profile.md").write_text("\n".join(table(a) for a in arms))
    print((args.out / "profile.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
