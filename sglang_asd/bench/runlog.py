"""Resumable runs: an append-only JSONL log of what a long benchmark has completed.

Line 1 is a header ``{"kind": "<tool>-log", "fingerprint": {...}, "created": ...}``; every
later line is a record with its own ``kind``: a ``plan`` (what one invocation asked for) or one
completed unit of work (a speed ``pass``, an audit ``item``), written and flushed to disk as soon
as it completes. A run that stops (killed, machine gone) loses at most the units in
flight; ``--resume`` reopens the log, checks that the stored fingerprint (model, server, arms,
prompts, lengths, ...) equals the current one, and the tool skips the units already there.
A partial last line (a kill in the middle of a write) is dropped when the log is reopened.

Reports are always built from the log, so a report of a stopped run shows what is complete
and says how much that is.

Published logs are gzipped. A run's live log is plain ``NAME.jsonl``, appended to; the copy a
project commits (``docs/measurements/publish.sh``) is ``NAME.jsonl.gz``. Every reader here takes
either (``resolve``: the plain file when both exist, since it is the live one), and ``--resume``
on a folder holding only ``NAME.jsonl.gz`` first writes it out as the live ``NAME.jsonl`` and
appends there, leaving the ``.gz`` as it was. ``read_text`` does the same for any published file
(a report over a megabyte is published gzipped too).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional


class RunLogError(ValueError):
    """A log that cannot be used as asked (exists without --resume, other run, unreadable)."""


DESCRIBE_CHARS = 160


def _describe(stored: Any, current: Any) -> str:
    """``stored X, now Y`` of two differing values as JSON, each cut to DESCRIBE_CHARS around where
    the two texts first differ (two long launch lines that share their first 160 characters would
    otherwise read the same)."""
    a, b = (json.dumps(v, sort_keys=True, default=str) for v in (stored, current))
    if max(len(a), len(b)) <= DESCRIBE_CHARS:
        return f"stored {a}, now {b}"
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    start = max(0, first - DESCRIBE_CHARS // 4)

    def cut(text: str) -> str:
        end = start + DESCRIBE_CHARS
        return ("..." if start else "") + text[start:end] + ("..." if end < len(text) else "")

    return f"stored {cut(a)}, now {cut(b)}"


def fingerprint_diff(stored: Mapping[str, Any], current: Mapping[str, Any], partial: bool = False) -> list[str]:
    """Human-readable differences (``key: stored X, now Y``, long values shown from near their first
    difference); with ``partial`` only the keys of ``current`` are compared (used before a server is
    up, when its part is not known yet)."""
    keys = list(current) if partial else sorted(set(stored) | set(current))
    norm = lambda v: json.loads(json.dumps(v, sort_keys=True, default=str))  # noqa: E731 (tuples == lists)
    return [f"{k}: {_describe(stored.get(k), current.get(k))}"
            for k in keys if norm(stored.get(k)) != norm(current.get(k))]


def gzipped(path: Path) -> Path:
    """``NAME`` -> ``NAME.gz``, the published form of ``NAME``."""
    path = Path(path)
    return path.with_name(path.name + ".gz")


def resolve(path: Path) -> Path:
    """The file that holds ``path``: itself when it exists, else its published ``.gz``, else
    ``path`` (so a caller's "not found" names the plain name)."""
    path = Path(path)
    if not path.exists() and gzipped(path).exists():
        return gzipped(path)
    return path


def open_text(path: Path):
    """``path`` (or its ``.gz``, see ``resolve``) opened for reading text, decompressed."""
    path = resolve(path)
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open("r", encoding="utf-8")


def read_text(path: Path) -> str:
    with open_text(path) as f:
        return f.read()


def exists(path: Path) -> bool:
    """``path`` or its published ``.gz`` exists."""
    return resolve(path).exists()


def _holds_run(path: Path) -> bool:
    path = resolve(path)
    return path.exists() and path.stat().st_size > 0


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    with open_text(path) as f:
        for number, line in enumerate(f, 1):
            yield number, line


def read_log(path: Path, kind: str) -> tuple[dict, list[dict]]:
    """``(header, records)`` of a log (plain or published ``.gz``); a truncated last line is
    ignored, any other bad line is an error naming the file and line."""
    path = resolve(path)
    if not path.exists():
        raise RunLogError(f"no run log at {path}")
    header: Optional[dict] = None
    records: list[dict] = []
    lines = list(_lines(path))
    for number, line in lines:
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines) and not line.endswith("\n"):
                break  # the write a kill interrupted
            raise RunLogError(f"{path} line {number} is not JSON: {line[:80]!r}") from None
        if header is None:
            if obj.get("kind") != kind:
                raise RunLogError(f"{path} is not a {kind} (its first line says kind={obj.get('kind')!r})")
            header = obj
        else:
            records.append(obj)
    if header is None:
        raise RunLogError(f"{path} has no header line")
    return header, records


