"""A benchmark run killed mid-write, for the resume tests of bench.speed and bench.audit."""

from __future__ import annotations

import pytest


def kill_mid_write(monkeypatch, runlog_cls, kind: str, after: int, torn_line: str, main, argv: list[str]) -> None:
    """Run ``main(argv)`` until ``after`` records of ``kind`` are logged; the next record's line is cut
    short (``torn_line``, no newline) as by a process killed while writing, and the run stops there."""
    real_append = runlog_cls.append

    def dying_append(self, record):
        if record.get("kind") == kind and len([r for r in self.records if r.get("kind") == kind]) == after:
            with self.path.open("a") as f:
                f.write(torn_line)
            raise KeyboardInterrupt
        real_append(self, record)

    monkeypatch.setattr(runlog_cls, "append", dying_append)
    with pytest.raises(KeyboardInterrupt):
        main(argv)
    monkeypatch.setattr(runlog_cls, "append", real_append)
