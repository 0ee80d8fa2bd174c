"""Where a request may spend: its scope over output positions. Standard library only.

A scope makes output positions strict (no exception, no relaxed node) by three rules, all of which
must allow a position for ASD to relax it:

- ``strict_prefix`` N: output indices 0..N-1 are strict (the first N tokens of the response);
- ``scope``: ``"all"`` (every position, today's behaviour) or ``"reasoning"``: only positions
  inside the reasoning span, between the served model's think start and think end tokens (SGLang's
  ``--reasoning-parser``);
- ``strict_spans``: positions inside any span between an open and a close marker are strict (a
  tool call, a code block). A preset name stands for its pair (``SPAN_PRESETS``); a pair whose
  open and close marker are the same token toggles (a code fence).

Markers are single tokens of the served tokenizer; anything else is refused, naming the marker.
A position's span state is the state after every token before it (prompt and output): a marker
changes the state of the positions after it, also inside one draft block. A marker is itself
never relaxed, and a position where the target's choice is a marker is never relaxed either (a
marker is never displaced), so a span opens and closes exactly where the target puts it.

The scope as a bitmask (what the device carries per request, ``Markers``): bit 0 = inside the
reasoning span, bit 1 + p = inside strict span p. Each marker token applies
``state = ((state & ~clear) | set) ^ toggle`` to it; a position is allowed iff
``state & require == require`` and ``state & forbid == 0`` for the state after the previous token,
and its output index is >= N. A request may only tighten the server's scope: raise the prefix, add
spans, narrow ``"all"`` to ``"reasoning"``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Optional, Sequence

from sglang_asd.policy.config import check_count, shown

SCOPES = ("all", "reasoning")
DEFAULT_STRICT_PREFIX = 0
MAX_STRICT_SPANS = 8  # bits 1..8 of the state
REASONING_BIT = 1
# Preset name -> (open, close) marker strings; usable where the served tokenizer has them as single
# tokens (the Qwen2.5 and Qwen3 families have both pairs).
SPAN_PRESETS = {
    "tool_call": ("<tool_call>", "</tool_call>"),
    "code": ("```", "```"),
}


def validate_strict_prefix(value: Any, minimum: int = 0, name: str = "asd_strict_prefix") -> int:
    """An integer >= ``minimum`` (the server's prefix: a request may only raise it)."""
    n = check_count(name, value)
    if n < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum} (the server's --asd-strict-prefix), got {shown(value)}")
    return n


def validate_scope(value: Any, server: str = "all", name: str = "asd_scope") -> str:
    """``"all"`` or ``"reasoning"``; a request may narrow the server's ``"all"``, never widen ``"reasoning"``."""
    if value not in SCOPES:
        raise ValueError(f"{name} must be one of {', '.join(repr(s) for s in SCOPES)}, got {shown(value)}")
    if server == "reasoning" and value == "all":
        raise ValueError(f"{name} must be 'reasoning' (the server's --asd-scope), got 'all'")
    return value


def validate_spans(value: Any, name: str = "asd_strict_spans") -> tuple:
    """A list of span markers: a preset name or an ``[open, close]`` pair of non-empty strings.
    -> tuple of (open, close) pairs, in order, without repeats."""
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ValueError(f"{name} must be a list of preset names ({', '.join(SPAN_PRESETS)}) or [open, close] "
                         f"marker pairs, got {shown(value)}")
    pairs = []
    for item in value:
        if isinstance(item, str):
            if item not in SPAN_PRESETS:
                raise ValueError(f"{name}: unknown preset {shown(item)} (presets: {', '.join(SPAN_PRESETS)}; "
                                 f"or give an [open, close] marker pair)")
            pair = SPAN_PRESETS[item]
        elif (isinstance(item, (list, tuple)) and len(item) == 2
              and all(isinstance(m, str) and m for m in item)):
            pair = (item[0], item[1])
        else:
            raise ValueError(f"{name}: each span must be a preset name or an [open, close] pair of non-empty "
                             f"strings, got {shown(item)}")
        if pair not in pairs:
            pairs.append(pair)
    if len(pairs) > MAX_STRICT_SPANS:
        raise ValueError(f"{name} may hold at most {MAX_STRICT_SPANS} spans, got {len(pairs)}")
    return tuple(pairs)


@dataclasses.dataclass(frozen=True)
class Scope:
    """A request's scope (the server's, tightened by the request)."""

    strict_prefix: int = DEFAULT_STRICT_PREFIX
    scope: str = "all"
    strict_spans: tuple = ()  # (open, close) marker strings

    def __post_init__(self) -> None:
        validate_strict_prefix(self.strict_prefix)
        validate_scope(self.scope)
        object.__setattr__(self, "strict_spans", validate_spans(list(self.strict_spans)))

    @property
    def unscoped(self) -> bool:
        """Every position allowed: today's behaviour, with no scope state on the device."""
        return self.strict_prefix == 0 and self.scope == "all" and not self.strict_spans

    def tightened(self, strict_prefix: Any = None, scope: Any = None, strict_spans: Any = None) -> "Scope":
        """This scope with a request's fields: a prefix no shorter, ``"reasoning"`` kept, the
        request's spans added to ours (None keeps ours)."""
        spans = self.strict_spans
        if strict_spans is not None:
            spans = validate_spans(list(self.strict_spans) + list(validate_spans(strict_spans)))
        return Scope(
            strict_prefix=self.strict_prefix if strict_prefix is None
            else validate_strict_prefix(strict_prefix, self.strict_prefix),
            scope=self.scope if scope is None else validate_scope(scope, self.scope),
            strict_spans=spans)

    def parameters(self) -> dict:
        """What a receipt shows of the scope in force."""
        return {"strict_prefix": self.strict_prefix, "scope": self.scope,
                "strict_spans": [list(p) for p in self.strict_spans]}


@dataclasses.dataclass(frozen=True)
class ReasoningMarkers:
    """The served model's reasoning span, from SGLang's reasoning parser: its think start and end
    token ids (None where the parser has none) and whether a response starts inside the span when
    the prompt holds neither (the parser's ``force_reasoning``: templates that open it silently)."""

    start: Optional[int]
    end: int
    starts_inside: bool = False


@dataclasses.dataclass(frozen=True)
class Markers:
    """A scope resolved against the served tokenizer: what a request's device row holds."""

    strict_prefix: int
    require: int  # state bits that must be set (the reasoning bit under scope "reasoning")
    forbid: int  # state bits that must be clear (the strict spans)
    ops: tuple  # (token, set, clear, toggle) per marker token, one entry per token
    default_state: int = 0  # the state when no marker precedes (inside reasoning for a force-reasoning parser)

    def apply(self, state: int, token: int) -> int:
        for t, s, c, x in self.ops:
            if t == token:
                state = ((state & ~c) | s) ^ x
        return state

    def state_after(self, tokens: Sequence[int]) -> int:
        """The state after ``tokens`` (prompt and output so far): per bit, the last marker wins;
        bits no marker touched keep the default."""
        ops = {t: (s, c, x) for t, s, c, x in self.ops}
        state = self.default_state
        for t in tokens:
            op = ops.get(t)
            if op is not None:
                state = ((state & ~op[1]) | op[0]) ^ op[2]
        return state

    def allowed(self, state: int, position: int, token: int, target: int) -> bool:
        """The pure rule: may output index ``position`` hold a relaxed ``token`` where the target's
        choice is ``target``, the state after the previous token being ``state``?"""
        markers = {t for t, *_ in self.ops}
        return (position >= self.strict_prefix and state & self.require == self.require
                and not state & self.forbid and token not in markers and target not in markers)


def resolve(scope: Scope, token_id: Callable[[str], Optional[int]],
            reasoning: Optional[ReasoningMarkers] = None, name: str = "asd_strict_spans") -> Markers:
    """``scope`` against the served tokenizer: ``token_id(text)`` is the id of ``text`` when it is
    exactly one token, else None. Raises ValueError naming the field and the marker."""
    ops: dict[int, list] = {}

    def add(token: int, s: int = 0, c: int = 0, x: int = 0) -> None:
        op = ops.setdefault(token, [0, 0, 0])
        op[0] |= s
        op[1] |= c
        op[2] |= x

    require = forbid = default = 0
    if scope.scope == "reasoning":
        if reasoning is None:
            raise ValueError("asd_scope='reasoning' needs a server started with --reasoning-parser, which this "
                             "server was not")
        require = REASONING_BIT
        if reasoning.start is not None:
            add(reasoning.start, s=REASONING_BIT)
        add(reasoning.end, c=REASONING_BIT)
        default = REASONING_BIT if reasoning.starts_inside else 0
    for p, (open_, close) in enumerate(scope.strict_spans):
        bit = 1 << (p + 1)
        ids = []
        for marker in (open_, close):
            tid = token_id(marker)
            if tid is None:
                raise ValueError(f"{name}: marker {shown(marker)} is not a single token of the served tokenizer")
            ids.append(tid)
        if ids[0] == ids[1]:
            add(ids[0], x=bit)
        else:
            add(ids[0], s=bit)
            add(ids[1], c=bit)
        forbid |= bit
    return Markers(scope.strict_prefix, require, forbid, tuple((t, *op) for t, op in ops.items()), default)


def single_token_id(tokenizer) -> Callable[[str], Optional[int]]:
    """``token_id`` for ``resolve`` over a Hugging Face tokenizer: the id of a string that the
    tokenizer encodes as exactly one token (without special tokens added), else None."""
    def token_id(text: str) -> Optional[int]:
        ids = tokenizer.encode(text, add_special_tokens=False)
        return ids[0] if len(ids) == 1 else None

    return token_id

