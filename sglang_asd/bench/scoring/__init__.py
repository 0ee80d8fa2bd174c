"""Scoring of audit outputs, one rule per task.

- gsm8k: the final number (``#### n``, else boxed, else "answer is", else the last number) equals
  the reference exactly (as a fraction).
- math500: the last ``\\boxed{}`` (else "final answer is ..."), normalized, equals the reference.
- humaneval, mbpp: the extracted code with the item's tests exits 0 in the sandbox.
- mmlu: the chosen letter equals the reference.
- mtbench: not scored (no judge offline): ``correct`` is None; the audit reports divergence from
  the strict output, length and acceptance instead.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from sglang_asd.bench.scoring import answers, code, sandbox

SCORED_TASKS = ("gsm8k", "math500", "humaneval", "mbpp", "mmlu")
CODE_TASKS = ("humaneval", "mbpp")


@dataclasses.dataclass(frozen=True)
class Score:
    correct: Optional[bool]         # None = task not scored (mtbench)
    extracted: Optional[str] = None  # the answer read from the output (or the sandbox status)
    detail: str = ""                 # sandbox error line, if any


def score_text(task: str, item: dict, text: str) -> Score:
    """Score one output of a non-code task."""
    if task == "gsm8k":
        ok, got = answers.score_gsm8k(text, item["answer"])
    elif task == "math500":
        ok, got = answers.score_math(text, item["answer"])
    elif task == "mmlu":
        ok, got = answers.score_mmlu(text, item["answer"], item.get("choices"))
    elif task == "mtbench":
        return Score(None)
    else:
        raise ValueError(f"score_text handles gsm8k, math500, mmlu, mtbench; got {task!r}")
    return Score(ok, got)


def program_for(task: str, item: dict, text: str) -> str:
    if task == "humaneval":
        return code.humaneval_program(item, text)
    if task == "mbpp":
        return code.mbpp_program(item, text)
    raise ValueError(f"program_for handles {CODE_TASKS}, got {task!r}")


def score_many(task: str, items: Sequence[dict], texts: Sequence[str], timeout: float = 10.0,
               workers: int = 2) -> list[Score]:
    """Score outputs of one task; code tasks run in the sandbox ``workers`` at a time."""
    if len(items) != len(texts):
        raise ValueError(f"items and texts must have the same length, got {len(items)} and {len(texts)}")
    if task not in CODE_TASKS:
        return [score_text(task, item, text) for item, text in zip(items, texts)]
    programs = [program_for(task, item, text) for item, text in zip(items, texts)]
    results = sandbox.run_many(programs, timeout=timeout, workers=workers)
    return [Score(r.passed, r.status, r.error) for r in results]
