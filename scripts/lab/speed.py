"""``python -m sglang_asd.bench.speed`` as the project runs it: every pass watched for other load
on the shared host (``quiet.QuietMonitor``), a disturbed pass redone once the machine is quiet.

``python scripts/lab/speed.py [bench.speed's flags] [--max-foreign-share 0.05] [--redo-disturbed 2]
    [--quiet-wait 1800]``

The flags, the run log and the report are bench.speed's; this adds the three above and logs
``foreign_share``, ``stall_s`` and ``max_stall_s`` with every pass (``quiet.py``). The measurement
chains under docs/measurements/ run their speed steps through it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]  # quiet.py beside it; the package of this checkout

import quiet  # noqa: E402

from sglang_asd.bench import speed  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    p = speed.build_parser(prog="python scripts/lab/speed.py")
    p.add_argument("--max-foreign-share", type=float, default=quiet.DEFAULT_MAX_SHARE,
                   help="launched servers: a pass during which more than this share of the machine's CPU went "
                        "to other processes is disturbed, and redone (default %(default)s)")
    p.add_argument("--redo-disturbed", type=int, default=quiet.DEFAULT_REDOS,
                   help="redo a disturbed pass up to this many times, each once the machine is quiet; the last "
                        "try is kept, marked (default %(default)s)")
    p.add_argument("--quiet-wait", type=float, default=quiet.DEFAULT_QUIET_WAIT_S,
                   help="seconds to wait at most for other load to end before a redo (default %(default)s)")
    return p


def main(argv: Optional[list[str]] = None) -> int:
    args = speed.parse_args(build_parser(), argv)
    if not 0 <= args.max_foreign_share <= 1:
        raise SystemExit(f"--max-foreign-share must be in [0, 1], got {args.max_foreign_share}")
    if args.redo_disturbed < 0:
        raise SystemExit(f"--redo-disturbed must be >= 0, got {args.redo_disturbed}")
    return speed.run_cli(args, monitor=lambda targets: quiet.QuietMonitor(
        targets, args.max_foreign_share, args.redo_disturbed, args.quiet_wait))


if __name__ == "__main__":
    sys.exit(main())
