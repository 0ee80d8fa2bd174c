"""Rebuild the evaluation subsets shipped in ``sglang_asd/bench/data/`` from the full public copies.

``python scripts/lab/build_data.py --source DIR [--per-task 200] [--seed 20240601]``, where DIR is a
folder holding the full public copies (the file names are the loaders' below; ``data/README.md``
lists each with its sha256).

Selection: for each task, ``random.Random(seed + task_offset).sample`` over the items in their
source order (all of them when the source has fewer than ``--per-task``), then sorted back into
source order. MMLU draws from the 57 test CSVs concatenated in sorted file-name order. The output
is deterministic for a given source, seed and size; ``data/README.md`` records what was used.
Each output line is one item in a common shape: ``{"id", "task", ...task fields}``.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the package of this checkout

from sglang_asd.bench.datasets import DATA_DIR  # noqa: E402

DEFAULT_SEED = 20240601
DEFAULT_PER_TASK = 200
# A fixed offset per task so that changing one task's source does not reshuffle the others.
TASK_OFFSETS = {"gsm8k": 0, "math500": 1, "humaneval": 2, "mbpp": 3, "mmlu": 4, "mtbench": 5}


def _gsm8k(src: Path) -> list[dict]:
    items = []
    for i, line in enumerate(src.joinpath("gsm8k_test.jsonl").read_text().splitlines()):
        row = json.loads(line)
        answer = row["answer"].split("####")[-1].strip().replace(",", "")
        items.append({"id": f"gsm8k/{i}", "question": row["question"], "answer": answer})
    return items


def _math500(src: Path) -> list[dict]:
    rows = json.loads(src.joinpath("math500_subset.json").read_text())
    return [
        {"id": f"math500/{row['data_source_id']}", "question": row["question"], "answer": row["answer"]}
        for row in rows
    ]


def _humaneval(src: Path) -> list[dict]:
    with gzip.open(src.joinpath("humaneval.jsonl.gz"), "rt") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    keep = ("prompt", "entry_point", "test")
    return [{"id": row["task_id"], **{k: row[k] for k in keep}} for row in rows]


def _mbpp(src: Path) -> list[dict]:
    rows = json.loads(src.joinpath("mbpp_sanitized.json").read_text())
    return [
        {
            "id": f"mbpp/{row['task_id']}",
            "prompt": row["prompt"],
            "test_imports": row["test_imports"],
            "test_list": row["test_list"],
        }
        for row in rows
    ]


def _mmlu(src: Path) -> list[dict]:
    items = []
    for path in sorted(src.joinpath("mmlu", "test").glob("*_test.csv")):
        subject = path.name[: -len("_test.csv")]
        with path.open(newline="") as f:
            for i, row in enumerate(csv.reader(f)):
                question, a, b, c, d, answer = row
                items.append({
                    "id": f"mmlu/{subject}/{i}", "subject": subject, "question": question,
                    "choices": [a, b, c, d], "answer": answer.strip(),
                })
    return items


def _mtbench(src: Path) -> list[dict]:
    rows = [json.loads(line) for line in src.joinpath("mt_bench_questions.jsonl").read_text().splitlines() if line]
    return [
        {"id": f"mtbench/{row['question_id']}", "category": row["category"], "turns": row["turns"]}
        for row in rows
    ]


LOADERS = {"gsm8k": _gsm8k, "math500": _math500, "humaneval": _humaneval, "mbpp": _mbpp,
           "mmlu": _mmlu, "mtbench": _mtbench}


def select(items: list[dict], per_task: int, seed: int) -> list[dict]:
    """A seeded sample of ``per_task`` items, kept in source order."""
    if len(items) <= per_task:
        return list(items)
    picked = sorted(random.Random(seed).sample(range(len(items)), per_task))
    return [items[i] for i in picked]


def build(source: Path, out_dir: Path, per_task: int, seed: int) -> dict[str, tuple[int, int]]:
    out_dir.mkdir(parents=True, exist_ok=True)
    sizes = {}
    for task, loader in LOADERS.items():
        items = loader(source)
        chosen = select(items, per_task, seed + TASK_OFFSETS[task])
        with out_dir.joinpath(f"{task}.jsonl").open("w") as f:
            for item in chosen:
                f.write(json.dumps({"task": task, **item}, ensure_ascii=False) + "\n")
        sizes[task] = (len(chosen), len(items))
    return sizes


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python scripts/lab/build_data.py", description=__doc__.splitlines()[0])
    p.add_argument("--source", type=Path, required=True,
                   help="a folder holding the full public copies (see sglang_asd/bench/data/README.md)")
    p.add_argument("--out", type=Path, default=DATA_DIR)
    p.add_argument("--per-task", type=int, default=DEFAULT_PER_TASK)
    p.add_argument("--seed", type=int, default=DEFAULT_SEED)
    args = p.parse_args(argv)
    for task, (kept, total) in build(args.source, args.out, args.per_task, args.seed).items():
        print(f"{task}: {kept} of {total}")


if __name__ == "__main__":
    main()
