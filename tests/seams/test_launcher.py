"""The launcher: argument handling, defaults on CPU, one-line errors for common mistakes."""

import argparse
import pathlib
import socket
import subprocess
import sys

import pytest

from sglang_asd import launch_server as ls

CONFIGS = pathlib.Path(__file__).resolve().parents[2] / "server_configs"


def test_demo_when_no_model_and_asd_flags_split():
    settings, argv = ls.build_argv(["--asd-default-budget", "2", "--port", "1234"])
    assert settings.default_budget == 2.0
    assert argv[argv.index("--speculative-algorithm") + 1] == "NGRAM"  # no draft forward to pay for
    assert not any(a.startswith("fixture:") for a in argv)  # resolved to cache directories
    assert "--asd-default-budget" not in argv
    assert not settings.standalone_draft_fix  # STANDALONE only
    _, argv = ls.build_argv(["--speculative-algorithm", "STANDALONE", "--port", "1234"])
    last = max(i for i, a in enumerate(argv) if a == "--speculative-algorithm")
    assert argv[last + 1] == "STANDALONE"  # the user's own flags come later, and argparse keeps the last


def test_standalone_fix_is_off_unless_asked():
    settings, argv = ls.build_argv(["--model-path", "/m", "--speculative-algorithm", "STANDALONE"])
    assert not settings.standalone_draft_fix and "--asd-standalone-draft-fix" not in argv
    settings, _ = ls.build_argv(["--model-path", "/m", "--asd-standalone-draft-fix"])
    assert settings.standalone_draft_fix


def test_user_flags_win_over_cpu_defaults():
    out = ls.cpu_defaults(["--model-path", "m", "--attention-backend", "torch_native"])
    assert out.count("--attention-backend") == 1 and "torch_native" in out
    assert "--device" in out