def logged_servers(records: list[dict]) -> dict:
    """``{"server": ..., "plain_server": ...}`` as the latest invocation that logged them saw them
    (its plan record's ``servers``: each server's full info, launch command and attention backend
    included, where the fingerprint keeps only what a resume must share); ``{}`` for logs written
    before plans carried them. ``--report-only`` reports these, as the run itself did."""
    for r in reversed(records):
        if r.get("kind") == "plan" and r.get("servers"):
            return r["servers"]
    return {}


class RunLog:
    """``RunLog.open(path, kind, fingerprint, resume)``; then ``append(record)`` per unit."""

    def __init__(self, path: Path, header: dict, records: list[dict]):
        self.path = Path(path)
        self.header = header
        self.records = records

    @classmethod
    def open(cls, path: Path, kind: str, fingerprint: Mapping[str, Any], resume: bool) -> "RunLog":
        """A new log (no file yet, or an empty one), or with ``resume`` the existing one, after
        checking its fingerprint. An existing log without ``resume`` is an error (never
        overwritten: it may hold hours of measurements). A published ``path.gz`` alone is resumed
        by writing it out as ``path``, the live log the run appends to."""
        path = Path(path)
        if _holds_run(path):
            if not resume:
                raise RunLogError(f"{resolve(path)} already holds a run; pass --resume to continue it, "
                                  "or choose another --out")
            header, records = read_log(path, kind)
            diff = fingerprint_diff(header.get("fingerprint", {}), fingerprint)
            if diff:
                raise RunLogError(f"--resume: {path} was made by a different run configuration; differences: "
                                  + "; ".join(diff))
            if not path.exists():
                _unpublish(gzipped(path), path)
            _drop_partial_line(path)
            return cls(path, header, records)
        path.parent.mkdir(parents=True, exist_ok=True)
        header = {"kind": kind, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "fingerprint": dict(fingerprint)}
        log = cls(path, header, [])
        log._write(header)
        return log

    @staticmethod
    def precheck(path: Path, kind: str, fingerprint: Mapping[str, Any], resume: bool) -> None:
        """Fail fast, before a server is started, on what is already known to differ."""
        path = Path(path)
        if not _holds_run(path):
            return
        if not resume:
            raise RunLogError(f"{resolve(path)} already holds a run; pass --resume to continue it, "
                              "or choose another --out")
        header, _ = read_log(path, kind)
        diff = fingerprint_diff(header.get("fingerprint", {}), fingerprint, partial=True)
        if diff:
            raise RunLogError(f"--resume: {path} was made by a different run configuration; differences: "
                              + "; ".join(diff))

    def append(self, record: dict) -> None:
        """Write one completed unit and push it to disk before returning."""
        self._write(record)
        self.records.append(record)

    def _write(self, obj: dict) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(obj, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())


def _unpublish(published: Path, live: Path) -> None:
    """Write the published ``published`` (gzipped) out as the live log ``live``, atomically."""
    partial = live.with_name(live.name + ".partial")
    with gzip.open(published, "rb") as src, partial.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    os.replace(partial, live)


def _drop_partial_line(path: Path) -> None:
    """Cut an unterminated last line (an interrupted write) so the next append starts clean."""
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with path.open("r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)
