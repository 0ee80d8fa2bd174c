"""A server on a machine whose fixture cache is empty: the launcher builds the fixtures, then serves.

The launcher must not build them itself: a build runs tensor ops, which start torch's OpenMP pool,
and on CPU the launcher forks its scheduler (``cpu_backend/seams/start_method.py``), whose first parallel
op then hangs. Before ``launch_server.resolve_fixtures`` built them in a child process, this start
stopped at "Load weight begin" until the timeout (EAGLE with a freshly trained head).
The pool's servers cannot show it: the fixture tests build every fixture before the server phase.
"""

import os

import pytest
import requests

from sglang_asd.testing.server import LaunchedServer
from tests.conftest import CONFIGS
from tests.server_utils import SERVER_DEFAULTS

pytestmark = pytest.mark.server


def test_a_server_builds_its_fixtures_in_a_child_and_serves(tmp_path):
    env = dict(os.environ, SGLANG_ASD_CACHE=str(tmp_path / "cache"), PYTHONUNBUFFERED="1")
    log = tmp_path / "server.log"
    # 240 s: a few times a normal start with its fixture builds; the hang never serves
    with LaunchedServer([*SERVER_DEFAULTS, *CONFIGS["eagle"]], log, timeout=240, env=env) as url:
        body = {"text": "Once upon a time", "sampling_params": {"temperature": 0, "max_new_tokens": 8}}
        r = requests.post(url + "/generate", json=body, timeout=120)
        assert r.status_code == 200 and len(r.json()["output_ids"]) == 8
    text = log.read_text()
    assert "sglang_asd: building fixture(s) tiny-eagle-noisy, tiny-llama" in text
    assert (tmp_path / "cache" / "models" / "tiny-eagle-noisy" / "fixture.json").is_file()
