"""The shipped evaluation subsets: sizes, fields, provenance (the builder: tests/lab/test_build_data.py)."""

import pytest

from sglang_asd.bench import datasets

SIZES = {"gsm8k": 200, "math500": 200, "humaneval": 164, "mbpp": 200, "mmlu": 200, "mtbench": 80}
FIELDS = {"gsm8k": {"question", "answer"}, "math500": {"question", "answer"},
          "humaneval": {"prompt", "entry_point", "test"}, "mbpp": {"prompt", "test_list", "test_imports"},
          "mmlu": {"subject", "question", "choices", "answer"}, "mtbench": {"category", "turns"}}


@pytest.mark.parametrize("task", datasets.TASKS)
def test_shipped_subset_shape(task):
    items = datasets.load_items(task)
    assert len(items) == SIZES[task]
    assert len({i["id"] for i in items}) == len(items)
    for item in items:
        assert item["task"] == task and FIELDS[task] <= set(item)
    prompts = datasets.load_prompts(task, limit=3)
    assert len(prompts) == 3 and all(p.text and p.max_new_tokens > 0 for p in prompts)


def test_readme_names_every_file_with_a_license():
    readme = (datasets.DATA_DIR / "README.md").read_text()
    for task in datasets.TASKS:
        assert f"{task}.jsonl" in readme
    for license_ in ("MIT", "CC-BY-4.0", "Apache-2.0"):
        assert license_ in readme


def test_mixed_prompts_round_robin():
    ps = datasets.mixed_prompts(["gsm8k", "mtbench"], 5)
    assert [p.task for p in ps] == ["gsm8k", "mtbench", "gsm8k", "mtbench", "gsm8k"]
    with pytest.raises(ValueError, match="tasks must be"):
        datasets.parse_tasks("gsm8k,nope")
