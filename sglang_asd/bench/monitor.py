"""What a speed run may watch around each timed pass: the ``PassMonitor`` extension point.

``bench.speed`` runs without one (``NO_MONITOR``: no pass is ever disturbed). A monitor is given
to ``speed.run_cli(args, monitor=...)`` as a factory of the run's servers (``server.Targets``,
known once they are up), and each pass then goes:

    attempt 0 ..., monitor.redos:
        attempt > 0: monitor.before_redo()      # e.g. wait for the machine to be quiet again
        flush the server's cache (NGRAM servers), read its CPU time
        monitor.before_pass()                   # just before the timed pass
        run the pass
        verdict = monitor.after_pass()          # just after it
        log the pass with verdict.fields and ``disturbed`` = verdict.disturbed
        stop unless verdict.disturbed: print verdict.why, redo while attempts are left

A disturbed pass is left out of every ratio, and ``--resume`` runs it again. The project's own
monitor (host noise: foreign CPU share, a paused machine) is ``scripts/lab/quiet.py``.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol


@dataclasses.dataclass(frozen=True)
class Verdict:
    """A monitor's word on one pass: ``disturbed`` (left out, redone), ``why`` (printed when
    disturbed), ``fields`` (logged with the pass, e.g. what was measured)."""

    disturbed: bool = False
    why: str = ""
    fields: dict = dataclasses.field(default_factory=dict)


class PassMonitor(Protocol):
    redos: int  # how many times a disturbed pass runs again before it is kept, marked disturbed

    def before_redo(self) -> None: ...

    def before_pass(self) -> None: ...

    def after_pass(self) -> Verdict: ...


class NoMonitor:
    """Watches nothing: every pass is undisturbed, none is redone."""

    redos = 0

    def before_redo(self) -> None:
        pass

    def before_pass(self) -> None:
        pass

    def after_pass(self) -> Verdict:
        return Verdict()


NO_MONITOR = NoMonitor()
