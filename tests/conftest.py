"""Shared test fixtures. Real SGLang servers on CPU (float32), started once per configuration and reused.

At most ``MAX_ALIVE`` servers run at once (2 cores, 24 GB; a tiny-model server holds ~3 GB and sleeps when idle):
the least recently used one is stopped to start another. ASD servers always export metrics.
"""

from __future__ import annotations

import os
import tempfile
from typing import NamedTuple

import pytest

from tests.server_utils import PAGED_STREAMING, Server

SPEC_TINY = ["--speculative-num-steps", "3", "--speculative-num-draft-tokens", "4", "--speculative-eagle-topk", "1"]

DSPARK = ["--model-path", "fixture:tiny-llama-bigram", "--speculative-algorithm", "DSPARK",
          "--speculative-dspark-block-size", "3"]
DFLASH = ["--model-path", "fixture:tiny-llama-bigram", "--speculative-algorithm", "DFLASH",
          "--speculative-num-draft-tokens", "4"]

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
    # SGLang's own NGRAM defaults (12 draft tokens, breadth 10): a value SGLang resolves is None on
    # ServerArgs, so this server checks that the seams read the resolved settings (sglang_seams/modes.py).
    "ngram": ["--model-path", "fixture:tiny-llama", "--speculative-algorithm", "NGRAM"],
    # SGLang's block drafters on the bigram target (CPU seams: cpu_backend/seams/block_drafters.py); the noisy
    # drafts accept part of each block, the exact ones all of it. plain_bigram: their non-speculative reference.
    "plain_bigram": ["--model-path", "fixture:tiny-llama-bigram"],
    "dspark": [*DSPARK, "--speculative-draft-model-path", "fixture:tiny-dspark-noisy"],
    "dspark_exact": [*DSPARK, "--speculative-draft-model-path", "fixture:tiny-dspark-exact"],
    "dflash": [*DFLASH, "--speculative-draft-model-path", "fixture:tiny-dflash-noisy"],
    "dflash_exact": [*DFLASH, "--speculative-draft-model-path", "fixture:tiny-dflash-exact"],
    # the bigram with Qwen3's think and tool-call markers on its greedy path (sglang_asd/fixtures/tiny_think.py):
    # asd_scope "reasoning" and the tool_call span preset on a real tokenizer and reasoning parser, the
    # parser left to SGLang's detection (`auto`: a Qwen3-style chat template makes it qwen3), which the
    # seams must read as resolved, not as the "auto" the field keeps (state/scope_vocab.py)
    "think": ["--model-path", "fixture:tiny-llama-think", "--speculative-algorithm", "EAGLE",
              "--speculative-draft-model-path", "fixture:tiny-eagle-think", *SPEC_TINY, "--reasoning-parser", "auto",
              "--chat-template", os.path.join(os.path.dirname(__file__), "fixtures", "qwen3_think_template.jinja")],
    # bf16 (the CPU launcher's default dtype): linear layers with float32 accumulation (cpu_backend/seams/cpu_paths.py)
    "eagle_bf16": ["--model-path", "fixture:tiny-llama", "--speculative-algorithm", "EAGLE",
                   "--speculative-draft-model-path", "fixture:tiny-eagle-noisy", *SPEC_TINY, "--dtype", "bfloat16"],
    # tensor parallelism over two CPU ranks (gloo; cpu_backend/seams/tensor_parallel.py), one core each
    "eagle_tp2": ["--model-path", "fixture:tiny-llama", "--speculative-algorithm", "EAGLE",
                  "--speculative-draft-model-path", "fixture:tiny-eagle-noisy", *SPEC_TINY, "--tp-size", "2"],
}

