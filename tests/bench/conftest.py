"""Fixtures of the benchmark-tool tests. ``fake_server_url`` serves SGLang-shaped responses from a
thread (see fake_server.py); the real-server tests use ``asd_server_url`` from tests/conftest.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fake_server import FakeServer  # noqa: E402


@pytest.fixture(scope="session")
def fake_server_url():
    with FakeServer() as url:
        yield url
