"""docs/SEAMS.md lists exactly the hooks the code registers, each with a module, patch and test that exist."""

import importlib
import re
from pathlib import Path

from sglang_asd.server_settings import ASDServerSettings

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^\| `(sglang\.[\w.]+)` \| ([^|]+) \| `((?:sglang_seams|cpu_backend)/[\w/]+\.py)` \| [^|]+ \| ([^|]+) \| [^|]+ \| `([\w/.]+)` \|$")


def _rows():
    text = (ROOT / "docs" / "SEAMS.md").read_text()
    hooks = text.split("## Hooks", 1)[1].split("## ", 1)[0]
    rows = [ROW.match(line) for line in hooks.splitlines() if line.startswith("| `sglang.")]
    assert all(rows), [line for line, m in zip(hooks.splitlines(), rows) if not m]
    return {m.group(1): m for m in rows}


def _cpu_hooks():
    from sglang_asd.cpu_backend.seams import block_drafters, cpu_paths, pd_transfer, start_method, tensor_parallel

    bd = block_drafters  # its torch.Tensor.record_stream hook is listed under "Other interventions"
    drafters = [(bd.HANDLE_DSPARK, bd.handle_block_drafter_around), (bd.HANDLE_DFLASH, bd.handle_block_drafter_around),
                (bd.DFLASH_VERIFY_INIT, bd.dflash_verify_init_around), (bd.EXTEND_KWARGS, bd.extend_forward_kwargs_around)]
    return [(cpu_paths.GET_LAST_LOC, cpu_paths.get_last_loc_around), *cpu_paths.linear_hooks(),
            (start_method.SET_ENVS_AND_CONFIG, start_method.set_envs_and_config_around), *drafters,
            (pd_transfer.MOONCAKE_SENDER_INIT, pd_transfer.mooncake_sender_init_around),
            (tensor_parallel.NCCL_LIBRARY_INIT, tensor_parallel.nccl_library_around),
            (tensor_parallel.INIT_CPU_THREADS_ENV, tensor_parallel.init_cpu_threads_env_around)]


def _sampling_hooks():
    """The sampling branch's hook: registered where the platform has SGLang's sampling kernel (not on
    CPU, unless the CPU sampling verify serves one: SGLANG_ASD_CPU_SAMPLING), so listed here whatever this host is."""
    from sglang_asd.sglang_seams.scheduler import eagle_sample

    return [] if eagle_sample.sampling_hooks() else [(eagle_sample.TREE_SAMPLING, eagle_sample.tree_sampling_around)]


def _registered():
    from sglang_asd import sglang_seams

    hooks = sglang_seams.scheduler_hooks(ASDServerSettings(standalone_draft_fix=True))
    hooks += sglang_seams.frontend_hooks()
    hooks += _sampling_hooks()
    hooks += _cpu_hooks()  # registered only on CPU (the linear ones unless SGLANG_ASD_CPU_GEMM=native, the
    # start method unless SGLANG_ASD_CPU_START_METHOD=spawn)
    return {target: hook for target, hook in hooks}


def test_the_index_lists_exactly_the_registered_hooks():
    rows, registered = _rows(), _registered()
    assert sorted(rows) == sorted(registered)
    for target, hook in registered.items():
        module = rows[target].group(3)
        assert hook.__module__ == "sglang_asd." + module[:-3].replace("/", "."), target
        doc = importlib.import_module(hook.__module__).__doc__
        name = target.rsplit(".", 1)[1]
        assert name in doc, f"{module}'s docstring does not name {name}"


def test_every_row_names_an_existing_patch_and_test():
    for target, m in _rows().items():
        patch = m.group(4).strip()
        if not patch.startswith("none"):
            assert (ROOT / "patches" / "sglang-0.5.23" / patch.strip("`")).is_file(), patch
        assert (ROOT / m.group(5)).is_file(), m.group(5)


def test_the_standalone_fix_hooks_are_opt_in():
    from sglang_asd import sglang_seams

    default = {t for t, _ in sglang_seams.scheduler_hooks(ASDServerSettings())}
    assert not any("standalone" in t or "prepare_for_draft" in t for t in default)
    assert {t for t, m in _rows().items() if "--asd-standalone-draft-fix" in m.group(2)} == (
        set(_registered()) - default - {t for t, _ in _cpu_hooks()} - {t for t, _ in _sampling_hooks()}
        - {t for t in _rows() if "frontend" in _rows()[t].group(2)})


def _modules(package):
    import pkgutil

    return [importlib.import_module(f"{package.__name__}.{m.name}") for m in pkgutil.iter_modules(package.__path__)]


def test_hook_modules_declare_their_seams_and_helpers_hook_nothing():
    """The installers read each hook module's ``SEAMS`` (no list of hooks kept elsewhere): every module
    of a hook package declares them, and the helper packages (the verify step, the ledgers) hook nothing."""
    from sglang_asd.cpu_backend import seams as cpu_seams
    from sglang_asd.sglang_seams import frontend, scheduler, state, step

    for module in _modules(frontend) + _modules(scheduler):
        assert getattr(module, "SEAMS", None), f"{module.__name__} declares no SEAMS"
    for module in _modules(cpu_seams):
        assert hasattr(module, "SEAMS") == (hasattr(module, "hooks") or hasattr(module, "scheduler_hooks")), module
    for module in _modules(step) + _modules(state):
        assert not hasattr(module, "SEAMS") and not hasattr(module, "hooks"), f"{module.__name__} is a helper"
