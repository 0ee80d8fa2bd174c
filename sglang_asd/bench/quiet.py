"""Other load on the machine during a timed pass.

A 2-core CPU host is shared: a test run, a compile or a second benchmark beside a speed pass takes
cores from the servers under test and moves that pass's tok/s by more than the effect being measured
(a pytest collection of ~20 s took 6% off a 3-minute pass). When ``bench.speed`` launched every
server itself, it can tell: the machine's busy CPU time (``/proc/stat``) minus what its own client
and servers used (``/proc/PID/stat`` of their process groups) is CPU that went elsewhere. Its share
of the machine over a pass (``foreign share`` = foreign CPU-s / (wall s x cores)) is logged with the
pass; a pass above ``--max-foreign-share`` is marked disturbed and redone once the machine is quiet.

A machine can also stop: a virtual machine the host pauses keeps its clock running, so a pass
across the pause counts it as decode time, and the foreign share cannot see it (nothing is busy while
the guest is stopped; the share even drops). ``Heartbeat`` measures that from inside: a thread that
wakes every second, whose longest gap between wake-ups is logged with the pass (``stall_s``); a gap
above ``MAX_STALL_S`` marks the pass disturbed too.

Against servers given by URL nothing can be attributed (the servers' CPU would count as foreign),
so no check is made there. Kernel threads and daemons (e.g. ``kdamond``) show up as a small foreign
floor, a few tenths of a per cent to a few per cent.
"""

from __future__ import annotations

import os
import platform
import sys
import threading
import time
from typing import Callable, Optional

DEFAULT_MAX_SHARE = 0.05
# A 1 s heartbeat woke at most 3.6 ms late at nice 19 during a Qwen speed pass on this 2-core host
# (60 wake-ups, load average 1.8): a gap of 30 s is no scheduling delay.
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


def machine() -> dict:
    """The machine a pass ran on. ``id`` (host name and boot id) changes with every boot, so a run
    resumed in a later session on a freshly started machine, even of the same type, gets a new one:
    one CPU host here streamed weights 1.7x faster than another of the same model name (the demo's
    plain arm, 8.4 against 4.9 tok/s), so a ratio must never pair passes of two machines."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()[:8]
    except OSError:
        boot = "?"
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {"id": f"{platform.node()}/{boot}", "cpu": cpu, "cpus": os.cpu_count()}


def own_process_s() -> float:
    """CPU seconds of this process (all its threads: the benchmark client)."""
    t = os.times()
    return t.user + t.system


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

    def wait_quiet(self, max_share: float, window_s: float = 10.0, max_wait_s: float = 1800.0,
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
