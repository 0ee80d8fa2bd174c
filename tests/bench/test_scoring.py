"""Scorers on hand-made outputs: right answers score, wrong ones do not."""

import pytest

from sglang_asd.bench import datasets, scoring
from sglang_asd.bench.scoring import answers, code

# ---------------------------------------------------------------- GSM8K


@pytest.mark.parametrize("text,expected", [
    ("She sells 9 eggs, 9 * 2 = 18.\n#### 18", True),
    ("The total is $1,234.\n#### 1,234", True),
    ("So the answer is 18.", True),
    ("Answer: \\boxed{18}", True),
    ("9 * 2 = 18 dollars, minus 2 is 16", False),   # last number is 16
    ("#### 17\nWait, maybe 18", False),              # the marked answer wins over later numbers
    ("I cannot solve this.", False),
])
def test_gsm8k(text, expected):
    ref = "1234" if "1,234" in text else "18"
    assert answers.score_gsm8k(text, ref)[0] is expected


def test_gsm8k_numbers_compare_exactly():
    assert answers.numbers_equal("18.00", "18")
    assert answers.numbers_equal("-3", "-3.0")
    assert not answers.numbers_equal("18.5", "18")
    assert answers.parse_number("abc") is None


# ---------------------------------------------------------------- MATH-500


@pytest.mark.parametrize("text,ref,expected", [
    ("so the answer is $\\boxed{9}$.", "9", True),
    ("\\boxed{\\dfrac{1}{2}}", "\\frac12", True),
    ("\\boxed{0.5}", "\\frac{1}{2}", True),
    ("\\boxed{1/2}", "\\frac{1}{2}", True),
    ("\\boxed{x = 5}", "5", True),
    ("\\boxed{90^\\circ}", "90", True),
    ("\\boxed{\\text{(C)}}", "(C)", True),
    ("\\boxed{1,000}", "1000", True),
    ("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}", "(3,\\frac{\\pi}{2})", True),
    ("first \\boxed{3} then \\boxed{4}", "4", True),     # the last box counts
    ("\\boxed{\\frac{2}{3}}", "\\frac{1}{2}", False),
    ("The final answer is 12.", "12", True),
    ("no box here, 12", "12", False),
    ("\\boxed{-50}", "50", False),
])
def test_math(text, ref, expected):
    assert answers.score_math(text, ref)[0] is expected


def test_boxed_nested_and_truncated():
    assert answers.extract_boxed("\\boxed{\\frac{a}{b}}") == "\\frac{a}{b}"
    assert answers.extract_boxed("\\boxed{3} and then \\boxed{\\frac{1}{") == "3"  # unbalanced last box
    assert answers.extract_boxed("\\boxed 7.") == "7."
    assert answers.extract_boxed("nothing") is None


# ---------------------------------------------------------------- MMLU


@pytest.mark.parametrize("text,expected", [
    ("B", "B"), ("(C)", "C"), ("D. Paris", "D"), ("The answer is C.", "C"), ("Answer: (A)", "A"),
    ("A cat is an animal, so the answer is B", "B"), ("I think it's B because", "B"),
    ("-i", "D"), ("none of them", None),
])
def test_mmlu_letter(text, expected):
    assert answers.extract_choice(text, ["1", "-1", "i", "-i"]) == expected


def test_mmlu_score():
    assert answers.score_mmlu("C", "C") == (True, "C")
    assert answers.score_mmlu("A", "C") == (False, "A")


# ---------------------------------------------------------------- code extraction


def test_extract_code_prefers_block_defining_entry_point():
    text = "Here:\n```python\nimport math\n```\nand\n```python\ndef f(x):\n    return x\n```\n"
    assert code.extract_code(text, must_define="f").startswith("def f")


def test_extract_code_open_fence_and_plain_text():
    assert code.extract_code("```python\ndef g():\n    return 1\n") == "def g():\n    return 1\n"
    assert code.extract_code("Sure!\ndef h():\n    pass\n") == "def h():\n    pass\n"


HE_ITEM = {
    "prompt": "def add(a: int, b: int) -> int:\n    \"\"\"Add two numbers.\"\"\"\n",
    "entry_point": "add",
    "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n",
}
MBPP_ITEM = {"prompt": "Write a function to square a number.", "test_imports": ["import math"],
             "test_list": ["assert square(3) == 9", "assert square(-2) == 4"]}


def test_humaneval_right_and_wrong():
    right_full = "```python\ndef add(a: int, b: int) -> int:\n    return a + b\n```"
    right_body = "    return a + b\n"
    wrong = "```python\ndef add(a, b):\n    return a - b\n```"
    scores = scoring.score_many("humaneval", [HE_ITEM] * 4, [right_full, right_body, wrong, "no code"], timeout=5)
    assert [s.correct for s in scores] == [True, True, False, False]
    assert scores[2].extracted == "failed" and "AssertionError" in scores[2].detail


def test_mbpp_right_and_wrong():
    right = "```python\ndef square(x):\n    return math.pow(x, 2)\n```"
    wrong = "```python\ndef square(x):\n    return x * 2\n```"
    scores = scoring.score_many("mbpp", [MBPP_ITEM] * 2, [right, wrong], timeout=5)
    assert [s.correct for s in scores] == [True, False]


def test_score_text_on_shipped_items():
    gsm = datasets.load_prompts("gsm8k", 1)[0].item
    assert scoring.score_text("gsm8k", gsm, f"#### {gsm['answer']}").correct is True
    assert scoring.score_text("gsm8k", gsm, "#### 123456789").correct is False
    mm = datasets.load_prompts("mmlu", 1)[0].item
    assert scoring.score_text("mmlu", mm, mm["answer"]).correct is True
    assert scoring.score_text("mtbench", {}, "anything").correct is None
    with pytest.raises(ValueError, match="got 'humaneval'"):
        scoring.score_text("humaneval", {}, "")


def test_score_many_length_mismatch():
    with pytest.raises(ValueError, match="same length"):
        scoring.score_many("gsm8k", [{}], [])
