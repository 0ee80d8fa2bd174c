"""Per-process ASD runtime state (scheduler side): the server settings and the metrics sink."""

from __future__ import annotations

import dataclasses
from typing import Optional

from sglang_asd.server_settings import ASDServerSettings


@dataclasses.dataclass
class SchedulerRuntime:
    settings: ASDServerSettings
    metrics: Optional[object] = None  # sglang_seams.state.metrics.ASDMetrics on the rank that exports
    unsupported_mode: Optional[str] = None  # "" once known to be supported; see sglang_seams/modes.py
    sampling_reason: Optional[str] = None  # "" once the sampled rule is known to run here (scheduler.sampling_reason)
    warmed_variants: Optional[frozenset] = None  # verify kernel variants warmed at start-up (step/warmup.py)
    seen_variants: set = dataclasses.field(default_factory=set)  # variants serving has launched


_RUNTIME: Optional[SchedulerRuntime] = None


def set_runtime(settings: ASDServerSettings) -> SchedulerRuntime:
    global _RUNTIME
    if _RUNTIME is None or _RUNTIME.settings != settings:
        _RUNTIME = SchedulerRuntime(settings=settings)
    return _RUNTIME


def get_runtime() -> SchedulerRuntime:
    if _RUNTIME is None:
        raise RuntimeError("sglang_asd: ASD hooks are not installed in this process")
    return _RUNTIME


def is_set() -> bool:
    return _RUNTIME is not None
