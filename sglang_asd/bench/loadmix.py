"""Weighted mixes for the load test: ``--budget-mix 0:0.5,8:0.5``, ``--api-mix generate:3,chat:1``,
``--user-mix fixed:1,natural:1``. Weights need not sum to 1; a missing weight means 1."""

from __future__ import annotations

import math
import random
from typing import Callable, Sequence, TypeVar

T = TypeVar("T")


def parse_mix(spec: str, convert: Callable[[str], T], name: str) -> list[tuple[T, float]]:
    """``"a:w,b:w"`` -> ``[(convert(a), w), ...]``; errors name the option and the bad part."""
    out: list[tuple[T, float]] = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        key, _, weight = part.partition(":")
        try:
            value = convert(key.strip())
        except (ValueError, KeyError) as e:
            raise ValueError(f"{name}: bad entry {part!r} ({e})") from None
        try:
            w = float(weight) if weight.strip() else 1.0
        except ValueError:
            raise ValueError(f"{name}: weight must be a number >= 0, got {weight!r} in {part!r}") from None
        if not math.isfinite(w) or w < 0:
            raise ValueError(f"{name}: weight must be a finite number >= 0, got {weight!r} in {part!r}")
        out.append((value, w))
    if not out or sum(w for _, w in out) <= 0:
        raise ValueError(f"{name}: needs at least one entry with a positive weight, got {spec!r}")
    return out


def budget_value(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"asd_budget must be a finite number >= 0, got {text}")
    return value


def choice_of(options: Sequence[str]) -> Callable[[str], str]:
    def convert(text: str) -> str:
        if text not in options:
            raise ValueError(f"must be one of {', '.join(options)}, got {text!r}")
        return text

    return convert


def pick(rng: random.Random, mix: list[tuple[T, float]]) -> T:
    values, weights = zip(*mix)
    return rng.choices(values, weights=weights, k=1)[0]
