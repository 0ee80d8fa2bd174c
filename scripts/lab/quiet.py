"""Other load on the machine during a timed speed pass: the project's pass monitor for a shared host.

``python scripts/lab/speed.py`` runs ``sglang_asd.bench.speed`` with ``QuietMonitor`` watching
every pass (``sglang_asd/bench/monitor.py``). On a shared CPU host
a test run, a compile or a second benchmark beside a speed pass takes cores from the servers
under test and moves that pass's tok/s by more than the effect being measured. When the tool
launched every server itself, it can tell: the machine's busy CPU time (``/proc/stat``) minus what
its own client and servers used (``/proc/PID/stat`` of their process groups) is CPU that went
elsewhere. Its share of the machine over a pass (``foreign share`` = foreign CPU-s / (wall s x
cores)) is logged with the pass; a pass above ``--max-foreign-share`` is marked disturbed and
redone once the machine is quiet.

A machine can also stop: a virtual machine the host pauses keeps its clock running, so a pass
across the pause counts it as decode time, and the foreign share cannot see it (nothing is busy while
the guest is stopped; the share even drops). ``Heartbeat`` measures that from inside: a thread that
wakes every second, whose longest gap between wake-ups is logged with the pass (``stall_s``, with
the limit ``max_stall_s`` it was judged by); a gap above ``MAX_STALL_S`` marks the pass disturbed too.

Against servers given by URL nothing can be attributed (the servers' CPU would count as foreign),
so no share is measured there. Kernel threads and daemons (e.g. ``kdamond``) show up as a small
foreign floor, a few tenths of a per cent to a few per cent
(docs/MEASURING.md#host-effects-behind-the-method: the figures behind these checks).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Callable, Optional

from sglang_asd.bench.monitor import Verdict
from sglang_asd.bench.server import Targets

# Tuned to the project's host (docs/MEASURING.md#host-effects-behind-the-method): kernel threads
# alone take about 1% of its CPU, and a 1 s heartbeat woke at most 3.6 ms late under a Qwen pass at
# nice 19, so a gap of 30 s is no scheduling delay.
DEFAULT_MAX_SHARE = 0.05
DEFAULT_REDOS = 2
DEFAULT_QUIET_WAIT_S = 1800.0
MAX_STALL_S = 30.0
MIN_WALL_S = 5.0  # shorter intervals are not judged: /proc counts in 10 ms ticks


def machine_busy_s(path: str = "/proc/stat") -> Optional[float]:
    """CPU seconds the whole machine has been busy since boot (user, nice, system, irq, softirq,
    steal of the ``cpu`` line; guest time is already inside user), None where there is no ``/proc``."""
    try:
        with open(path) as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def own_process_s() -> float:
    """CPU seconds of this process (all its threads: the benchmark client)."""
    t = os.times()
    return t.user + t.system


def own_cpu_s(targets: Targets) -> Optional[float]:
    """CPU seconds of the benchmark's client and every server it launched; None when a server was
    given by URL (its CPU cannot be told from other work on the machine)."""
    if any(url and role not in targets.launched for role, url in targets.urls.items()):
        return None
    servers = [targets.cpu_seconds(role) for role in targets.launched]
    return None if None in servers else own_process_s() + sum(servers)


class ForeignLoad:
    """Measures the foreign share over an interval: ``start()``, then ``share()``.

    ``own_s`` returns the CPU seconds used so far by everything the benchmark runs (client and
    launched servers), or None when that is unknown; then ``share()`` is None too, as it is for an
    interval shorter than ``MIN_WALL_S``.
    """

    def __init__(self, own_s: Callable[[], Optional[float]], busy_s: Callable[[], Optional[float]] = machine_busy_s,
                 cores: Optional[int] = None, clock: Callable[[], float] = time.monotonic):
        self.own_s, self.busy_s, self.clock = own_s, busy_s, clock
        self.cores = cores or os.cpu_count() or 1
        self._start: Optional[tuple[float, Optional[float], Optional[float]]] = None

    def start(self) -> None:
        self._start = (self.clock(), self.busy_s(), self.own_s())

    def share(self) -> Optional[float]:
        if self._start is None:
            raise RuntimeError("share() before start()")
        t0, busy0, own0 = self._start
        wall, busy, own = self.clock() - t0, self.busy_s(), self.own_s()
        if None in (busy0, own0, busy, own) or wall < MIN_WALL_S:
            return None
        foreign = (busy - busy0) - (own - own0)
        return max(0.0, foreign) / (wall * self.cores)

    def wait_quiet(self, max_share: float, window_s: float = 10.0, max_wait_s: float = DEFAULT_QUIET_WAIT_S,
                   sleep: Callable[[float], None] = time.sleep) -> Optional[float]:
        """Block until one ``window_s`` window has a foreign share at most ``max_share`` (or
        ``max_wait_s`` has passed); returns that window's share (None when it cannot be measured)."""
        deadline = self.clock() + max_wait_s
        while True:
            self.start()
            sleep(window_s)
            share = self.share()
            if share is None or share <= max_share or self.clock() >= deadline:
                return share
            print(f"other load on the machine ({share:.0%} of its CPU): waiting for it to end before the redo",
                  file=sys.stderr, flush=True)


