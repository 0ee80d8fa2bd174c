"""Seam: SGLang's platform fact ``has_amx`` in the launcher, when serving on CPU with the stand-in.

- Kind: ``sglang.srt.runtime_context.override_platform(has_amx=True)`` (SGLang's own mechanism for
  stating platform facts), installed in the launcher process only, and only when
  ``sglang_asd.cpu_backend`` is active.
- Why: argument resolution replaces the ``intel_amx`` attention backend with ``torch_native`` on a
  CPU without AMX, and EAGLE refuses ``torch_native``. With the stand-in, ``intel_amx``'s two
  attention ops are plain torch and run on any CPU. The fact is read only by that resolution
  pass (``arg_groups/overrides.py``); the layers keep asking ``cpu_has_amx_support()`` directly
  and keep their native-torch fallbacks.
- Upstream: none; on a real AMX CPU with sgl_kernel this does nothing.
- Removal: when SGLang's CPU backend lets ``intel_amx`` attention run without AMX.
- Tested on: sglang 0.5.23.
"""

from __future__ import annotations


def apply() -> bool:
    from sglang_asd import cpu_backend

    if not cpu_backend.is_installed():
        return False
    from sglang.srt.runtime_context import override_platform

    override_platform(has_amx=True).install()
    return True
