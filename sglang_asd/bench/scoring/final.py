"""A reply's final answer and its score against a reference, by the rule a user names
(``--scorer``), for prompts that are not one of the shipped tasks.

- ``number``: GSM8K's rule: the number after the last ``####``, else in the last ``\\boxed{}``,
  else after "answer is", else the last number; equal as exact fractions (``18.00`` = ``18``);
- ``boxed``: MATH's rule: the last ``\\boxed{}`` (else "final answer is ..."), normalized;
- ``choice``: MMLU's rule: the letter A-D the reply picks;
- ``exact``: the whole reply, whitespace-trimmed, equals the reference.

``final_answer`` gives the canonical form two replies are compared by (the agreement with strict:
"same final answer"), also without a reference.
"""

from __future__ import annotations

from typing import Optional

from sglang_asd.bench.scoring import answers

SCORERS = ("number", "boxed", "choice", "exact")
# The rule of each shipped task whose answer is a string (code tasks compare their extracted code).
TASK_SCORER = {"gsm8k": "number", "math500": "boxed", "mmlu": "choice"}


def final_answer(scorer: str, text: str) -> Optional[str]:
    """The reply's final answer in canonical form (None when the rule finds none)."""
    if scorer == "number":
        value = answers.parse_number(answers.extract_gsm8k(text))
        return None if value is None else str(value)
    if scorer == "boxed":
        return answers.normalize_math(answers.extract_math(text))
    if scorer == "choice":
        return answers.extract_choice(text)
    if scorer == "exact":
        return text.strip()
    raise ValueError(f"scorer must be one of {', '.join(SCORERS)}, got {scorer!r}")


def score(scorer: str, text: str, reference: str) -> tuple[bool, Optional[str]]:
    """``(correct, final answer)`` of a reply against the reference."""
    got = final_answer(scorer, text)
    if scorer == "number":
        return answers.numbers_equal(answers.extract_gsm8k(text), reference), got
    if scorer == "boxed":
        return answers.math_equal(answers.extract_math(text), reference), got
    if scorer == "choice":
        return got == reference.strip().upper(), got
    return got == reference.strip(), got
