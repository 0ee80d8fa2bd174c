"""Tests of the project's lab (``scripts/lab/``): its scripts import as top-level modules, as
``python scripts/lab/X.py`` runs them; the fake server is tests/bench's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "scripts" / "lab"), str(ROOT / "tests" / "bench")]

from fake_server import FakeServer  # noqa: E402


@pytest.fixture(scope="session")
def fake_server_url():
    with FakeServer() as url:
        yield url
