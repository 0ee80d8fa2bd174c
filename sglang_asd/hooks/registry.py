"""A seam's declaration, and its installation with SGLang's ``HookRegistry``.

Every seam module ends with ``SEAMS``: one ``Seam`` per process it hooks in, saying which
``(target, hook)`` pairs to install there now (none where they do not apply: a GPU install, an
opt-in not taken, a platform without the kernel), which modules import a target by name, and what
to check first. A seam package installs the seams of its own modules (``seams_of``), so no list
of hooks or bindings is kept anywhere else.

``install`` registers the hooks (all AROUND), applies them, then checks that every target and
every by-name binding of it really is wrapped: SGLang only logs a hook that failed to apply, and a
server that silently verified strictly would lie to its users, so a missing hook stops the
process (``HookNotInstalled``).
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from types import ModuleType
from typing import Callable, Iterable, Mapping, Optional, Sequence

Hook = tuple[str, Callable]  # (dotted target, AROUND hook)

_HOOK_MARK = "__sglang_asd_hook__"


class HookNotInstalled(RuntimeError):
    pass


@dataclasses.dataclass(frozen=True)
class Seam:
    """What one seam module hooks in one process."""

    process: str  # "launcher" (the launcher / HTTP server) or "scheduler" (every TP rank)
    hooks: Callable[[], list[Hook]]  # the pairs to install in this process now ([]: none here)
    bindings: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)  # target -> by-name importers
    preload: tuple[str, ...] = ()  # modules to import before the registry applies (besides the importers)
    check: Optional[Callable[[], None]] = None  # before registering: e.g. bind SGLang's signatures
    opt_in: Optional[str] = None  # the ``ASDServerSettings`` field that turns it on
    owned: bool = False  # each target must hold this very hook (not just some sglang-asd hook)


def seams_of(package: ModuleType, process: str) -> list[Seam]:
    """The seams of every module of ``package`` (a package of seam modules) in ``process``, by module name."""
    modules = [importlib.import_module(f"{package.__name__}.{m.name}") for m in pkgutil.iter_modules(package.__path__)]
    return [s for m in modules for s in getattr(m, "SEAMS", ()) if s.process == process]


def chosen(seams: Iterable[Seam], settings=None) -> list[Seam]:
    """The seams this process installs: an opt-in seam only where ``settings`` turns it on."""
    return [s for s in seams if s.opt_in is None or getattr(settings, s.opt_in, False)]


def hooks_of(seams: Iterable[Seam]) -> list[Hook]:
    return [hook for s in seams for hook in s.hooks()]


def install(seams: Sequence[Seam], what: str, preload: Iterable[str] = ()) -> list[Hook]:
    """Check, register, apply and verify ``seams`` (``chosen`` already); -> the hooks installed."""
    for seam in seams:
        if seam.check is not None:
            seam.check()
    declared = [(seam, seam.hooks()) for seam in seams]
    hooks = [hook for _, pairs in declared for hook in pairs]
    if not hooks:
        return []
    bindings = [(module, target.rsplit(".", 1)[1]) for seam, pairs in declared for target, _ in pairs
                for module in seam.bindings.get(target, ())]
    preload = (*preload, *(m for seam, pairs in declared if pairs for m in seam.preload), *(m for m, _ in bindings))
    _register_and_apply(hooks, preload=preload)
    check_installed([t for t, _ in hooks], bindings=bindings)
    check_own([hook for seam, pairs in declared if seam.owned for hook in pairs], what)
    return hooks


def resolve(path: str):
    """The object at a dotted ``path`` (a module attribute, or a class attribute as stored)."""
    module, _, attr = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), attr)
    except ModuleNotFoundError:
        owner_path, _, owner_attr = module.rpartition(".")
        owner = getattr(importlib.import_module(owner_path), owner_attr)
        return owner.__dict__.get(attr, getattr(owner, attr))


def _register_and_apply(hooks: Iterable[Hook], preload: Iterable[str] = ()) -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    for module in dict.fromkeys(preload):  # by-name importers must be loaded before the registry rebinds names
        importlib.import_module(module)
    for target, hook in hooks:
        if target in HookRegistry._patched or any(h is hook for _, h, _ in HookRegistry._hooks.get(target, ())):
            continue
        HookRegistry.register(target, _marked(hook), HookType.AROUND)
    HookRegistry.apply_hooks()


def check_installed(targets: Iterable[str], bindings: Iterable[tuple[str, str]] = ()) -> None:
    """Raise unless every target and every ``(module, name)`` binding is our wrapper."""
    missing = [t for t in targets if not _is_wrapped(resolve(t))]
    for module, name in bindings:
        if not _is_wrapped(getattr(importlib.import_module(module), name)):
            missing.append(f"{module}.{name}")
    if missing:
        raise HookNotInstalled(
            "sglang_asd: these hooks are not in place, refusing to serve (ASD would silently be strict): "
            + ", ".join(missing)
        )


def check_own(hooks: Iterable[Hook], what: str) -> None:
    """Raise unless each target's wrapper chain holds that very hook (``check_installed`` accepts any
    sglang-asd hook, and ``_register_and_apply`` skips a target another seam already wraps)."""
    missing = [t for t, hook in hooks if not _holds(resolve(t), hook)]
    if missing:
        raise HookNotInstalled(f"sglang_asd: {what} hooks are not in place, refusing to serve: " + ", ".join(missing))


def _marked(hook: Callable) -> Callable:
    setattr(hook, _HOOK_MARK, True)
    return hook


def _is_wrapped(obj) -> bool:
    """True if ``obj`` is a HookRegistry wrapper around one of our hooks (at any depth)."""
    fn = getattr(obj, "__func__", obj)
    seen = 0
    while fn is not None and seen < 16:
        closure = getattr(fn, "__closure__", None) or ()
        if any(getattr(c.cell_contents, _HOOK_MARK, False) for c in closure if _cell_ok(c)):
            return True
        fn = getattr(fn, "__wrapped__", None)
        seen += 1
    return False


def _holds(obj, hook: Callable) -> bool:
    fn = getattr(obj, "__func__", obj)
    for _ in range(16):
        if fn is None:
            return False
        if any(_cell_ok(c) and c.cell_contents is hook for c in getattr(fn, "__closure__", None) or ()):
            return True
        fn = getattr(fn, "__wrapped__", None)
    return False


def _cell_ok(cell) -> bool:
    try:
        cell.cell_contents
        return True
    except ValueError:
        return False