# sglang-asd flags of a configuration (the stock server of the same name runs without them).
ASD_ARGS = {
    # margin and threshold ceilings above their defaults, so the rule tests (test_asd_rules) can trigger
    # exceptions with the tiny noisy draft on the same server as everything else on EAGLE
    "eagle": ["--asd-margin", "2", "--asd-threshold", "1"],
    "dspark": ["--asd-margin", "2", "--asd-threshold", "1"],
    "dflash": ["--asd-margin", "2", "--asd-threshold", "1"],
    "eagle_tp2": ["--asd-margin", "2", "--asd-threshold", "1"],
    "standalone_fix": ["--asd-standalone-draft-fix"],
    "standalone_self": ["--asd-standalone-draft-fix"],
}

# Environment of a configuration's servers (stock and ASD alike). With the CPU stand-in SGLang's children
# start by fork (cpu_backend/seams/start_method.py); the bf16 pair keeps SGLang's spawn, the path of every
# GPU install: a fresh child that must bootstrap itself and install and verify its hooks.
# The bf16 servers test the float32-accumulate path on every CPU (``auto`` would take torch's bf16
# kernel on one with bf16 instructions) and SGLang's spawn start.
# The TP pair: the ASD server's ranks trace every verify step and rank 1 perturbs its logits in batches SGLang
# verifies on its sampling branch (tests/tp_asd_server.py; the stock server ignores both).
TP_TRACE_DIR = tempfile.mkdtemp(prefix="sglang_asd_tp_trace_")
CONFIG_ENV = {"eagle_bf16": {"SGLANG_ASD_CPU_START_METHOD": "spawn", "SGLANG_ASD_CPU_GEMM": "fp32-accumulate"},
              "eagle_tp2": {"SGLANG_ASD_TEST_TP_TRACE": TP_TRACE_DIR, "SGLANG_ASD_TEST_PERTURB_RANK": "1"}}
# Test-only server modules of a configuration: (stock, ASD).
CONFIG_MODULES = {"eagle_tp2": ("sglang_asd.stock_server", "tests.tp_asd_server")}

# Every other drafter at TP 2 (tests/integration/test_tp_drafters_cpu.py): ``NAME_tp2`` is ``NAME`` with
# ``--tp-size 2``, its ASD server traced and perturbed as ``eagle_tp2``'s, each in a trace folder of its own.
TP_DRAFTERS = ("eagle_tree", "standalone", "ngram", "dspark", "dflash")
for _name in TP_DRAFTERS:
    _tp2 = f"{_name}_tp2"
    CONFIGS[_tp2] = [*CONFIGS[_name], "--tp-size", "2"]
    if _name in ASD_ARGS:
        ASD_ARGS[_tp2] = ASD_ARGS[_name]
    os.makedirs(os.path.join(TP_TRACE_DIR, _tp2))
    CONFIG_ENV[_tp2] = {"SGLANG_ASD_TEST_TP_TRACE": os.path.join(TP_TRACE_DIR, _tp2), "SGLANG_ASD_TEST_PERTURB_RANK": "1"}
    CONFIG_MODULES[_tp2] = CONFIG_MODULES["eagle_tp2"]
CPU_SAMPLING_ENV = "SGLANG_ASD_CPU_SAMPLING"  # cpu_backend/env.py (not imported here: it would import torch)

MAX_ALIVE = 3


