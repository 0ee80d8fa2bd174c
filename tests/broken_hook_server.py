"""Test-only launcher: ``sglang_asd.launch_server`` with one hook made to fail, as SGLang would let it.

SGLang's HookRegistry only logs a hook that fails to apply; sglang-asd must then refuse to serve.
``SGLANG_ASD_TEST_BREAK`` (read in every process: spawned children import this module first)
names what to break:
- ``frontend``: the ``update_request_meta_info`` hook is never applied (launcher process);
- ``middleware``: the request-field middleware is never added (launcher process);
- ``scheduler``: the ``eagle_sample`` hook is never applied (scheduler process);
- ``binding``: ``ngram_worker``'s by-name ``eagle_sample`` is left stale (scheduler process).
"""

import os

from sglang_asd import launch_server  # noqa: F401  (process bootstrap first)

BREAK = os.environ.get("SGLANG_ASD_TEST_BREAK", "")
SKIPPED_TARGETS = {
    "frontend": "sglang.srt.managers.tokenizer_manager.TokenizerManager.update_request_meta_info",
    "scheduler": "sglang.srt.speculative.eagle_utils.eagle_sample",
}


def _break() -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry

    if BREAK in SKIPPED_TARGETS:
        register = HookRegistry.register.__func__

        def register_all_but_one(cls, target, *args, **kwargs):
            if target != SKIPPED_TARGETS[BREAK]:
                register(cls, target, *args, **kwargs)  # the skipped one is silently lost

        HookRegistry.register = classmethod(register_all_but_one)
    elif BREAK == "middleware":
        from sglang_asd.sglang_seams.frontend import http_api

        http_api.add_middleware = lambda: None
    elif BREAK == "binding":
        import importlib

        from sglang_asd.sglang_seams.scheduler import eagle_sample

        stale = importlib.import_module("sglang.srt.speculative.ngram_worker").eagle_sample
        apply_hooks = HookRegistry.apply_hooks.__func__

        def apply_then_restore(cls):
            apply_hooks(cls)
            importlib.import_module("sglang.srt.speculative.ngram_worker").eagle_sample = stale

        HookRegistry.apply_hooks = classmethod(apply_then_restore)
        assert eagle_sample.EAGLE_SAMPLE_BINDINGS


_break()

if __name__ == "__main__":
    launch_server.main()
