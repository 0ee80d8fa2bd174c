"""Other load during a speed pass (scripts/lab/quiet.py): the foreign share, the wait for a quiet
machine, and the lab's speed runner (scripts/lab/speed.py) redoing a disturbed pass (scripted loads
against the fake server)."""

import itertools
import json
import time

import pytest
import quiet
import speed as lab_speed

from sglang_asd.bench import speed


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += s


def test_foreign_share_is_other_cpu_over_wall_times_cores():
    clock, busy, own = Clock(), [100.0], [10.0]
    load = quiet.ForeignLoad(lambda: own[0], lambda: busy[0], cores=2, clock=clock)
    load.start()
    clock.t, busy[0], own[0] = 20.0, 100.0 + 30.0, 10.0 + 26.0   # 30 CPU-s busy, 26 of them ours
    assert load.share() == pytest.approx(4.0 / 40.0)
    busy[0] = 100.0 + 20.0                                        # counters never go below our own use
    assert load.share() == 0.0
    clock.t = quiet.MIN_WALL_S - 0.1                              # too short to judge
    assert load.share() is None


def test_unknown_own_or_machine_cpu_gives_no_share():
    clock = Clock()
    for own, busy in ((lambda: None, lambda: 5.0), (lambda: 1.0, lambda: None)):
        load = quiet.ForeignLoad(own, busy, cores=2, clock=clock)
        load.start()
        clock.t += 60
        assert load.share() is None
    with pytest.raises(RuntimeError):
        quiet.ForeignLoad(lambda: 0.0, lambda: 0.0, clock=clock).share()


def test_wait_quiet_returns_at_the_first_quiet_window_or_the_deadline():
    clock, busy = Clock(), [0.0]
    loads = iter([1.5, 1.2, 0.1])  # foreign CPU-s per 10 s window on 2 cores: 7.5%, 6%, 0.5%

    def sleep(s):
        clock.sleep(s)
        busy[0] += next(loads)

    load = quiet.ForeignLoad(lambda: 0.0, lambda: busy[0], cores=2, clock=clock)
    assert load.wait_quiet(0.05, window_s=10, max_wait_s=600, sleep=sleep) == pytest.approx(0.005)
    assert clock.t == 30

    clock, busy = Clock(), [0.0]
    load = quiet.ForeignLoad(lambda: 0.0, lambda: busy[0], cores=2, clock=clock)

    def busy_sleep(s):
        clock.sleep(s)
        busy[0] += 10.0

    assert load.wait_quiet(0.05, window_s=10, max_wait_s=25, sleep=busy_sleep) == pytest.approx(0.5)
    assert clock.t == 30   # gives up at the first window past the deadline