class Want(NamedTuple):
    """One server of the pool: ``CONFIGS[config]``, stock SGLang or ASD, extra arguments, overlap on/off
    (SGLang's overlap scheduler kept on for CPU speculative decoding, ``tests/cpu_overlap.py``), sampling
    verify on/off (SGLang's sampling branch served on CPU: ``SGLANG_ASD_CPU_SAMPLING``,
    ``sglang_asd/cpu_backend/seams/sampling.py``; on, as a user's server runs by default)."""

    config: str
    stock: bool = False
    extra: tuple = ()
    overlap: bool = False
    sampling: bool = True

    def launch(self) -> tuple[str, tuple[str, ...], tuple[tuple[str, str], ...]]:
        """(module, arguments, environment): the pool's key, so two names for the same server share one
        process. The sampling switch is always set, so a value in the test process's environment never
        reaches a server that did not ask for it."""
        if self.overlap:
            module = "tests.overlap_stock_server" if self.stock else "tests.overlap_asd_server"
        else:
            stock, asd = CONFIG_MODULES.get(self.config, ("sglang_asd.stock_server", "sglang_asd.launch_server"))
            module = stock if self.stock else asd
        asd = [] if self.stock else ["--enable-metrics", *ASD_ARGS.get(self.config, ())]
        env = {**CONFIG_ENV.get(self.config, {}), CPU_SAMPLING_ENV: "on" if self.sampling else "off"}
        return module, (*CONFIGS[self.config], *asd, *self.extra), tuple(sorted(env.items()))

    @property
    def name(self) -> str:
        return (f"{self.config}{'-overlap' if self.overlap else ''}{'' if self.sampling else '-greedy-verify'}"
                f"-{'stock' if self.stock else 'asd'}")


# Servers a block of tests uses together (see pytest_collection_modifyitems): the pool starts them side
# by side when the block begins. Blocks over ``algorithm`` derive theirs from the ``stock_twin`` marker.
GROUP_SERVERS = {
    "paged_streaming": (Want("eagle", True, PAGED_STREAMING), Want("eagle", False, PAGED_STREAMING)),
    "overlap": (Want("eagle", overlap=True), Want("eagle", True, overlap=True)),
    "bf16": (Want("eagle_bf16", True), Want("eagle_bf16")),
    "tp": (Want("eagle_tp2", True), Want("eagle_tp2"), Want("eagle", True)),
    "think": (Want("think", overlap=True),),
}

# Run order of the tests parametrized over ``algorithm``; tests marked ``server_group(NAME)`` with NAME
# in this list join that algorithm's block. Eagle last: its servers stay alive for what follows.
ALGORITHM_ORDER = ["standalone", "standalone_fix", "eagle_tree", "eagle3", "ngram", "dspark", "dflash", "eagle"]
_BLOCK_SERVERS = pytest.StashKey[tuple]()


@pytest.hookimpl(trylast=True)  # after -k / -m deselection: a block starts at a test that runs
def pytest_collection_modifyitems(config, items):
    """Run server tests that share servers next to each other, across modules, and start each block's
    servers together.

    Server starts dominate the suite (most of a start is importing SGLang in the launchers; their
    children fork: cpu_backend/seams/start_method.py; figures in docs/BENCHMARKS.md) and the pool keeps only ``MAX_ALIVE`` servers.
    Two kinds of block:
    - tests parametrized over ``algorithm`` (test_asd_rules, test_asd_serving, test_identity,
      test_verify_warmup) and tests marked ``server_group(ALGORITHM)``, ordered by ``ALGORITHM_ORDER``:
      each algorithm's stock and ASD servers start once, not once per module;
    - tests marked ``server_group(NAME)`` (one server configuration used by several modules).
    A block takes the place of its first member; every other test keeps its place, and within a block
    the collection order holds, except that an algorithm's tests marked ``tp2_twin`` (which also use
    its TP 2 ASD server, ``ALGORITHM_tp2``, started on first use, not beside the block's: three
    starts at once can fail SGLang's start-up memory check) run first: that server is then the least
    recently used one, the first stopped when the block's other tests need room. Module-scoped fixtures of those modules are pool lookups (cheap on a
    live server) or session-scoped results, so leaving and re-entering a module costs nothing.

    The first test of each algorithm's part (and of each group in ``GROUP_SERVERS``) carries the
    servers that part uses; ``pytest_runtest_setup`` has the pool start the missing ones side by side,
    which overlaps one launcher's imports with another's on the two cores.
    """
    def group(item):
        if item.get_closest_marker("server") is None:
            return None
        spec = getattr(item, "callspec", None)
        algo = spec.params.get("algorithm") if spec is not None else None
        named = item.get_closest_marker("server_group")
        algo = algo if algo in ALGORITHM_ORDER else (named.args[0] if named else None)
        if algo in ALGORITHM_ORDER:
            return "algorithm", ALGORITHM_ORDER.index(algo)
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
            order += sorted(blocks[key[0]], key=lambda j: (keys[j][1], items[j].get_closest_marker("tp2_twin") is None, j))
    items[:] = [items[i] for i in order]

    first: dict[tuple, pytest.Item] = {}
    wants: dict[tuple, set] = {}
    for item, key in zip(items, [keys[i] for i in order]):
        if key is None:
            continue
        first.setdefault(key, item)
        if key[0] == "algorithm":
            algo = ALGORITHM_ORDER[key[1]]
            wants.setdefault(key, {Want(algo)})
            if item.get_closest_marker("stock_twin"):
                wants[key].add(Want(algo, stock=True))
        else:
            wants.setdefault(key, set(GROUP_SERVERS.get(key[0].removeprefix("group:"), ())))
    for key, item in first.items():
        if wants[key]:
            item.stash[_BLOCK_SERVERS] = tuple(sorted(wants[key]))


