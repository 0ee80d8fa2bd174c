"""Shared test fixtures. Real SGLang servers on CPU (float32), started once per configuration and reused.

Only the servers of one configuration are alive at a time (2 cores, 24 GB): asking for another
configuration stops the previous ones. Each test module asks for the configurations it needs.
"""

from __future__ import annotations

import pytest

from tests.server_utils import Server

SPEC_TINY = ["--speculative-num-steps", "3", "--speculative-num-draft-tokens", "4", "--speculative-eagle-topk", "1"]

# name -> sglang arguments (fixture:NAME paths are built offline by sglang_asd.fixtures)
CONFIGS = {
    "plain": ["--model-path", "fixture:tiny-llama"],
    "standalone": ["--model-path", "fixture:tiny-llama", "--speculative-algorithm", "STANDALONE",
                   "--speculative-draft-model-path", "fixture:tiny-llama-bigram", *SPEC_TINY],
    "standalone_self": ["--model-path", "fixture:tiny-llama", "--speculative-algorithm", "STANDALONE",
                        "--speculative-draft-model-path", "fixture:tiny-llama", *SPEC_TINY],
    "eagle": ["--model-path", "fixture:tiny-llama", "--speculative-algorithm", "EAGLE",
              "--speculative-draft-model-path", "fixture:tiny-eagle-noisy", *SPEC_TINY],
    "eagle_tree": ["--model-path", "fixture:tiny-llama", "--speculative-algorithm", "EAGLE",
                   "--speculative-draft-model-path", "fixture:tiny-eagle-noisy", "--speculative-num-steps", "3",
                   "--speculative-num-draft-tokens", "6", "--speculative-eagle-topk", "2"],
    "eagle3": ["--model-path", "fixture:tiny-llama", "--speculative-algorithm", "EAGLE3",
               "--speculative-draft-model-path", "fixture:tiny-eagle3-noisy", *SPEC_TINY],
    "eagle_exact": ["--model-path", "fixture:tiny-llama-bigram", "--speculative-algorithm", "EAGLE",
                    "--speculative-draft-model-path", "fixture:tiny-eagle-exact", *SPEC_TINY],
    "ngram": ["--model-path", "fixture:tiny-llama", "--speculative-algorithm", "NGRAM",
              "--speculative-num-draft-tokens", "4"],
}


class ServerPool:
    def __init__(self):
        self.alive: dict[tuple[str, str], Server] = {}
        self.current: str | None = None

    def get(self, config: str, stock: bool = False, extra: tuple = ()) -> Server:
        group = config
        if self.current != group:
            self.stop_all()
            self.current = group
        key = (config, "stock" if stock else "asd", extra)
        if key not in self.alive:
            module = "sglang_asd.stock_server" if stock else "sglang_asd.launch_server"
            args = list(CONFIGS[config]) + list(extra)
            self.alive[key] = Server(f"{config}-{key[1]}", args, module=module)
        return self.alive[key]

    def stop_all(self):
        for server in self.alive.values():
            server.stop()
        self.alive.clear()


@pytest.fixture(scope="session")
def servers():
    pool = ServerPool()
    yield pool
    pool.stop_all()


@pytest.fixture(scope="session")
def asd_server_url(servers):
    """A running ASD server (tiny EAGLE chain) for load-test smoke runs."""
    return servers.get("eagle", extra=("--enable-metrics",)).url
