"""SGLang's children start by fork with the CPU stand-in (``cpu_backend/seams/start_method.py``).

The hook runs here against SGLang 0.5.23's own ``_set_envs_and_config`` target and the real
``multiprocessing`` start method; every test server but the bf16 pair starts its children this way
(``tests/conftest.py``), and ``tests/integration/test_start_method.py`` checks those servers.
"""

import multiprocessing

import pytest

from sglang_asd.cpu_backend import env
from sglang_asd.cpu_backend.seams import start_method


@pytest.fixture
def restore_start_method():
    before = multiprocessing.get_start_method(allow_none=True)
    yield
    multiprocessing.set_start_method(before, force=True)


def test_the_around_hook_turns_sglangs_spawn_into_fork(restore_start_method, caplog):
    calls = []

    def sglang_set_envs_and_config(server_args):  # ends the way SGLang's does
        calls.append(server_args)
        multiprocessing.set_start_method("spawn", force=True)
        return "result"

    with caplog.at_level("INFO", logger=start_method.__name__):
        assert start_method.set_envs_and_config_around(sglang_set_envs_and_config, "args") == "result"
    assert calls == ["args"] and multiprocessing.get_start_method() == "fork"
    assert "sglang_asd: the scheduler and detokenizer processes start by fork" in caplog.text


@pytest.mark.parametrize("value,method", [(None, "fork"), ("", "fork"), ("fork", "fork"), (" Spawn ", "spawn")])
def test_the_start_method_is_read_from_the_environment(monkeypatch, value, method):
    if value is None:
        monkeypatch.delenv(env.START_METHOD_ENV, raising=False)
    else:
        monkeypatch.setenv(env.START_METHOD_ENV, value)
    assert env.start_method() == method


def test_the_hook_only_on_the_cpu_stand_in_and_not_with_spawn(monkeypatch):
    from sglang_asd import cpu_backend

    monkeypatch.setattr(cpu_backend, "is_installed", lambda: True)
    monkeypatch.delenv(env.START_METHOD_ENV, raising=False)
    assert start_method.hooks() == [(start_method.SET_ENVS_AND_CONFIG, start_method.set_envs_and_config_around)]
    monkeypatch.setenv(env.START_METHOD_ENV, "spawn")
    assert start_method.hooks() == []
    monkeypatch.delenv(env.START_METHOD_ENV)
    monkeypatch.setattr(cpu_backend, "is_installed", lambda: False)
    assert start_method.hooks() == []  # never on a GPU install: CUDA needs spawn


def test_the_target_is_sglangs_and_its_caller_looks_it_up_by_name():
    """The registry rebinds the module attribute; ``_launch_subprocesses`` must call it through that name
    (a by-name import elsewhere would keep the original)."""
    import inspect

    from sglang.srt.entrypoints import engine

    assert callable(engine._set_envs_and_config)
    assert "_set_envs_and_config(server_args)" in inspect.getsource(engine.Engine._launch_subprocesses)
    assert 'mp.set_start_method("spawn", force=True)' in inspect.getsource(engine._set_envs_and_config)


@pytest.mark.parametrize("module", ["launch_server", "stock_server"])
def test_a_bad_start_method_is_a_one_line_launch_error(monkeypatch, capsys, module):
    import importlib

    from sglang_asd import cpu_backend

    main = importlib.import_module(f"sglang_asd.{module}").main
    monkeypatch.setattr(cpu_backend, "is_installed", lambda: True)
    monkeypatch.setenv(env.START_METHOD_ENV, "forkserver")
    with pytest.raises(SystemExit) as e:
        main(["--model-path", "/nonexistent"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1
    assert err[0] == (f"sglang_asd.{module}: error: SGLANG_ASD_CPU_START_METHOD='forkserver': expected one of "
                      "fork, spawn")
