"""The shipped evaluation subsets: sizes, fields, provenance, and that the builder reproduces them."""

import json
from pathlib import Path

import pytest

from sglang_asd.bench import build_data, datasets

SIZES = {"gsm8k": 200, "math500": 200, "humaneval": 164, "mbpp": 200, "mmlu": 200, "mtbench": 80}
FIELDS = {"gsm8k": {"question", "answer"}, "math500": {"question", "answer"},
          "humaneval": {"prompt", "entry_point", "test"}, "mbpp": {"prompt", "test_list", "test_imports"},
          "mmlu": {"subject", "question", "choices", "answer"}, "mtbench": {"category", "turns"}}
SOURCE = Path("/work/shared/data")


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


@pytest.mark.skipif(not SOURCE.exists(), reason="full source copies are only on the team's machines")
def test_builder_reproduces_shipped_files(tmp_path):
    build_data.build(SOURCE, tmp_path, build_data.DEFAULT_PER_TASK, build_data.DEFAULT_SEED)
    for task in datasets.TASKS:
        assert (tmp_path / f"{task}.jsonl").read_bytes() == (datasets.DATA_DIR / f"{task}.jsonl").read_bytes(), task


def test_selection_is_seeded_and_in_source_order():
    items = [{"id": i} for i in range(50)]
    a = build_data.select(items, 10, seed=1)
    assert a == build_data.select(items, 10, seed=1) != build_data.select(items, 10, seed=2)
    assert [x["id"] for x in a] == sorted(x["id"] for x in a)
    assert build_data.select(items[:5], 10, seed=1) == items[:5]
