"""``python -m sglang_asd.stock_server <sglang args>``: stock SGLang, no ASD, for comparisons.

The same process bootstrap as ``sglang_asd.launch_server`` (on CPU: the plain-torch ``sgl_kernel``
stand-in, the same working defaults and the CPU-path fixes of ``cpu_backend/seams/cpu_paths.py``), but
none of the ASD hooks: our SGLang plugin is
disabled through ``SGLANG_PLUGINS``. Tests use it as the "stock SGLang" side of token-for-token
identity checks; benchmarks may use it as a baseline.
"""

from __future__ import annotations

import os

os.environ["SGLANG_PLUGINS"] = "__none__"  # before SGLang reads it; inherited by spawned children

from sglang_asd.sglang_seams.process import prepare_process  # noqa: E402

prepare_process()

import sys  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    from sglang_asd import cpu_backend
    from sglang_asd.launch_server import LaunchError, _merge_config, bind_cpu_ranks, cpu_defaults, resolve_fixtures

    try:
        argv = resolve_fixtures(sys.argv[1:] if argv is None else argv)
    except LaunchError as e:
        print(f"sglang_asd.stock_server: error: {e.message}", file=sys.stderr)
        raise
    if cpu_backend.is_installed():
        from sglang_asd.cpu_backend import env

        try:  # refuse a bad SGLANG_ASD_CPU_GEMM or start method before any process starts
            env.check_cpu_switches()
        except ValueError as e:
            print(f"sglang_asd.stock_server: error: {e}", file=sys.stderr)
            raise SystemExit(2)
        argv = cpu_defaults(argv)
        try:
            bind_cpu_ranks(_merge_config(argv), "sglang_asd.stock_server")
        except LaunchError as e:
            print(f"sglang_asd.stock_server: error: {e.message}", file=sys.stderr)
            raise
        from sglang_asd.cpu_backend.seams import install_launcher_cpu_hooks, platform

        platform.apply()
        install_launcher_cpu_hooks()
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.utils import kill_process_tree

    from sglang_asd.sglang_seams.process import run_stock_scheduler_process

    server_args = prepare_server_args(argv)
    try:
        from sglang.srt.entrypoints.http_server import launch_server

        launch_server(server_args, run_scheduler_process_func=run_stock_scheduler_process)
    finally:
        kill_process_tree(os.getpid(), include_parent=False)


if __name__ == "__main__":
    main()
