"""``python -m sglang_asd.launch_server <any sglang server args> [--asd-...]``

Starts a real SGLang server whose speculative verify step uses ASD. Every SGLang argument is
passed through unchanged (including ``--config file.yaml``, whose ``asd-*`` keys are read here).
With no ``--model-path`` it serves the embedded CPU demo (SmolLM2-135M-Instruct with SGLang's
n-gram speculative decoding), built offline on first use.
"""

from __future__ import annotations

# Must run before anything imports SGLang, in the launcher and in every spawned child (each child
# imports this module as ``__mp_main__`` before it unpickles its target).
from sglang_asd.sglang_seams.process import prepare_process

prepare_process()

import argparse  # noqa: E402
import functools  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from typing import Optional  # noqa: E402

from sglang_asd import server_settings  # noqa: E402

logger = logging.getLogger("sglang_asd.launch_server")


class LaunchError(SystemExit):
    """A start-up problem the user can fix: printed as one line, exit status 2."""

    def __init__(self, message: str):
        super().__init__(2)
        self.message = message


def _flag_value(argv: list[str], flag: str) -> str | None:
    """The value ``flag`` takes: its last occurrence, as argparse reads it (``--config`` expands the
    file's keys ahead of the command line's flags, which override them)."""
    value = None
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def _has_flag(argv: list[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in argv)


def _merge_config(argv: list[str]) -> list[str]:
    """Expand ``--config file.yaml`` with a parser that knows SGLang's and our flags."""
    if "--config" not in argv:
        return argv
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger

    parser = argparse.ArgumentParser(prog="sglang_asd.launch_server")
    ServerArgs.add_cli_args(parser)
    server_settings.add_cli_args(parser)
    return ConfigArgumentMerger(parser).merge_config_with_args(argv)


def demo_args() -> list[str]:
    """The embedded default: real weights a newcomer can read, speculative decoding on.

    SGLang's NGRAM drafts (its defaults: 12 draft tokens, trees up to 10 wide) cost no draft
    forward, which is what lets speculation beat plain decoding of the same model on a CPU: a model
    draft of this 135M target costs as much as the target (docs/measurements/issue12/NOTES.md, the SmolLM2 self-draft demo;
    ``server_configs/cpu_demo.yaml`` keeps that STANDALONE self-draft)."""
    return ["--model-path", "fixture:smollm2-135m", "--speculative-algorithm", "NGRAM"]


FIXTURE_PREFIX = "fixture:"
PATH_FLAGS = ("--model-path", "--model", "--speculative-draft-model-path", "--tokenizer-path")


def resolve_fixtures(argv: list[str]) -> list[str]:
    """Replace ``fixture:NAME`` path values with the offline fixture's directory.

    Fixtures not yet built are built first, in a child process (``python -m sglang_asd.fixtures
    build``): a build runs tensor ops, which start torch's OpenMP thread pool, and on CPU the
    launcher forks its scheduler (``cpu_backend/seams/start_method.py``); a libgomp pool does not survive a
    fork, and the forked scheduler hung in its first parallel op (RoPE's cache, at "Load weight
    begin") when the launcher had built the fixtures itself, on a machine without a cache."""
    out = list(argv)
    places: list[tuple[int, str, str]] = []  # (argv index, prefix to keep, fixture name)
    for i, arg in enumerate(out):
        for flag in PATH_FLAGS:
            if arg == flag and i + 1 < len(out) and out[i + 1].startswith(FIXTURE_PREFIX):
                places.append((i + 1, "", out[i + 1][len(FIXTURE_PREFIX):]))
            elif arg.startswith(flag + "=" + FIXTURE_PREFIX):
                places.append((i, flag + "=", arg.split("=", 1)[1][len(FIXTURE_PREFIX):]))
    if not places:
        return out
    from sglang_asd import fixtures

    for name in {name for _, _, name in places}:
        if name not in fixtures.FIXTURES:
            raise LaunchError(f"unknown fixture {FIXTURE_PREFIX}{name}; known: {', '.join(fixtures.FIXTURES)}")
    missing = sorted({name for _, _, name in places if not fixtures.is_built(name)})
    if missing:
        print(f"sglang_asd: building fixture(s) {', '.join(missing)} (once; cached under "
              f"{fixtures.cache_root()}/models)", file=sys.stderr, flush=True)
        done = subprocess.run([sys.executable, "-m", "sglang_asd.fixtures", "build", *missing])
        if done.returncode != 0:
            raise LaunchError(f"building fixture(s) {', '.join(missing)} failed (exit status {done.returncode}); "
                              "see the output above")
    for i, prefix, name in places:
        out[i] = prefix + str(fixtures.fixture_path(name))
    return out


def cpu_defaults(argv: list[str]) -> list[str]:
    """Working defaults on a CPU-only machine, for flags the user did not set."""
    extra: list[str] = []
    if not _has_flag(argv, "--device"):
        extra += ["--device", "cpu"]
    if not _has_flag(argv, "--attention-backend"):
        extra += ["--attention-backend", "intel_amx"]
    if not _has_flag(argv, "--mem-fraction-static"):
        extra += ["--mem-fraction-static", "0.3"]
    if not _has_flag(argv, "--max-running-requests"):
        extra += ["--max-running-requests", "64"]
    if not _has_flag(argv, "--max-total-tokens"):  # a KV pool sized for CPU serving starts in seconds
        extra += ["--max-total-tokens", "65536"]
    if not _has_flag(argv, "--dtype"):  # SGLang's "auto" serves fp32 checkpoints in fp16, slow on CPUs
        extra += ["--dtype", "bfloat16"]
    if not _has_flag(argv, "--sleep-on-idle"):  # an idle scheduler otherwise polls at ~1/3 of a core
        extra += ["--sleep-on-idle"]
    if _flag_value(argv, "--disaggregation-mode") == "decode" and not _has_flag(
            argv, "--disaggregation-decode-retraction-backup"):  # SGLang's host_pool registers CUDA host memory
        extra += ["--disaggregation-decode-retraction-backup", "cpu_tensor"]
    return argv + extra


THREADS_BIND_ENV = "SGLANG_CPU_OMP_THREADS_BIND"  # SGLang's: one "|"-separated group of cores per rank
RANK_FLAGS = (("--tp-size", "--tensor-parallel-size"), ("--pp-size", "--pipeline-parallel-size"),
              ("--dp-size", "--data-parallel-size"))


def cpu_threads_bind(argv: list[str]) -> str | None:
    """The ``SGLANG_CPU_OMP_THREADS_BIND`` a CPU server with more ranks than NUMA nodes needs, or None.

    SGLang's CPU path gives each rank (``tp * pp * dp`` scheduler processes) one NUMA node unless
    that variable lists each rank's cores, and stops at start-up when there are more ranks than
    nodes (one node, e.g. a laptop or a small VM, and ``--tp-size 2``). Unset, and with more ranks
    than nodes, this splits the cores this process may run on into one contiguous group per rank
    ("0|1" for two ranks on two cores; the stand-in binds each rank's threads to its group:
    ``cpu_backend/seams/tensor_parallel.py``). Refuses, in one line, fewer cores than ranks. None
    where the user set the variable, where one rank runs, or where SGLang's own default (one node per
    rank) applies."""
    if os.environ.get(THREADS_BIND_ENV, "").strip():
        return None
    sizes = []
    for flags in RANK_FLAGS:
        value = next((v for v in (_flag_value(argv, f) for f in flags) if v is not None), "1")
        try:
            sizes.append(int(value))
        except ValueError:
            return None  # SGLang's parser says so
    ranks = sizes[0] * sizes[1] * sizes[2]
    if ranks <= 1:
        return None
    from sglang.srt.utils.common import get_cpu_ids_by_node

    if ranks <= len(get_cpu_ids_by_node()):
        return None
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < ranks:
        raise LaunchError(f"--tp-size {sizes[0]} (with --pp-size {sizes[1]}, --dp-size {sizes[2]}) starts {ranks} "
                          f"ranks, but this process may run on {len(cores)} CPU core(s): one core per rank is the "
                          f"least; set {THREADS_BIND_ENV} (one group of cores per rank, '|'-separated) to share them")
    per = len(cores) // ranks
    return "|".join(",".join(map(str, cores[i * per:(i + 1) * per])) for i in range(ranks))


def bind_cpu_ranks(argv: list[str], prog: str) -> None:
    """Set ``SGLANG_CPU_OMP_THREADS_BIND`` for the children when ``cpu_threads_bind`` says it is
    needed, and say so on stderr (the launchers, on CPU, before any child starts)."""
    bind = cpu_threads_bind(argv)
    if bind is not None:
        os.environ[THREADS_BIND_ENV] = bind
        print(f"{prog}: {THREADS_BIND_ENV}={bind} (one group of cores per rank; set it to choose)",
              file=sys.stderr, flush=True)


# Algorithms that draft an EAGLE tree (``--speculative-eagle-topk`` branches per step) and verify it in
# ``run_eagle_verify`` (NEXTN is SGLang's alias of EAGLE).
EAGLE_TREE_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")


def check_draft_tree(argv: list[str]) -> None:
    """Refuse, in one line, the EAGLE tree shapes SGLang 0.5.23 starts with but cannot serve: its
    warm-up request (or, without it, the first request) fails inside the scheduler, stock or ASD.

    With ``--speculative-eagle-topk`` > 1 (a tree; topk 1 makes SGLang set the draft tokens to
    steps + 1 itself), ``--speculative-num-draft-tokens`` W must lie in [steps + 1, 1 + topk +
    (steps - 1) * topk^2]: the verify's accepted path (steps + 1 slots) is moved to the front of the
    request's W slots (``eagle_worker_common._compact_accept_to_front``), and the W - 1 draft nodes
    are the best of the topk + (steps - 1) * topk^2 the draft scored (``eagle_utils.
    organize_draft_results``: ``torch.topk``). A topk above W - 1 is fine (the root keeps W - 1
    of its topk children). Flags left to SGLang (it chooses consistent values) are not checked."""
    if (_flag_value(argv, "--speculative-algorithm") or "").upper() not in EAGLE_TREE_ALGORITHMS:
        return
    try:
        steps, topk, draft = (int(_flag_value(argv, flag)) for flag in (
            "--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens"))
    except (TypeError, ValueError):  # not given (SGLang chooses) or not an integer (SGLang's parser says so)
        return
    if topk <= 1 or steps < 1:
        return
    if draft < steps + 1:
        raise LaunchError(f"--speculative-num-draft-tokens {draft} is below --speculative-num-steps + 1 = {steps + 1}: "
                          f"SGLang's verify of an EAGLE tree (--speculative-eagle-topk {topk}) fails on paths longer "
                          "than the draft tokens; raise the draft tokens or lower the steps")
    most = 1 + topk + (steps - 1) * topk * topk
    if draft > most:
        raise LaunchError(f"--speculative-num-draft-tokens {draft} is more than an EAGLE tree of "
                          f"--speculative-num-steps {steps} and --speculative-eagle-topk {topk} holds "
                          f"(1 + topk + (steps - 1) * topk^2 = {most}): SGLang's draft fails choosing them; "
                          "lower the draft tokens or raise the steps or topk")


def check_cpu_sampler(argv: list[str], cpu_sampling: bool) -> None:
    """On the CPU stand-in with SGLang's sampling verify served (``SGLANG_ASD_CPU_SAMPLING`` on),
    refuse ``--speculative-use-rejection-sampling`` in one line: SGLang verifies a batch holding a
    sampled request with its Triton rejection sampler (``chain_speculative_sampling_triton``), and
    Triton has no CPU driver, so the first sampled request would take the scheduler down."""
    if cpu_sampling and _has_flag(argv, "--speculative-use-rejection-sampling"):
        raise LaunchError("--speculative-use-rejection-sampling is not served on CPU: SGLang's rejection sampler is a "
                          "Triton kernel and the CPU has no Triton driver (SGLANG_ASD_CPU_SAMPLING=off verifies "
                          "sampled requests greedily instead)")


def check_start(argv: list[str], asd_requested: bool = False) -> None:
    """Fail fast, in one line, on the mistakes a user makes most, on draft shapes SGLang cannot serve
    (``check_draft_tree``) and on modes ASD cannot serve."""
    if asd_requested:
        from sglang_asd.sglang_seams.modes import why_unsupported

        why = why_unsupported(_flag_value(argv, "--speculative-algorithm"), _flag_value(argv, "--disaggregation-mode"),
                              _flag_value(argv, "--speculative-eagle-topk"))
        if why is not None:
            raise LaunchError(why + " (README: support matrix)")
    check_draft_tree(argv)
    for flag in ("--model-path", "--speculative-draft-model-path"):
        path = _flag_value(argv, flag)
        # Local paths only: "org/name" is a hub id, which SGLang resolves itself.
        if path is not None and path.startswith((".", "/", "~")) and not os.path.exists(os.path.expanduser(path)):
            raise LaunchError(f"{flag} {path!r} does not exist")
    host = _flag_value(argv, "--host") or "127.0.0.1"
    port = int(_flag_value(argv, "--port") or 30000)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            raise LaunchError(f"--port {port} on {host} is not free ({e.strerror}); pick another with --port")


def check_scope(scope, argv: list[str]) -> None:
    """Refuse in one line a server scope (``--asd-scope``, ``--asd-strict-spans``) that does not resolve
    against the served model: ``reasoning`` without ``--reasoning-parser``, or a marker (a span's, or
    the reasoning parser's think tokens) that is not a single token of the served tokenizer. The
    scheduler checks the same at start-up (``scheduler.init_model_worker_around``) and stops the
    server; here it is one line before SGLang starts. ``--reasoning-parser auto`` is checked once
    SGLang's arguments are parsed (``check_scope_auto``). Left to the scheduler's check: a tokenizer
    that transformers cannot load here (a hub id off line, a custom loader); an unknown parser name is
    SGLang's own one-line argument error."""
    if scope.unscoped:
        return
    parser = _flag_value(argv, "--reasoning-parser")
    if parser is not None and parser.lower() == "auto":
        return
    if scope.scope == "reasoning" and not parser:
        raise LaunchError("--asd-scope reasoning needs --reasoning-parser (the reasoning span's think tokens "
                          "come from SGLang's reasoning parser for the served model)")
    _check_markers(scope, argv, parser)


def check_scope_auto(scope, argv: list[str], server_args) -> None:
    """``check_scope`` for ``--reasoning-parser auto``, with the parser SGLang will resolve it to
    (``scope_vocab.resolve_reasoning_parser``: its own resolution, on a copy of ``server_args``)."""
    parser = _flag_value(argv, "--reasoning-parser")
    if scope.unscoped or parser is None or parser.lower() != "auto":
        return
    from sglang_asd.sglang_seams.state.scope_vocab import resolve_reasoning_parser

    resolved = resolve_reasoning_parser(server_args)
    if scope.scope == "reasoning" and not resolved:
        raise LaunchError("--asd-scope reasoning needs a reasoning parser, and --reasoning-parser auto detects none "
                          "for the served model (name one: --reasoning-parser NAME)")
    _check_markers(scope, argv, resolved)


def _check_markers(scope, argv: list[str], parser: Optional[str]) -> None:
    """The scope's markers against the served tokenizer and ``parser``'s think tokens (one line)."""
    if parser is not None:
        from sglang.srt.parser.reasoning_parser import ReasoningParser

        if parser.lower() not in ReasoningParser.DetectorMap:
            return
    tokenizer = None
    if not _has_flag(argv, "--skip-tokenizer-init"):
        path = _flag_value(argv, "--tokenizer-path") or _flag_value(argv, "--model-path")
        path = path or _flag_value(argv, "--model")
        try:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=_has_flag(argv, "--trust-remote-code"))
        except Exception as e:  # noqa: BLE001 - the scheduler's check still refuses
            logger.info("scope markers not checked before start (tokenizer %r: %s); the scheduler checks them", path, e)
            return
    from sglang_asd.sglang_seams.state.scope_vocab import ScopeVocab

    try:
        ScopeVocab(tokenizer, parser).markers(scope)
    except ValueError as e:
        raise LaunchError(f"--asd-scope / --asd-strict-spans: {e}") from None


