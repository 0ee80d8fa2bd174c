"""With the CPU stand-in, the servers' scheduler and detokenizer processes start by fork
(``cpu_backend/seams/start_method.py``); the bf16 pair keeps SGLang's spawn (tests/integration/test_cpu_bf16.py).
The token-for-token identity tests run on forked servers; this checks what a fork inherits."""

import pytest

from tests.server_utils import check_receipt

pytestmark = [pytest.mark.server, pytest.mark.server_group("eagle")]

FORKED = "sglang_asd: the scheduler and detokenizer processes start by fork"
SCHEDULER_HOOKS = "scheduler hooks installed and verified"


def test_cpu_servers_fork_their_children_and_install_each_hook_once(servers):
    stock, asd = servers.get("eagle", stock=True), servers.get("eagle")
    for server in (stock, asd):
        log = server.log_path.read_text(errors="replace")
        assert log.count(FORKED) == 1, f"{server.name}: children not started by fork"
    # the ASD scheduler installs its hooks itself, once: the launcher's frontend hooks and settings came with
    # the fork, so SGLang's plugin loader in the child must not install a second, default-settings set (a
    # forked child also inherits the launcher's logging, so the line shows; a spawned one logs it unconfigured)
    log = asd.log_path.read_text(errors="replace")
    assert log.count(SCHEDULER_HOOKS) == 1
    assert SCHEDULER_HOOKS not in stock.log_path.read_text(errors="replace")
    check_receipt(asd.generate("The quick brown fox", max_new_tokens=16, asd_budget=4), 4.0)