def test_machine_busy_reads_the_cpu_line(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 5 20 1000 7 1 2 3 0 0\ncpu0 50 2 10 500 3 0 1 1 0 0\n")
    import os

    hz = os.sysconf("SC_CLK_TCK")
    assert quiet.machine_busy_s(str(stat)) == pytest.approx((100 + 5 + 20 + 1 + 2 + 3) / hz)
    assert quiet.machine_busy_s(str(tmp_path / "missing")) is None
    real = quiet.machine_busy_s()
    assert real is None or real > 0


def test_heartbeat_reports_the_longest_gap_between_wake_ups():
    # A fake clock: one second per wake-up, then the machine stands still for 100 s once.
    times = itertools.chain([0.0, 1.0, 2.0, 3.0, 103.0], itertools.count(104.0))
    calls = []

    def clock():
        calls.append(None)
        return next(times)

    beat = quiet.Heartbeat(tick_s=0.001, clock=clock)
    beat.start()
    while len(calls) < 7:
        time.sleep(0.001)
    assert beat.stop() == 100.0
    with pytest.raises(RuntimeError, match="before start"):
        beat.stop()


def test_heartbeat_on_a_running_machine_sees_about_one_tick():
    beat = quiet.Heartbeat(tick_s=0.01)
    beat.start()
    with pytest.raises(RuntimeError, match="twice"):
        beat.start()
    time.sleep(0.2)
    gap = beat.stop()
    assert 0.009 < gap < quiet.MAX_STALL_S
    beat.start()   # reusable: each interval starts from zero
    assert beat.stop() < quiet.MAX_STALL_S


def _scripted_load(monkeypatch, shares, stalls=()):
    """Replace the meters: pass k (in run order) sees shares[k] and a heartbeat gap of stalls[k]
    (1 s when not given); records the waits for quiet."""
    shares, waits, stalls = list(shares), [], list(stalls)

    class ScriptedBeat:
        def start(self):
            pass

        def stop(self):
            return stalls.pop(0) if stalls else 1.0

    monkeypatch.setattr(quiet, "Heartbeat", ScriptedBeat)

    class Scripted:
        def __init__(self, own_s):
            pass

        def start(self):
            pass

        def share(self):
            return shares.pop(0) if shares else 0.0

        def wait_quiet(self, max_share, max_wait_s):
            waits.append((max_share, max_wait_s))
            return 0.0

    monkeypatch.setattr(quiet, "ForeignLoad", Scripted)
    return waits


# trios: strict, b8, strict (the redo path is the same for both schedules)
ARGS = ["--budgets", "0,8", "--num-prompts", "2", "--max-new-tokens", "4", "--concurrency", "2", "--repeats", "1",
        "--schedule", "trios"]


def test_a_disturbed_pass_is_redone_once_the_machine_is_quiet(fake_server_url, tmp_path, monkeypatch):
    waits = _scripted_load(monkeypatch, [0.0, 0.30, 0.01, 0.0])   # b8's first try ran beside other work
    assert lab_speed.main(["--url", fake_server_url, *ARGS, "--quiet-wait", "77", "--out", str(tmp_path)]) == 0
    assert waits == [(quiet.DEFAULT_MAX_SHARE, 77.0)]
    log = [json.loads(line) for line in (tmp_path / speed.LOG_NAME).read_text().splitlines()]
    tries = [(r["arm"], r["foreign_share"], r["disturbed"]) for r in log if r.get("kind") == "pass"]
    assert tries == [("strict", 0.0, False), ("b8", 0.30, True), ("b8", 0.01, False), ("strict", 0.0, False)]
    result = json.loads((tmp_path / "speed.json").read_text())
    assert result["complete"] == {"passes": 3, "planned": 3}
    assert [p["disturbed"] for p in result["passes"]] == [False] * 3   # the redo replaces the disturbed try
    assert not any("other work" in w for w in result["warnings"])


def test_a_pass_still_disturbed_is_kept_marked_and_resume_redoes_it(fake_server_url, tmp_path, monkeypatch):
    _scripted_load(monkeypatch, [0.0, 0.2, 0.0])
    assert lab_speed.main(["--url", fake_server_url, *ARGS, "--redo-disturbed", "0", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "speed.json").read_text())
    assert [p["disturbed"] for p in result["passes"]] == [False, True, False]
    assert any("1 pass(es) ran while other work took up to 20% of the machine's CPU (b8)" in w
               for w in result["warnings"])

    _scripted_load(monkeypatch, [0.0])
    assert lab_speed.main(["--url", fake_server_url, *ARGS, "--resume", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "speed.json").read_text())
    assert [p["disturbed"] for p in result["passes"]] == [False] * 3
    assert not any("other work" in w for w in result["warnings"])


def test_a_pass_across_a_machine_pause_is_redone(fake_server_url, tmp_path, monkeypatch):
    # b8's first try: nothing else ran (share 0), but the machine stood still for 1800 s.
    _scripted_load(monkeypatch, [0.0, 0.0, 0.0, 0.0], stalls=[1.0, 1800.0, 1.0, 1.0])
    assert lab_speed.main(["--url", fake_server_url, *ARGS, "--out", str(tmp_path)]) == 0
    log = [json.loads(line) for line in (tmp_path / speed.LOG_NAME).read_text().splitlines()]
    tries = [(r["arm"], r["stall_s"], r["disturbed"]) for r in log if r.get("kind") == "pass"]
    assert tries == [("strict", 1.0, False), ("b8", 1800.0, True), ("b8", 1.0, False), ("strict", 1.0, False)]
    assert json.loads((tmp_path / "speed.json").read_text())["complete"] == {"passes": 3, "planned": 3}

    _scripted_load(monkeypatch, [0.0, 0.0, 0.0], stalls=[1.0, 1800.0, 1.0])
    out = tmp_path / "kept"
    assert lab_speed.main(["--url", fake_server_url, *ARGS, "--redo-disturbed", "0", "--out", str(out)]) == 0
    result = json.loads((out / "speed.json").read_text())
    assert [p["disturbed"] for p in result["passes"]] == [False, True, False]
    assert any("1 pass(es) ran while the machine stood still for up to 1800 s (paused?) (b8)" in w
               for w in result["warnings"])
    assert not any("other work" in w for w in result["warnings"])


def test_bad_load_arguments_are_refused(tmp_path):
    for flag, value in (("--max-foreign-share", "1.5"), ("--redo-disturbed", "-1")):
        with pytest.raises(SystemExit, match=f"{flag} must be"):
            lab_speed.main(["--url", "http://127.0.0.1:9", *ARGS, flag, value, "--out", str(tmp_path)])


def test_against_servers_given_by_url_no_share_is_measured(fake_server_url, tmp_path):
    assert lab_speed.main(["--url", fake_server_url, *ARGS, "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "speed.json").read_text())
    assert [p["foreign_share"] for p in result["passes"]] == [None] * 3