def check_scope_mixing(scope, server_args) -> None:
    """Refuse in one line a server scope with markers (``--asd-scope reasoning``, ``--asd-strict-spans``) on
    a server that mixes prefill and decode steps (``--enable-mixed-chunk`` as SGLang resolved it, with
    chunked prefill on): those steps decode outside the verify step, where a marker goes unseen
    (``state/scope_vocab.py``; ``mixes_decode`` asks SGLang's algorithm predicate, since SGLang turns
    mixing off only at launch for the algorithms that cannot mix: STANDALONE, NGRAM, ...)."""
    from sglang_asd.sglang_seams.state.scope_vocab import mixes_decode

    if mixes_decode(server_args) and (scope.scope == "reasoning" or scope.strict_spans):
        raise LaunchError("--asd-scope reasoning / --asd-strict-spans need a server without mixed chunked "
                          "prefill: --enable-mixed-chunk decodes tokens outside the verify step, where a marker "
                          "would go unseen (drop --enable-mixed-chunk, or keep only --asd-strict-prefix)")


def asks_for_asd(argv: list[str]) -> bool:
    """True if the command line (after ``--config`` expansion) sets any ``--asd-*`` flag."""
    return any(a.startswith(("--asd-", "--asd_")) for a in _merge_config(list(argv)))


