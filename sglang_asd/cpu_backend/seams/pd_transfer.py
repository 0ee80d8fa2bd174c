"""Seam on SGLang's PD transfer path, only with the CPU stand-in (never on a GPU install).

``sglang.srt.disaggregation.mooncake.conn.MooncakeKVSender.__init__``
- Kind: AROUND; calls the original, then sets ``supports_host_tensor_indices = False`` on the
  instance (the class says True).
- Process: scheduler of a PD prefill server with ``--disaggregation-transfer-backend mooncake``
  (or ``mooncake_tcp``), ASD and stock servers alike.
- Why: for a sender that takes host page indices, ``PrefillMixin._send_kv_chunk``
  (``srt/disaggregation/prefill.py``, 0.5.23 ~1746) copies them into a pinned host tensor
  (``pin_memory=True``) and records a ``torch.cuda.Event``; with no CUDA driver the prefill
  scheduler dies at its first transfer ("Found no NVIDIA driver on your system"). On CPU the KV
  indices already are host tensors, and the other branch (``kv_to_page_indices``, the branch every
  other backend takes) is exact.
- How: the instance attribute shadows the class's, so ``getattr(sender, ...)`` reads False there.
- Upstream: none yet; ``_send_kv_chunk`` should take the host branch when the KV indices are on
  the CPU. Removal: when it does.
- Tested on: sglang 0.5.23 with mooncake-transfer-engine-non-cuda 0.3.13.post1 over TCP
  (``tests/integration/test_pd.py``).
"""

from __future__ import annotations

from sglang_asd.hooks.registry import Seam

MOONCAKE_SENDER_INIT = "sglang.srt.disaggregation.mooncake.conn.MooncakeKVSender.__init__"
PRELOAD = ("sglang.srt.disaggregation.mooncake.conn",)


def mooncake_sender_init_around(original, self, *args, **kwargs):
    original(self, *args, **kwargs)
    self.supports_host_tensor_indices = False  # CPU KV indices: the plain host branch


def hooks() -> list:
    """Scheduler-process hooks: none on a GPU install."""
    from sglang_asd import cpu_backend

    if not cpu_backend.is_installed():
        return []
    return [(MOONCAKE_SENDER_INIT, mooncake_sender_init_around)]


SEAMS = (Seam("scheduler", hooks, preload=PRELOAD),)
