"""The hot path never syncs with the host: no ``.item()``, ``.tolist()``, ``.cpu()``, ``.numpy()``, and no
Python branch on tensor data (``Tensor.__bool__``, ``__int__``, ``__float__``).

``forbid_host_sync(monkeypatch)`` makes each of those ``Tensor`` methods raise until
``monkeypatch.undo()`` (or the test's end)."""

from __future__ import annotations

import torch

FORBIDDEN = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__")


def _raiser(name: str, where: str):
    def raiser(*args, **kwargs):
        raise AssertionError(f"Tensor.{name} called {where}")

    return raiser


def forbid_host_sync(monkeypatch, where: str = "on the verify hot path") -> None:
    for name in FORBIDDEN:
        monkeypatch.setattr(torch.Tensor, name, _raiser(name, where))
