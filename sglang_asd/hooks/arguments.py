"""The arguments a scheduler hook reads from an SGLang call, by parameter name, bound once at install.

An AROUND hook receives SGLang's call as ``(original, *args, **kwargs)``, and SGLang passes the
same parameter by position at one call site and by keyword at another. ``NamedArguments`` takes
the function's signature once (``bind``, from the seam's ``Seam.check`` at install): it checks
that every parameter the hook reads still exists, refusing to start otherwise (an upstream rename
must not bind the wrong tensor silently), and keeps each one's position, so reading a call's
arguments is a tuple lookup (no ``inspect`` per call).
"""

from __future__ import annotations

import inspect
import sys
from typing import Iterable, Optional

_KEYWORD_ONLY = sys.maxsize  # the position of a parameter no positional argument can fill


class SeamSignatureMismatch(RuntimeError):
    pass


class NamedArguments:
    """The parameters ``names`` of the SGLang function ``target``, read from each call."""

    def __init__(self, target: str, names: Iterable[str]):
        self.target = target
        self.names = tuple(names)
        self._slots: Optional[tuple] = None  # (name, position, default) per name, once bound

    def bind(self, fn) -> None:
        """Take ``fn``'s signature (SGLang's original, at install); raise if a name is missing."""
        signature = inspect.signature(fn)
        params = signature.parameters
        missing = [n for n in self.names if n not in params]
        if missing:
            raise SeamSignatureMismatch(
                f"sglang_asd: {fn.__module__}.{fn.__qualname__} no longer takes {missing} "
                f"(signature {signature}); this sglang_asd does not support this SGLang version"
            )
        positional = [p.name for p in params.values()
                      if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        self._slots = tuple((n, positional.index(n) if n in positional else _KEYWORD_ONLY, params[n].default)
                            for n in self.names)

    def of(self, args: tuple, kwargs: dict) -> tuple:
        """The values of ``names`` in one call (a parameter left out: its default)."""
        n = len(args)
        return tuple(args[i] if i < n else kwargs.get(name, default) for name, i, default in self._bound())

    def replaced(self, args: tuple, kwargs: dict, name: str, value) -> tuple[tuple, dict]:
        """``(args, kwargs)`` of the same call with ``name`` set to ``value``."""
        i = next(i for n, i, _ in self._bound() if n == name)
        if i < len(args):
            return args[:i] + (value,) + args[i + 1:], kwargs
        return args, {**kwargs, name: value}

    def _bound(self) -> tuple:
        if self._slots is None:
            raise RuntimeError(f"sglang_asd: the hook on {self.target} ran before install_scheduler_hooks "
                               "bound SGLang's signature")
        return self._slots