def test_config_yaml_carries_asd_keys(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model-path: /some/model\nasd-default-budget: 3\nasd_gate: 0.1\nasd-standalone-draft-fix: true\n")
    settings, argv = ls.build_argv(["--config", str(cfg)])
    assert (settings.default_budget, settings.config.gate) == (3.0, 0.1)
    assert argv[argv.index("--model-path") + 1] == "/some/model"
    assert settings.standalone_draft_fix


@pytest.mark.parametrize("config", sorted(p.name for p in CONFIGS.glob("*.yaml")))
def test_shipped_configs_parse(config, monkeypatch):
    """Every file in server_configs/ gives valid ASD settings and a command line SGLang's own parser
    takes (fixtures are not built here: a ``fixture:`` path stays as written)."""
    from sglang.srt.server_args import ServerArgs

    monkeypatch.setattr(ls, "resolve_fixtures", lambda argv: argv)
    settings, argv = ls.build_argv(["--config", str(CONFIGS / config)])
    assert "--model-path" in argv and not any(a.startswith("--asd") for a in argv)
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    args = parser.parse_args(argv)
    assert args.speculative_algorithm, f"{config}: no speculative algorithm, so ASD never runs"
    assert settings.max_budget >= settings.default_budget


def _run(args):
    return subprocess.run([sys.executable, "-m", "sglang_asd.launch_server", *args], capture_output=True, text=True,
                          timeout=300)


def test_missing_model_path_is_one_line_error():
    r = _run(["--model-path", "/nonexistent/model"])
    assert r.returncode == 2
    assert "--model-path '/nonexistent/model' does not exist" in r.stderr
    assert "Traceback" not in r.stderr


def test_port_in_use_is_one_line_error(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = _run(["--model-path", str(tmp_path), "--port", str(port)])
    assert r.returncode == 2 and f"--port {port}" in r.stderr and "not free" in r.stderr
    assert "Traceback" not in r.stderr


def test_bad_asd_flag_is_one_line_error(tmp_path):
    r = _run(["--model-path", str(tmp_path), "--asd-gate", "-1"])
    assert r.returncode == 2 and "asd_gate must be a finite number >= 0, got -1" in r.stderr


@pytest.mark.parametrize("flags,message", [
    (["--disaggregation-mode", "prefill"], "ASD cannot run with --disaggregation-mode prefill"),
])
def test_modes_asd_cannot_serve_are_refused_when_asd_is_asked_for(tmp_path, flags, message):
    r = _run(["--model-path", str(tmp_path), *flags, "--asd-default-budget", "8"])
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr
    assert len([line for line in r.stderr.splitlines() if "error:" in line]) == 1


def test_unsupported_modes_are_named_in_receipts():
    from sglang_asd.policy import ASDConfig
    from sglang_asd.sglang_seams.state.request_ledger import RequestASD, RequestLedger
    from sglang_asd.sglang_seams.modes import unsupported_mode
    from sglang_asd.sglang_seams.scheduler.scheduler import _reason

    assert unsupported_mode("EAGLE", "decode") is None
    assert unsupported_mode("DSPARK", "prefill") == "unsupported:pd_prefill"
    for algorithm in ("NGRAM", "DSPARK", "dflash", None):
        assert unsupported_mode(algorithm, "null") is None and unsupported_mode(algorithm, None) is None
    greedy = type("P", (), {"top_k": 1, "temperature": 0.0})()
    choice = RequestASD(8.0, ASDConfig())
    assert _reason(choice, greedy, True, None) is None
    reason = _reason(choice, greedy, True, "unsupported:pd_prefill")
    receipt = RequestLedger(choice=choice, reason=reason).receipt()
    assert receipt["applied"] is False and receipt["reason"] == "unsupported:pd_prefill"


def test_fixtures_are_built_in_a_child_process(tmp_path, monkeypatch):
    """The launcher itself runs no build (its forked scheduler would inherit torch's OpenMP pool)."""
    from sglang_asd.fixtures import cache

    monkeypatch.setenv("SGLANG_ASD_CACHE", str(tmp_path))
    real = cache.build_atomic

    def no_build_here(*args, **kwargs):
        path, built = real(*args, **kwargs)
        assert not built, f"{args[0]} was built in the launcher process"
        return path, built

    monkeypatch.setattr(cache, "build_atomic", no_build_here)
    argv = ls.resolve_fixtures(["--tokenizer-path=fixture:tiny-tokenizer", "--dtype", "float32"])
    assert argv == [f"--tokenizer-path={tmp_path}/models/tiny-tokenizer", "--dtype", "float32"]
    assert (tmp_path / "models" / "tiny-tokenizer" / "fixture.json").is_file()
    assert ls.resolve_fixtures(["--model-path", "/plain/path"]) == ["--model-path", "/plain/path"]


def test_unknown_fixture_is_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLANG_ASD_CACHE", str(tmp_path))
    with pytest.raises(ls.LaunchError) as e:
        ls.resolve_fixtures(["--model-path", "fixture:no-such-model"])
    assert e.value.message.startswith("unknown fixture fixture:no-such-model; known: ")
    assert not (tmp_path / "models").exists()


def _tree(algorithm: str, steps: int, topk: int, draft_tokens: int) -> list:
    return ["--speculative-algorithm", algorithm, "--speculative-num-steps", str(steps),
            "--speculative-eagle-topk", str(topk), "--speculative-num-draft-tokens", str(draft_tokens)]


@pytest.mark.parametrize("algorithm,steps,topk,draft,refused", [
    ("EAGLE", 3, 4, 4, None),  # topk above the draft width: served (the root keeps 3 of its 4 children)
    ("EAGLE", 2, 4, 2, "--speculative-num-draft-tokens 2 is below --speculative-num-steps + 1 = 3"),
    ("STANDALONE", 3, 2, 3, "--speculative-num-draft-tokens 3 is below --speculative-num-steps + 1 = 4"),
    ("EAGLE3", 1, 2, 4, "(1 + topk + (steps - 1) * topk^2 = 3)"),
    ("EAGLE", 2, 2, 7, None),  # the largest tree of 2 steps and topk 2
    ("NEXTN", 2, 2, 8, "holds (1 + topk + (steps - 1) * topk^2 = 7)"),
    ("EAGLE", 3, 1, 2, None),  # a chain: SGLang sets the draft tokens to steps + 1 itself
    ("NGRAM", 1, 8, 2, None),  # not an EAGLE tree
])
def test_draft_trees_sglang_cannot_serve_are_refused(algorithm, steps, topk, draft, refused):
    argv = _tree(algorithm, steps, topk, draft)
    if refused is None:
        ls.check_draft_tree(argv)
        return
    with pytest.raises(ls.LaunchError) as e:
        ls.check_draft_tree(argv)
    assert refused in e.value.message and "\n" not in e.value.message


def test_a_draft_tree_flag_on_the_command_line_overrides_the_config_file():
    yaml = ["--config", str(CONFIGS / "cpu_tiny_eagle.yaml")]  # steps 3, topk 1, draft tokens 4
    ls.check_draft_tree(ls._merge_config([*yaml, "--speculative-eagle-topk", "4"]))
    with pytest.raises(ls.LaunchError) as e:
        ls.check_draft_tree(ls._merge_config([*yaml, "--speculative-eagle-topk", "4", "--speculative-num-steps", "5"]))
    assert e.value.message.startswith("--speculative-num-draft-tokens 4 is below --speculative-num-steps + 1 = 6")


def test_a_draft_tree_sglang_cannot_serve_is_a_one_line_error(tmp_path):
    r = _run(["--model-path", str(tmp_path), *_tree("EAGLE", 2, 4, 2)])
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = [line for line in r.stderr.splitlines() if "error:" in line]
    assert len(lines) == 1 and "--speculative-num-draft-tokens 2 is below" in lines[0], r.stderr


def test_rejection_sampling_is_refused_where_the_cpu_serves_sampled_verify():
    argv = ["--speculative-algorithm", "EAGLE", "--speculative-use-rejection-sampling"]
    ls.check_cpu_sampler(argv, cpu_sampling=False)  # sampled rows verified greedily: nothing launches Triton
    ls.check_cpu_sampler(argv[:2], cpu_sampling=True)
    with pytest.raises(ls.LaunchError) as e:
        ls.check_cpu_sampler(argv, cpu_sampling=True)
    assert e.value.message.startswith("--speculative-use-rejection-sampling is not served on CPU")


def test_rejection_sampling_on_cpu_is_a_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLANG_ASD_CPU_SAMPLING", "on")
    r = _run(["--model-path", str(tmp_path), *_tree("EAGLE", 3, 1, 4), "--speculative-use-rejection-sampling"])
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = [line for line in r.stderr.splitlines() if "error:" in line]
    assert len(lines) == 1 and "--speculative-use-rejection-sampling is not served on CPU" in lines[0], r.stderr



def _bag(path, **fields):
    """One of SGLang's resolved settings namespaces (``runtime_context._ConfigBag``), as ``get_spec()``
    and ``get_disagg()`` return them."""
    from sglang.srt.runtime_context import _ConfigBag

    bag = _ConfigBag(path)
    for name, value in fields.items():
        bag._set(name, value)
    return bag


@pytest.mark.parametrize("topk, linear", [(None, True), (1, True), ("1", True), (2, False), (8, False)])
def test_uno_receipts_say_where_asd_cannot_decide(monkeypatch, topk, linear):
    """UNO needs CUDA (FA3), so this drives the reason logic with SGLang's own settings objects: linear
    UNO (topk 1, SGLang's default) accepts in its worker, so every request is unsupported and ASD is
    refused at start-up; on tree UNO greedy requests are decided in eagle_sample, and sampled ones say
    "sampling" at any budget (its sparse sampler bypasses the hooked kernel)."""
    from sglang.srt import runtime_context
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    from sglang_asd.policy import ASDConfig
    from sglang_asd.sglang_seams import modes
    from sglang_asd.sglang_seams.scheduler.scheduler import _reason
    from sglang_asd.sglang_seams.state.request_ledger import RequestASD, RequestLedger

    spec = _bag("spec", speculative_algorithm="UNO", speculative_eagle_topk=topk)
    disagg = _bag("disagg", disaggregation_mode="null")
    monkeypatch.setattr(runtime_context, "get_spec", lambda: spec)
    monkeypatch.setattr(runtime_context, "get_disagg", lambda: disagg)
    unsupported = modes.process_unsupported_mode()
    assert unsupported == ("unsupported:uno_linear" if linear else None)
    why = modes.why_unsupported("UNO", None, topk)
    assert (why is not None and "--speculative-eagle-topk" in why and "linear UNO" in why) is linear
    uno = SpeculativeAlgorithm.UNO
    greedy = type("P", (), {"top_k": 1, "temperature": 0.0})()
    sampled = type("P", (), {"top_k": -1, "temperature": 0.8})()
    for budget in (0.0, 8.0):
        choice = RequestASD(budget, ASDConfig())
        reason = _reason(choice, sampled, True, unsupported, uno)
        assert reason == ("unsupported:uno_linear" if linear else "sampling")
        receipt = RequestLedger(choice=choice, reason=reason, sampled=True).receipt()
        assert receipt["applied"] is False and receipt["reason"] == reason
    assert _reason(RequestASD(8.0, ASDConfig()), greedy, True, unsupported, uno) == unsupported


def test_linear_uno_is_refused_at_start_when_asd_is_asked_for(tmp_path):
    r = _run(["--model-path", str(tmp_path), "--speculative-algorithm", "UNO", "--asd-default-budget", "8"])
    assert r.returncode == 2 and "linear UNO accepts in its own worker" in r.stderr and "Traceback" not in r.stderr
    r = _run(["--model-path", str(tmp_path), "--speculative-algorithm", "UNO", "--speculative-eagle-topk", "4",
              "--asd-default-budget", "8"])
    assert "linear UNO" not in r.stderr


@pytest.mark.parametrize("argv, cores, nodes, env, want", [
    ([], [0, 1], 1, None, None),  # one rank
    (["--tp-size", "2"], [0, 1], 1, None, "0|1"),
    (["--tensor-parallel-size=2"], [0, 1, 2, 3], 1, None, "0,1|2,3"),
    (["--tp-size", "2", "--dp-size", "2"], [4, 5, 6, 7, 8], 1, None, "4|5|6|7"),  # the cores this process may use
    (["--tp-size", "2"], [0, 1, 2, 3], 2, None, None),  # SGLang's default: one NUMA node per rank
    (["--tp-size", "2"], [0, 1], 1, "0-1|0-1", None),  # the user's choice stands
])
def test_cpu_ranks_get_one_group_of_cores_each(monkeypatch, argv, cores, nodes, env, want):
    from sglang.srt.utils import common

    monkeypatch.setattr(ls.os, "sched_getaffinity", lambda pid: set(cores))
    monkeypatch.setattr(common, "get_cpu_ids_by_node", lambda: [str(i) for i in range(nodes)])
    if env is None:
        monkeypatch.delenv(ls.THREADS_BIND_ENV, raising=False)
    else:
        monkeypatch.setenv(ls.THREADS_BIND_ENV, env)
    assert ls.cpu_threads_bind(argv) == want


def test_more_cpu_ranks_than_cores_is_refused_in_one_line(monkeypatch):
    from sglang.srt.utils import common

    monkeypatch.setattr(ls.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(common, "get_cpu_ids_by_node", lambda: ["0,1"])
    monkeypatch.delenv(ls.THREADS_BIND_ENV, raising=False)
    with pytest.raises(ls.LaunchError) as e:
        ls.cpu_threads_bind(["--tp-size", "4"])
    assert "--tp-size 4" in e.value.message and "4 ranks" in e.value.message and "2 CPU core(s)" in e.value.message
    assert "\n" not in e.value.message


@pytest.mark.parametrize("flags,refused", [
    (["--asd-scope", "reasoning"], "--asd-scope reasoning needs --reasoning-parser"),
    (["--asd-scope", "reasoning", "--reasoning-parser", "qwen3"],
     "('<think>', '</think>' of --reasoning-parser qwen3) to be single tokens of the served tokenizer"),
    (["--asd-strict-spans", "tool_call"], "marker '<tool_call>' is not a single token of the served tokenizer"),
    (["--asd-scope", "reasoning", "--reasoning-parser", "qwen3", "--asd-strict-spans", "tool_call"], None),
])
def test_a_server_scope_the_served_tokenizer_cannot_mark_is_refused(flags, refused):
    """tiny-llama's tokenizer has no think or tool-call tokens; tiny-llama-think's has them."""
    from sglang_asd.fixtures import fixture_path

    model = "tiny-llama" if refused else "tiny-llama-think"
    settings, rest = ls.server_settings.split_argv(["--model-path", str(fixture_path(model)), *flags])
    if refused is None:
        ls.check_scope(settings.scope, rest)
        return
    with pytest.raises(ls.LaunchError) as e:
        ls.check_scope(settings.scope, rest)
    assert refused in e.value.message and "\n" not in e.value.message


QWEN3_TEMPLATE = str(pathlib.Path(__file__).parents[1] / "fixtures" / "qwen3_think_template.jinja")


@pytest.mark.parametrize("model,flags,refused", [
    ("tiny-llama-think", ["--asd-scope", "reasoning"], "--reasoning-parser auto detects none for the served model"),
    ("tiny-llama-think", ["--asd-scope", "reasoning", "--chat-template", QWEN3_TEMPLATE], None),
    ("tiny-llama", ["--asd-scope", "reasoning", "--chat-template", QWEN3_TEMPLATE],
     "('<think>', '</think>' of --reasoning-parser qwen3) to be single tokens of the served tokenizer"),
    ("tiny-llama-think", ["--asd-strict-spans", "tool_call"], None),
])
def test_a_server_scope_under_reasoning_parser_auto_is_checked_against_what_sglang_resolves(model, flags, refused):
    """``--reasoning-parser auto``: SGLang detects qwen3 from a Qwen3-style chat template and nothing from
    tiny-llama-think's own; the check runs SGLang's resolution on a copy of the arguments."""
    from sglang.srt.server_args import prepare_server_args

    settings, rest = ls.build_argv(["--model-path", f"fixture:{model}", "--reasoning-parser", "auto", *flags])
    ls.check_scope(settings.scope, rest)  # auto: left to check_scope_auto
    server_args = prepare_server_args(rest)
    if refused is None:
        ls.check_scope_auto(settings.scope, rest, server_args)
    else:
        with pytest.raises(ls.LaunchError) as e:
            ls.check_scope_auto(settings.scope, rest, server_args)
        assert refused in e.value.message and "\n" not in e.value.message
    assert server_args.reasoning_parser == "auto"  # the copy was resolved, not SGLang's record


@pytest.mark.parametrize("flags,refused", [
    (["--asd-strict-spans", "tool_call"], True), (["--asd-scope", "reasoning"], True), (["--asd-strict-prefix", "8"], False),
    (["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", "fixture:tiny-llama-think",
      "--asd-strict-spans", "tool_call"], False)])
def test_a_marker_scope_on_a_server_that_mixes_prefill_and_decode_is_refused(flags, refused):
    """EAGLE keeps --enable-mixed-chunk and a chunk size turns mixing on (``state/scope_vocab.py`` says why
    marker scopes cannot be served there); SGLang turns mixing off for STANDALONE, so its scope serves."""
    from sglang.srt.server_args import prepare_server_args

    argv = ["--model-path", "fixture:tiny-llama-think", "--speculative-algorithm", "EAGLE", "--speculative-draft-model-path",
            "fixture:tiny-eagle-think", "--reasoning-parser", "qwen3", "--enable-mixed-chunk", "--chunked-prefill-size",
            "32", *flags]  # a later flag wins
    settings, rest = ls.build_argv(argv)
    ls.check_scope(settings.scope, rest)  # the markers resolve: mixing alone is what is refused
    server_args = prepare_server_args(rest)
    if not refused:
        ls.check_scope_mixing(settings.scope, server_args)
        return
    with pytest.raises(ls.LaunchError) as e:
        ls.check_scope_mixing(settings.scope, server_args)
    assert "need a server without mixed chunked prefill" in e.value.message and "\n" not in e.value.message
    server_args.chunked_prefill_size = None  # no chunked prefill: nothing mixes
    ls.check_scope_mixing(settings.scope, server_args)


def test_a_server_scope_the_served_tokenizer_cannot_mark_is_a_one_line_error():
    """Refused before SGLang starts: before, the scheduler's check stopped the server with a traceback."""
    r = _run(["--model-path", "fixture:tiny-llama", "--reasoning-parser", "qwen3", "--asd-scope", "reasoning"])
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = [line for line in r.stderr.splitlines() if "error:" in line]
    assert len(lines) == 1 and "--asd-scope / --asd-strict-spans: asd_scope='reasoning' needs" in lines[0], r.stderr
