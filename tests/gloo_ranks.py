"""Tensor-parallel tests on the CPU: ``run_ranks(fn, folder)`` runs ``fn(rank)`` in ``world`` spawned
processes joined in one gloo group and returns what each rank's call returned (saved with
``torch.save``), in rank order. ``fn`` must be a module-level function (spawn pickles it by name) and
sets up its own process (SGLang bootstrap, hooks) before it uses the group."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _worker(rank: int, fn, init_method: str, outdir: str, world: int) -> None:
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    try:
        torch.save(fn(rank), f"{outdir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def run_ranks(fn, folder: Path, world: int = 2) -> list:
    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    mp.spawn(_worker, args=(fn, f"file://{folder}/rendezvous", str(folder), world), nprocs=world, join=True)
    return [torch.load(folder / f"rank{r}.pt") for r in range(world)]