class Heartbeat:
    """The longest gap between the wake-ups of a thread that sleeps ``tick_s`` at a time, over an
    interval: ``start()``, then ``stop()`` returns it in seconds (about ``tick_s`` when nothing
    stopped the machine). A gap above ``MAX_STALL_S`` means the whole machine did not run, e.g. a paused VM."""

    def __init__(self, tick_s: float = 1.0, clock: Callable[[], float] = time.monotonic):
        self.tick_s, self.clock = tick_s, clock
        self._thread: Optional[threading.Thread] = None
        self._stop = threading.Event()
        self._last = self._max_gap = 0.0

    def _beat(self) -> None:
        now = self.clock()
        self._max_gap, self._last = max(self._max_gap, now - self._last), now

    def _run(self) -> None:
        while not self._stop.wait(self.tick_s):
            self._beat()

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("Heartbeat.start() twice without stop()")
        self._stop.clear()
        self._last, self._max_gap = self.clock(), 0.0
        self._thread = threading.Thread(target=self._run, name="asd-heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> float:
        if self._thread is None:
            raise RuntimeError("Heartbeat.stop() before start()")
        self._stop.set()
        self._thread.join()
        self._thread = None
        self._beat()  # a stop in the last tick shows only here
        return self._max_gap


class QuietMonitor:
    """The pass monitor (``sglang_asd/bench/monitor.py``): a pass is disturbed when other work took
    more than ``max_share`` of the machine's CPU during it, or the machine stood still for more than
    ``MAX_STALL_S``; it is redone up to ``redos`` times, each after waiting (at most
    ``quiet_wait_s``) for a quiet 10 s window. Logs ``foreign_share``, ``stall_s`` and ``max_stall_s``."""

    def __init__(self, targets: Targets, max_share: float = DEFAULT_MAX_SHARE, redos: int = DEFAULT_REDOS,
                 quiet_wait_s: float = DEFAULT_QUIET_WAIT_S):
        self.max_share, self.redos, self.quiet_wait_s = max_share, redos, quiet_wait_s
        self.load, self.beat = ForeignLoad(lambda: own_cpu_s(targets)), Heartbeat()

    def before_redo(self) -> None:
        self.load.wait_quiet(self.max_share, max_wait_s=self.quiet_wait_s)

    def before_pass(self) -> None:
        self.load.start()
        self.beat.start()

    def after_pass(self) -> Verdict:
        stall, share = self.beat.stop(), self.load.share()
        fields = {"foreign_share": share, "stall_s": stall, "max_stall_s": MAX_STALL_S}
        if stall > MAX_STALL_S:
            return Verdict(True, f"the machine stood still for {stall:.0f} s during the pass", fields)
        if share is not None and share > self.max_share:
            return Verdict(True, f"{share:.0%} of the machine's CPU went to other work during the pass "
                                 f"(> {self.max_share:.0%})", fields)
        return Verdict(False, "", fields)
