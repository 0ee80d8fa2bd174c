"""Answer extraction and comparison for GSM8K (a final number), MATH-500 (a ``\\boxed{}``
expression) and MMLU (a letter A-D). Pure functions on strings, standard library only."""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Optional

_NUMBER = r"-?\$?\d[\d,]*(?:\.\d+)?|-?\$?\.\d+"


# ---------------------------------------------------------------- numbers


def parse_number(text: Optional[str]) -> Optional[Fraction]:
    """``"1,234.50"``, ``"$18"``, ``"-3"``, ``"3/4"``, ``"\\frac{3}{4}"`` -> exact Fraction; else None."""
    if text is None:
        return None
    s = text.strip().replace("$", "").replace(",", "").replace("\\!", "").replace(" ", "")
    s = s.rstrip(".")
    s = re.sub(r"^\\d?frac\{(-?\d+)\}\{(-?\d+)\}$", r"\1/\2", s)
    s = re.sub(r"^-\\d?frac\{(\d+)\}\{(\d+)\}$", r"-\1/\2", s)
    if not re.fullmatch(r"-?(\d+(\.\d*)?|\.\d+)(/-?\d+)?", s):
        return None
    try:
        return Fraction(s)
    except (ValueError, ZeroDivisionError):
        return None


def numbers_equal(a: Optional[str], b: Optional[str]) -> bool:
    x, y = parse_number(a), parse_number(b)
    return x is not None and y is not None and x == y


# ---------------------------------------------------------------- GSM8K


def extract_gsm8k(text: str) -> Optional[str]:
    """The final number: after the last ``####``, else in the last ``\\boxed{}``, else after the
    last "answer is", else the last number in the text."""
    marks = re.findall(r"####\s*(" + _NUMBER + ")", text)
    if marks:
        return marks[-1]
    boxed = extract_boxed(text)
    if boxed is not None and parse_number(boxed) is not None:
        return boxed
    said = re.findall(r"answer\s+is[:\s]*(" + _NUMBER + ")", text, flags=re.IGNORECASE)
    if said:
        return said[-1]
    numbers = re.findall(_NUMBER, text)
    return numbers[-1] if numbers else None


def score_gsm8k(text: str, reference: str) -> tuple[bool, Optional[str]]:
    got = extract_gsm8k(text)
    return numbers_equal(got, reference), got


# ---------------------------------------------------------------- MATH-500


def extract_boxed(text: str) -> Optional[str]:
    """Content of the last ``\\boxed{...}`` / ``\\fbox{...}`` (braces matched), or ``\\boxed 5``."""
    starts = [m for m in re.finditer(r"\\(?:boxed|fbox)\s*", text)]
    for m in reversed(starts):
        i = m.end()
        if i < len(text) and text[i] == "{":
            depth, j = 0, i
            while j < len(text):
                if text[j] == "{":
                    depth += 1
                elif text[j] == "}":
                    depth -= 1
                    if depth == 0:
                        return text[i + 1: j]
                j += 1
            continue  # unbalanced (truncated output): try an earlier box
        word = re.match(r"[^\s$]+", text[i:])
        if word:
            return word.group(0)
    return None


def _fix_fracs(s: str) -> str:
    # \frac12 -> \frac{1}{2}, \frac1{2} -> \frac{1}{2}
    s = re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\frac(\d)\{", r"\\frac{\1}{", s)
    s = re.sub(r"\\frac\{([^{}]*)\}(\d)", r"\\frac{\1}{\2}", s)
    return s


def normalize_math(answer: Optional[str]) -> Optional[str]:
    """Canonical string form of a MATH answer (after Hendrycks et al.'s ``strip_string``)."""
    if answer is None:
        return None
    s = answer.strip()
    s = s.replace("\n", "").replace("\\!", "").replace("\\\\", "\\")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\left", "").replace("\\right", "")
    s = s.replace("^{\\circ}", "").replace("^\\circ", "").replace("\\circ", "")
    s = s.replace("\\$", "").replace("$", "").replace("\\%", "").replace("%", "")
    s = re.sub(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}", r"\1", s)
    s = s.replace("\\,", "").replace("\\;", "").replace("\\ ", "").replace(" ", "")
    s = s.rstrip(".")
    if re.fullmatch(r"[a-zA-Z]\w*=.+", s) and len(s.split("=")[0]) <= 2:
        s = s.split("=", 1)[1]  # "x=5" -> "5"
    s = re.sub(r"\\sqrt(\w)", r"\\sqrt{\1}", s)
    s = _fix_fracs(s)
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s):
        s = s.replace(",", "")
    s = re.sub(r"^(-?)\.(\d)", r"\g<1>0.\2", s)
    if re.fullmatch(r"-?\d+/\d+", s):
        num, den = s.split("/")
        s = f"\\frac{{{num}}}{{{den}}}"
    if re.fullmatch(r"-?\d+\.0+", s):
        s = s.split(".")[0]
    return s


def extract_math(text: str) -> Optional[str]:
    """The last boxed answer, else what follows the last "final answer is"."""
    boxed = extract_boxed(text)
    if boxed is not None:
        return boxed
    said = re.findall(r"final answer is[:\s]*\$?([^\n$]+?)\$?\s*(?:\.|$)", text,
                      flags=re.IGNORECASE | re.MULTILINE)
    return said[-1].strip() if said else None


def math_equal(got: Optional[str], reference: str) -> bool:
    a, b = normalize_math(got), normalize_math(reference)
    if a is None or b is None:
        return False
    return a == b or numbers_equal(a, b)


def score_math(text: str, reference: str) -> tuple[bool, Optional[str]]:
    got = extract_math(text)
    return math_equal(got, reference), got


# ---------------------------------------------------------------- MMLU


def extract_choice(text: str, choices: Optional[list[str]] = None) -> Optional[str]:
    """The letter A-D the answer picks: a leading letter ("B", "(B)", "B."), "answer is B" /
    "Answer: B", an exact option text, else the first standalone letter (not the article "A")."""
    s = text.strip()
    m = re.match(r"^\(?([ABCD])\)?(?:[\s.:),]|$)", s)
    if m and not (m.group(1) == "A" and re.match(r"^A\s+[a-z]", s)):
        return m.group(1)
    m = re.search(r"answer(?:\s+is)?\s*(?:option\s*)?[:\s]*\(?([ABCD])\)?(?![A-Za-z])", s, flags=re.IGNORECASE)
    if m:
        return m.group(1).upper()
    if choices:
        plain = s.rstrip(".").strip().lower()
        for letter, choice in zip("ABCD", choices):
            if plain == str(choice).strip().lower():
                return letter
    for m in re.finditer(r"(?<![A-Za-z])\(?([ABCD])\)?(?![A-Za-z])", s):
        if m.group(1) == "A" and re.match(r"A\s+[a-z]", s[m.start():]):
            continue
        return m.group(1)
    return None


def score_mmlu(text: str, reference: str, choices: Optional[list[str]] = None) -> tuple[bool, Optional[str]]:
    got = extract_choice(text, choices)
    return got == reference.strip().upper(), got
