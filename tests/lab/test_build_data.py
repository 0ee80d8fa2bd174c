"""scripts/lab/build_data.py: the seeded selection, and that it reproduces the shipped subsets from
the full public copies (where a checkout has them: ``shared/data`` beside it, or ``SGLANG_ASD_DATA_SOURCE``)."""

import os
from pathlib import Path

import build_data
import pytest

from sglang_asd.bench import datasets

ROOT = Path(__file__).resolve().parents[2]
SOURCE = Path(os.environ.get("SGLANG_ASD_DATA_SOURCE", ROOT.parent / "shared" / "data"))


@pytest.mark.skipif(not SOURCE.exists(), reason="no full public copies beside this checkout (SGLANG_ASD_DATA_SOURCE)")
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
