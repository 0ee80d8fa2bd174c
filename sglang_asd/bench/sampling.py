"""How a benchmark samples: ``--temperature``, ``--top-p`` and ``--samples`` (speed and audit alike).

Greedy (temperature 0, the default) sends no seed: every arm decodes the one greedy output. Sampled
(temperature > 0) sends ``--samples`` N requests per prompt or item, seeded ``0..N-1`` (SGLang's
``sampling_seed``; ``seed`` on the OpenAI routes, which SGLang maps to it), the same seeds under every
arm, so a comparison pairs (prompt, seed) or (item, seed): strict's sample with seed s against the
arm's sample with seed s. Where SGLang's seeded coins are the same under both (budget 0 is exact
speculative sampling, token for token), the pair shares its randomness and differs only by what the
arm changed, which is what makes paired intervals narrow. Two samples of one prompt or item are not
independent, so intervals resample prompts or items with all their seeds (``speed_summary``,
``audit_summary``).

A run log keys its units by seed (``seed_of``: a record without one, a greedy or older log, is seed
0) and stores the settings in its fingerprint only when they differ from greedy
(``fingerprint``), so every log written before these flags stays resumable and a resumed run
cannot change them. A CPU server samples as a GPU one does unless ``SGLANG_ASD_CPU_SAMPLING=off``
(``cpu_backend/seams/sampling.py``); with it off SGLang verifies sampled rows greedily and the
receipts say ``"reason": "sampling"``.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from typing import Any, Mapping, Optional


@dataclasses.dataclass(frozen=True)
class Sampling:
    temperature: float = 0.0
    top_p: float = 1.0
    samples: int = 1

    def __post_init__(self) -> None:
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if isinstance(self.samples, bool) or not isinstance(self.samples, int) or self.samples < 1:
            raise ValueError(f"samples must be an integer >= 1, got {self.samples!r}")
        if self.samples > 1 and self.greedy:
            raise ValueError(f"samples {self.samples} needs a temperature > 0 (greedy decoding gives every seed "
                             "the same output), got temperature 0")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def seeds(self) -> list[Optional[int]]:
        """The seeds a prompt or item is sent with: ``[None]`` (none sent) when greedy, else ``0..N-1``."""
        return [None] if self.greedy else list(range(self.samples))

    def fingerprint(self) -> dict:
        """The run log's part: ``{}`` when greedy with the defaults (every older log), else ``sampling``."""
        if self == Sampling():
            return {}
        return {"sampling": dataclasses.asdict(self)}

    @classmethod
    def of_fingerprint(cls, fp: Mapping[str, Any]) -> "Sampling":
        return cls(**fp.get("sampling", {}))

    def describe(self, unit: str = "prompt") -> str:
        """The settings in words, for a report."""
        if self.greedy:
            return "greedy (temperature 0)" + ("" if self.top_p == 1 else f", top-p {self.top_p:g}")
        return (f"sampled at temperature {self.temperature:g}, top-p {self.top_p:g}, {self.samples} seeded "
                f"sample(s) per {unit} (sampling_seed 0..{self.samples - 1}, the same under every arm; pairs are "
                f"({unit}, seed))")


def seed_of(record: Mapping[str, Any]) -> int:
    """A logged request's or item's seed; 0 where none was sent (greedy, or a log older than seeds)."""
    return record.get("seed") or 0


def _number(text: str, ok, expected: str) -> float:
    """``text`` as a float that passes ``ok``, else argparse's error naming ``expected`` and the value."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not ok(value):
        raise argparse.ArgumentTypeError(f"must be {expected}, got {text!r}")
    return value


def _temperature(text: str) -> float:
    return _number(text, lambda v: math.isfinite(v) and v >= 0, "a finite number >= 0")


def _top_p(text: str) -> float:
    return _number(text, lambda v: 0 < v <= 1, "in (0, 1]")


def _samples(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--temperature", type=_temperature, default=0.0,
                   help="sampling temperature of every request (default 0: greedy)")
    p.add_argument("--top-p", type=_top_p, default=1.0, help="top-p of every request (default 1)")
    p.add_argument("--samples", type=_samples, default=1,
                   help="seeded samples per prompt or item, sampling_seed 0..N-1 under every arm (default 1; "
                        "N > 1 needs --temperature > 0)")


def from_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> Sampling:
    """The parsed flags as a ``Sampling``; a combination that makes no sense is ``p``'s usage error."""
    try:
        return Sampling(args.temperature, args.top_p, args.samples)
    except ValueError:
        p.error(f"--samples {args.samples} needs --temperature > 0 (greedy decoding gives every seed the same "
                f"output), got --temperature {args.temperature:g}")
