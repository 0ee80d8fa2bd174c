"""Shared test fixtures. Real SGLang servers on CPU (float32), started once per configuration and reused.

At most ``MAX_ALIVE`` servers run at once (2 cores, 24 GB; a tiny-model server holds ~3 GB and sleeps when idle):
the least recently used one is stopped to start another. ASD servers always export metrics.
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
    "standalone_fix": ["--model-path", "fixture:tiny-llama", "--speculative-algorithm", "STANDALONE",
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

# sglang-asd flags of a configuration (the stock server of the same name runs without them).
ASD_ARGS = {
    "standalone_fix": ["--asd-standalone-draft-fix"],
    "standalone_self": ["--asd-standalone-draft-fix"],
}

MAX_ALIVE = 3

# Run order of the tests parametrized over ``algorithm`` (see pytest_collection_modifyitems); eagle
# last, so its server is still alive for the eagle-only tests that follow.
ALGORITHM_ORDER = ["standalone", "standalone_fix", "eagle_tree", "eagle3", "ngram", "eagle"]


def pytest_collection_modifyitems(config, items):
    """Run server tests that share servers next to each other, across modules.

    Server starts dominate the suite (about 35 s each on a 2-core AVX2 host) and the pool keeps only
    ``MAX_ALIVE`` servers. Two kinds of block:
    - tests parametrized over ``algorithm`` (test_asd_rules, test_asd_serving, test_identity,
      test_verify_warmup), ordered by ``ALGORITHM_ORDER``: each algorithm's stock and ASD servers start
      once, not once per module;
    - tests marked ``server_group(NAME)`` (one server configuration used by several modules).
    A block takes the place of its first member; every other test keeps its place, and within a group
    the collection order holds. Module-scoped fixtures of those modules are pool lookups (cheap on a
    live server) or session-scoped results, so leaving and re-entering a module costs nothing.
    """
    def group(item):
        if item.get_closest_marker("server") is None:
            return None
        spec = getattr(item, "callspec", None)
        algo = spec.params.get("algorithm") if spec is not None else None
        if algo in ALGORITHM_ORDER:
            return "algorithm", ALGORITHM_ORDER.index(algo)
        named = item.get_closest_marker("server_group")
        return (f"group:{named.args[0]}", 0) if named else None

    keys = [group(item) for item in items]
    blocks: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        if key is not None:
            blocks.setdefault(key[0], []).append(i)
    order = []
    for i, key in enumerate(keys):
        if key is None:
            order.append(i)
        elif blocks[key[0]][0] == i:  # the block's first member: the whole block goes here
            order += sorted(blocks[key[0]], key=lambda j: (keys[j][1], j))
    items[:] = [items[i] for i in order]


class ServerPool:
    def __init__(self):
        self.alive: dict[tuple, Server] = {}  # insertion order = recency

    def get(self, config: str, stock: bool = False, extra: tuple = (), overlap: bool = False) -> Server:
        """``overlap``: SGLang's overlap scheduler kept on for CPU speculative decoding (``tests/cpu_overlap.py``)."""
        key = (config, "stock" if stock else "asd", tuple(extra), overlap)
        server = self.alive.pop(key, None)
        if server is None:
            while len(self.alive) >= MAX_ALIVE:
                self.alive.pop(next(iter(self.alive))).stop()
            if overlap:
                module = "tests.overlap_stock_server" if stock else "tests.overlap_asd_server"
            else:
                module = "sglang_asd.stock_server" if stock else "sglang_asd.launch_server"
            args = list(CONFIGS[config]) + ([] if stock else ["--enable-metrics", *ASD_ARGS.get(config, ())])
            args += list(extra)
            server = Server(f"{config}-{key[1]}", args, module=module)
        self.alive[key] = server
        return server

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
    return servers.get("eagle").url
