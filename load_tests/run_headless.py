"""Headless, bounded load test of a running server, with a summary as JSON and CSV.

``python load_tests/run_headless.py --host http://127.0.0.1:30000 --users 8 --spawn-rate 4
    --run-time 30s --max-requests 200 --out DIR [--budget-mix 0:0.5,8:0.5] [--api-mix generate:1]
    [--stream-share 0.5] [--user-mix fixed:1,natural:1] [--max-new-tokens 64]``

Runs ``locust -f load_tests/locustfile.py --headless`` in a child process, bounded by users, spawn
rate, run time and request count, then summarizes the per-request records it wrote:
``DIR/summary.json``, ``DIR/summary.csv`` (rows: all, per budget, per user kind), ``DIR/requests.jsonl``
and locust's own ``DIR/locust_*.csv``. The summary has req/s, output tok/s, TTFT, inter-token and
end-to-end latency at p50/p90/p99, accept length, budget spent and the error count.

Only the given host is contacted (redirects are not followed). A host that is not loopback needs
``--allow-remote``, so a typo cannot load-test someone else's server.
Exit status: 0 when requests completed (1 with ``--fail-on-error`` if any failed), 2 on bad
arguments, 3 when locust failed or no request completed.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent
try:
    import sglang_asd.bench  # noqa: F401
except ImportError:
    sys.path.insert(0, str(HERE.parent))

from sglang_asd.bench import report  # noqa: E402
from sglang_asd.bench.client import APIS  # noqa: E402
from sglang_asd.bench.load_summary import CSV_COLUMNS, csv_rows, summarize_load  # noqa: E402
from sglang_asd.bench.loadmix import budget_value, choice_of, parse_mix  # noqa: E402

USER_CLASSES = {"fixed": "FixedWorkUser", "natural": "NaturalStopUser"}


def parse_duration(text: str) -> float:
    """``"30s"``, ``"2m"``, ``"1h30m"``, ``"45"`` -> seconds."""
    m = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s?)?", text.strip())
    if not text.strip() or not m or not any(m.groups()):
        raise ValueError(f"--run-time must look like 30s, 2m or 1h30m, got {text!r}")
    h, mnt, s = (int(g or 0) for g in m.groups())
    return h * 3600 + mnt * 60 + s


def check_host(host: str, allow_remote: bool) -> str:
    parts = urlsplit(host)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
        raise ValueError(f"--host must be a base URL like http://127.0.0.1:30000, got {host!r}")
    name = parts.hostname
    try:
        loopback = ipaddress.ip_address(name).is_loopback
    except ValueError:
        loopback = name == "localhost"
    if not loopback and not allow_remote:
        raise ValueError(f"--host {host} is not a loopback address; pass --allow-remote to load-test it")
    return host.rstrip("/")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="load_tests/run_headless.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="http://127.0.0.1:30000")
    p.add_argument("--allow-remote", action="store_true", help="allow a host that is not loopback")
    p.add_argument("--users", type=int, default=8)
    p.add_argument("--spawn-rate", type=float, default=4.0)
    p.add_argument("--run-time", default="30s")
    p.add_argument("--max-requests", type=int, default=200, help="stop after this many requests (0 = run time only)")
    p.add_argument("--stop-timeout", type=float, default=60.0, help="seconds in-flight requests get at the end")
    p.add_argument("--budget-mix", default="0:0.5,8:0.5")
    p.add_argument("--api-mix", default="generate:1")
    p.add_argument("--stream-share", type=float, default=0.5)
    p.add_argument("--user-mix", default="fixed:1,natural:1")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--natural-max-new-tokens", type=int, default=256)
    p.add_argument("--prompt-tasks", default="gsm8k,mtbench")
    p.add_argument("--request-timeout", type=float, default=300.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fail-on-error", action="store_true", help="exit 1 if any request failed")
    p.add_argument("--out", type=Path, required=True)
    return p


def validate(args: argparse.Namespace) -> None:
    args.host = check_host(args.host, args.allow_remote)
    args.run_time_s = parse_duration(args.run_time)
    if args.users < 1:
        raise ValueError(f"--users must be >= 1, got {args.users}")
    if args.spawn_rate <= 0:
        raise ValueError(f"--spawn-rate must be > 0, got {args.spawn_rate}")
    if args.max_requests < 0:
        raise ValueError(f"--max-requests must be >= 0, got {args.max_requests}")
    if not 0 <= args.stream_share <= 1:
        raise ValueError(f"--stream-share must be in [0, 1], got {args.stream_share}")
    parse_mix(args.budget_mix, budget_value, "--budget-mix")
    parse_mix(args.api_mix, choice_of(APIS), "--api-mix")
    args.user_classes = [USER_CLASSES[u] for u, w in parse_mix(args.user_mix, choice_of(tuple(USER_CLASSES)),
                                                                "--user-mix") if w > 0]


def locust_command(args: argparse.Namespace, records: Path) -> list[str]:
    return [
        sys.executable, "-m", "locust", "-f", str(HERE / "locustfile.py"), "--headless",
        "--host", args.host, "--users", str(args.users), "--spawn-rate", str(args.spawn_rate),
        "--run-time", f"{args.run_time_s}s", "--stop-timeout", str(int(args.stop_timeout)),
        "--csv", str(args.out / "locust"), "--only-summary", "--loglevel", "WARNING", "--exit-code-on-error", "0",
        "--budget-mix", args.budget_mix, "--api-mix", args.api_mix, "--stream-share", str(args.stream_share),
        "--user-mix", args.user_mix, "--max-new-tokens", str(args.max_new_tokens),
        "--natural-max-new-tokens", str(args.natural_max_new_tokens), "--prompt-tasks", args.prompt_tasks,
        "--max-requests", str(args.max_requests), "--records-out", str(records),
        "--request-timeout", str(args.request_timeout), "--seed", str(args.seed),
        *args.user_classes,
    ]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        validate(args)
    except ValueError as e:
        print(f"run_headless: error: {e}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    records_path = args.out / "requests.jsonl"
    records_path.unlink(missing_ok=True)
    cmd = locust_command(args, records_path)
    (args.out / "command.txt").write_text(" ".join(cmd) + "\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(HERE.parent), os.environ.get("PYTHONPATH")])))
    hard_limit = args.run_time_s + args.stop_timeout + 120
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, env=env, timeout=hard_limit, capture_output=True, text=True)
        rc, log = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        rc, log = None, f"locust ran past {hard_limit:.0f} s and was stopped\n{e.stdout or ''}{e.stderr or ''}"
    (args.out / "locust.log").write_text(log if isinstance(log, str) else log.decode(errors="replace"))
    records = []
    if records_path.exists():
        records = [json.loads(line) for line in records_path.read_text().splitlines() if line.strip()]
    config = {k: v for k, v in vars(args).items() if k not in ("out",)}
    config.update(out=str(args.out), locust_exit_status=rc, wall_s=time.monotonic() - t0)
    summary = summarize_load(records, config)
    report.write_json(args.out / "summary.json", summary)
    report.write_csv(args.out / "summary.csv", csv_rows(summary), CSV_COLUMNS)
    print_summary(summary)
    if rc is None or rc != 0 or not records:
        print(f"run_headless: locust exit status {rc}, {len(records)} request(s) recorded; see {args.out / 'locust.log'}",
              file=sys.stderr)
        return 3
    if summary["requests"] - summary["errors"] == 0:
        print(f"run_headless: no request succeeded: {summary['first_errors']}", file=sys.stderr)
        return 3
    if args.fail_on_error and summary["errors"]:
        print(f"run_headless: {summary['errors']} request(s) failed: {summary['first_errors']}", file=sys.stderr)
        return 1
    return 0


def print_summary(s: dict) -> None:
    f = report.fmt
    print(f"requests {s['requests']} (errors {s['errors']}) in {f(s['duration_s'], 1)} s: "
          f"{f(s['req_per_s'], 2)} req/s, {f(s['output_tok_per_s'], 1)} output tok/s")
    for name in ("ttft", "itl", "e2e"):
        d = s[f"{name}_s"]
        print(f"  {name:4s} p50 {f(d['p50'], 4)} p90 {f(d['p90'], 4)} p99 {f(d['p99'], 4)} s (n={d['n']})")
    print(f"  accept length {f(s['accept_length'], 2)}, spent/request {f(s['spent_mean'], 3)} nats, "
          f"ASD applied {f(s['applied_share'], 2)}")
    for g in s["by_budget"]:
        print(f"  budget {g['budget']:g}: {g['requests']} req, {f(g['output_tok_per_s'], 1)} tok/s, "
              f"accept length {f(g['accept_length'], 2)}, spent/request {f(g['spent_mean'], 3)}")


if __name__ == "__main__":
    sys.exit(main())