def build_argv(argv: list[str]) -> tuple[server_settings.ASDServerSettings, list[str]]:
    argv = _merge_config(list(argv))
    if not (_has_flag(argv, "--model-path") or _has_flag(argv, "--model")):
        argv = demo_args() + argv  # the user's own flags come later and win
    settings, rest = server_settings.split_argv(argv)
    from sglang_asd import cpu_backend

    if cpu_backend.is_installed():
        from sglang_asd.cpu_backend import env

        env.check_cpu_switches()  # a bad CPU switch is one line here, not a scheduler traceback
        check_cpu_sampler(rest, env.cpu_sampling())
        rest = cpu_defaults(rest)
    return settings, resolve_fixtures(rest)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if "-h" in argv or "--help" in argv:
        from sglang.srt.server_args import ServerArgs

        parser = argparse.ArgumentParser(prog="python -m sglang_asd.launch_server")
        ServerArgs.add_cli_args(parser)
        server_settings.add_cli_args(parser)
        parser.print_help()
        return
    try:
        settings, sglang_argv = build_argv(argv)
        check_start(sglang_argv, asd_requested=asks_for_asd(argv))
        check_scope(settings.scope, sglang_argv)
        from sglang_asd import cpu_backend

        if cpu_backend.is_installed():
            bind_cpu_ranks(sglang_argv, "sglang_asd.launch_server")
    except LaunchError as e:
        print(f"sglang_asd.launch_server: error: {e.message}", file=sys.stderr)
        raise
    except ValueError as e:
        print(f"sglang_asd.launch_server: error: {e}", file=sys.stderr)
        raise SystemExit(2)

    from sglang.srt.plugins import load_plugins
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.utils import kill_process_tree

    from sglang_asd import sglang_seams
    from sglang_asd.sglang_seams.process import run_scheduler_process

    try:
        sglang_seams.install_frontend_hooks(settings)
    except sglang_seams.HookNotInstalled as e:
        print(f"sglang_asd.launch_server: error: {e}", file=sys.stderr)
        raise SystemExit(2)
    load_plugins()
    server_args = prepare_server_args(sglang_argv)
    try:
        check_scope_auto(settings.scope, sglang_argv, server_args)
        check_scope_mixing(settings.scope, server_args)
    except LaunchError as e:
        print(f"sglang_asd.launch_server: error: {e.message}", file=sys.stderr)
        raise
    logger.info("ASD settings: %s", settings.to_dict())
    try:
        from sglang.srt.entrypoints.http_server import launch_server

        launch_server(
            server_args,
            run_scheduler_process_func=functools.partial(run_scheduler_process, settings),
        )
    finally:
        kill_process_tree(os.getpid(), include_parent=False)


if __name__ == "__main__":
    main()
