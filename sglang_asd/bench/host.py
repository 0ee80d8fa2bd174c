"""The machine a speed pass ran on: ``machine()``.

A run log holds the passes of every resume, and a resume may run on another machine
(a fresh boot, even of the same type, can be much faster or slower:
docs/MEASURING.md#host-effects-behind-the-method), so every pass is logged with the machine's id
and a ratio pairs only passes of one machine (``speed_summary``).
"""

from __future__ import annotations

import os
import platform


def machine() -> dict:
    """``{"id", "cpu", "cpus"}`` of this machine. ``id`` (host name and boot id) changes with every
    boot, so a run resumed on a freshly started machine, even of the same type, gets a new one."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()[:8]
    except OSError:
        boot = "?"
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {"id": f"{platform.node()}/{boot}", "cpu": cpu, "cpus": os.cpu_count()}
