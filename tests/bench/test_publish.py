"""docs/measurements/publish.sh and steps.sh's chain_seed: a chain's run logs are committed gzipped,
and a fresh checkout's chain continues from them (plain, live logs in OUT; the tools' --resume)."""

import gzip
import json
import subprocess
from pathlib import Path

from sglang_asd.bench.runlog import RunLog, read_log

MEASUREMENTS = Path(__file__).resolve().parents[2] / "docs" / "measurements"
FP = {"model": "m", "arms": ["strict", "b8"]}


def publish(out: Path, results: Path) -> str:
    return subprocess.run(["bash", str(MEASUREMENTS / "publish.sh"), str(out), str(results)],
                          check=True, capture_output=True, text=True).stdout


def seed(out: Path, results: Path) -> None:
    subprocess.run(["bash", "-c", f'OUT="$1" LOG_NAME=chain.log; source "{MEASUREMENTS / "steps.sh"}"; chain_seed "$2"',
                    "seed", str(out), str(results)], check=True, capture_output=True, text=True)


def test_publish_gzips_logs_and_big_reports_and_a_fresh_chain_resumes_from_them(tmp_path):
    out, results, fresh = tmp_path / "out", tmp_path / "results", tmp_path / "fresh"
    log = RunLog.open(out / "speed" / "speed_passes.jsonl", "speed-log", FP, resume=False)
    log.append({"kind": "pass", "i": 0})
    (out / "speed" / "speed.json").write_text(json.dumps({"arms": []}))
    (out / "speed" / "passes.json").write_text(json.dumps({"pad": "x" * 1_100_000}))   # a report over 1 MB
    (out / "speed" / "server.log").write_text("not published")
    (out / "speed_r1.done").touch()
    (results / "speed").mkdir(parents=True)
    (results / "speed" / "speed_passes.jsonl").write_text("an older, plain publication\n")

    assert "published 1 run log(s) and 1 finished step(s)" in publish(out, results)
    published = sorted(p.name for p in (results / "speed").iterdir())
    assert published == ["passes.json.gz", "speed.json", "speed_passes.jsonl.gz"]   # the plain one replaced
    assert (results / "steps_done").read_text() == "speed_r1\n"
    first = (results / "speed" / "speed_passes.jsonl.gz").read_bytes()
    assert gzip.decompress(first) == (out / "speed" / "speed_passes.jsonl").read_bytes()
    publish(out, results)
    assert (results / "speed" / "speed_passes.jsonl.gz").read_bytes() == first   # same log, same bytes

    seed(fresh, results)                         # a fresh checkout: live plain logs, steps marked done
    assert (fresh / "speed" / "speed_passes.jsonl").read_bytes() == (out / "speed" / "speed_passes.jsonl").read_bytes()
    assert (fresh / "speed_r1.done").exists()
    log = RunLog.open(fresh / "speed" / "speed_passes.jsonl", "speed-log", FP, resume=True)
    log.append({"kind": "pass", "i": 1})
    (fresh / "speed_r2.done").touch()
    publish(fresh, results)
    assert [r["i"] for r in read_log(results / "speed" / "speed_passes.jsonl", "speed-log")[1]] == [0, 1]
    assert (results / "steps_done").read_text() == "speed_r1\nspeed_r2\n"
    assert not (results / "speed" / "speed_passes.jsonl").exists()


def test_no_committed_file_under_measurements_is_over_1_mb():
    root = Path(subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=MEASUREMENTS, check=True,
                               capture_output=True, text=True).stdout.strip())
    tracked = [root / f for f in subprocess.run(["git", "ls-files", "-z", "--", "docs/measurements"], cwd=root,
                                                check=True, capture_output=True, text=True).stdout.split("\0") if f]
    big = [str(f.relative_to(root)) for f in tracked if f.exists() and f.stat().st_size > 1_000_000]
    assert tracked and not big, f"over 1 MB (publish.sh gzips these): {big}"