def pytest_runtest_setup(item):
    block = item.stash.get(_BLOCK_SERVERS, None)
    if block:
        POOL.start(block)


class ServerPool:
    def __init__(self):
        self.alive: dict[tuple, Server] = {}  # insertion order = recency; some may still be starting
        self.stopped: list[tuple[Server, int]] = []  # servers that had served, once stopped: exit status

    def get(self, config: str, stock: bool = False, extra: tuple = (), overlap: bool = False,
            sampling: bool = True) -> Server:
        """The server (started now, or by ``start``), once it serves."""
        want = Want(config, stock, tuple(extra), overlap, sampling)
        key = want.launch()
        server = self.alive.pop(key, None)
        if server is None:
            self._make_room(keep=())
            server = self._launch(want)
        self.alive[key] = server
        try:
            return server.ready()
        except BaseException:
            self.alive.pop(key, None)
            raise

    def start(self, wants) -> None:
        """Start the servers of ``wants`` that are not alive, side by side, without waiting for them."""
        keep = {want.launch() for want in wants}
        for want in wants:
            if want.launch() not in self.alive:
                self._make_room(keep)
                self.alive[want.launch()] = self._launch(want)

    def _launch(self, want: Want) -> Server:
        module, args, env = want.launch()
        return Server(want.name, list(args), module=module, wait=False, env=dict(env))

    def _make_room(self, keep) -> None:
        """Stop the least recently used servers not in ``keep`` until one more fits."""
        while len(self.alive) >= MAX_ALIVE:
            victim = next((k for k in self.alive if k not in keep), None)
            if victim is None:
                return
            self._stop(self.alive.pop(victim))

    def _stop(self, server: Server) -> None:
        code = server.stop()
        if server.started_s is not None:
            self.stopped.append((server, code))

    def stop_all(self):
        for server in self.alive.values():
            self._stop(server)
        self.alive.clear()


POOL = ServerPool()


def pytest_sessionfinish(session, exitstatus):
    POOL.stop_all()


def pytest_terminal_summary(terminalreporter):
    """Where phase 2's time goes: each pool server's start (seconds to serving), slowest first."""
    if not POOL.stopped:
        return
    starts = sorted(((s.started_s, s.name) for s, _ in POOL.stopped), reverse=True)
    terminalreporter.write_sep("-", f"{len(starts)} pool server starts, {sum(t for t, _ in starts):.0f} s to serving")
    for t, name in starts:
        terminalreporter.write_line(f"{t:7.1f} s  {name}")


@pytest.fixture(scope="session")
def servers():
    return POOL


@pytest.fixture(scope="session")
def asd_server_url(servers):
    """A running ASD server (tiny EAGLE chain) for load-test smoke runs."""
    return servers.get("eagle").url
