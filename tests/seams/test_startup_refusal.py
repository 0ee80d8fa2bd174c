"""A server whose hooks are not all in place refuses to start, with one clear line.

SGLang's HookRegistry only logs a hook that fails to apply; a server that then verified strictly
would mislead every client that sends a budget. ``tests/broken_hook_server.py`` breaks one hook of
each kind, the way SGLang would let it fail; the server must exit instead of serving.
"""

import concurrent.futures as cf
import os
import subprocess
import sys

import pytest

from sglang_asd.launch_server import resolve_fixtures

pytestmark = pytest.mark.server

CASES = {
    "frontend": "TokenizerManager.update_request_meta_info",
    "middleware": "request-field middleware is not installed",
    "scheduler": "sglang.srt.speculative.eagle_utils.eagle_sample",
    "binding": "sglang.srt.speculative.ngram_worker.eagle_sample",
}


def _launch(kind: str) -> subprocess.CompletedProcess:
    from sglang_asd.testing.server import free_port

    args = resolve_fixtures([
        "--model-path", "fixture:tiny-llama", "--speculative-algorithm", "EAGLE",
        "--speculative-draft-model-path", "fixture:tiny-eagle-noisy",
        "--speculative-num-steps", "3", "--speculative-num-draft-tokens", "4", "--speculative-eagle-topk", "1",
        # 0.8: SGLang's start-up memory check must not trip over the other launch (tests/server_utils.py)
        "--dtype", "float32", "--mem-fraction-static", "0.8", "--port", str(free_port("127.0.0.1"))])
    env = dict(os.environ, SGLANG_ASD_TEST_BREAK=kind)
    return subprocess.run([sys.executable, "-m", "tests.broken_hook_server", *args], capture_output=True, text=True,
                          timeout=600, env=env)


@pytest.fixture(scope="module")
def launches():
    """The four broken servers, two at a time: each launch is mostly SGLang's imports on one core."""
    with cf.ThreadPoolExecutor(max_workers=2) as pool:
        yield {kind: pool.submit(_launch, kind) for kind in CASES}


@pytest.mark.parametrize("kind", list(CASES))
def test_a_missing_hook_stops_the_server_with_one_line(kind, launches):
    r = launches[kind].result(timeout=900)
    assert r.returncode != 0, "the server must not start"
    lines = [line for line in r.stderr.splitlines() if "refusing to serve" in line]
    assert len(lines) == 1, r.stderr[-3000:]
    assert CASES[kind] in lines[0] and lines[0].startswith("sglang_asd")
    assert "Uvicorn running" not in r.stderr + r.stdout
