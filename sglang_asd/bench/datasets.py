"""The shipped evaluation subsets (``data/``, see its README) turned into prompts.

A ``Prompt`` carries the chat messages (for ``/v1/chat/completions``) and the same user text for
the raw routes (``/generate``, ``/v1/completions``: no chat template is applied there), the
task's default ``max_new_tokens`` at natural stop, and the item itself for scoring.
MT-Bench uses the first turn only (the second needs the model's own first answer).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Optional

DATA_DIR = Path(__file__).with_name("data")
TASKS = ("gsm8k", "math500", "humaneval", "mbpp", "mmlu", "mtbench")
# Natural-stop caps: long enough for a step-by-step answer from a small instruct model.
MAX_NEW_TOKENS = {"gsm8k": 512, "math500": 1024, "humaneval": 512, "mbpp": 512, "mmlu": 32, "mtbench": 512}


@dataclasses.dataclass(frozen=True)
class Prompt:
    task: str
    id: str
    text: str                      # the user message, also the raw prompt of /generate
    max_new_tokens: int            # default cap at natural stop
    item: dict                     # the dataset row (reference answer, tests, ...)

    @property
    def messages(self) -> list[dict]:
        return [{"role": "user", "content": self.text}]


def _gsm8k(item: dict) -> str:
    return (
        "Solve the following math problem step by step. "
        "End with the final answer on its own line as '#### <number>'.\n\n"
        f"Question: {item['question']}"
    )


def _math500(item: dict) -> str:
    return (
        "Solve the following math problem step by step. "
        "Put the final answer inside \\boxed{}.\n\n"
        f"{item['question']}"
    )


def _humaneval(item: dict) -> str:
    return (
        "Complete the following Python function. Reply with the complete function "
        "(signature included) in a single ```python code block.\n\n"
        f"```python\n{item['prompt']}```"
    )


def _mbpp(item: dict) -> str:
    return (
        f"{item['prompt']}\nYour code should pass this test:\n{item['test_list'][0]}\n"
        "Reply with the code in a single ```python code block."
    )


def _mmlu(item: dict) -> str:
    subject = item["subject"].replace("_", " ")
    options = "\n".join(f"{letter}. {choice}" for letter, choice in zip("ABCD", item["choices"]))
    return (
        f"The following is a multiple choice question about {subject}. "
        "Answer with the letter of the correct option only.\n\n"
        f"{item['question']}\n{options}\nAnswer:"
    )


def _mtbench(item: dict) -> str:
    return item["turns"][0]


PROMPTS = {"gsm8k": _gsm8k, "math500": _math500, "humaneval": _humaneval, "mbpp": _mbpp,
           "mmlu": _mmlu, "mtbench": _mtbench}


def parse_tasks(spec: str) -> list[str]:
    """``"gsm8k,mtbench"`` -> ``["gsm8k", "mtbench"]``; unknown names are an error."""
    tasks = [t.strip() for t in spec.split(",") if t.strip()]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown or not tasks:
        raise ValueError(f"tasks must be a comma-separated subset of {','.join(TASKS)}, got {spec!r}")
    return tasks


def load_items(task: str, data_dir: Path = DATA_DIR) -> list[dict]:
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    path = data_dir / f"{task}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def load_prompts(task: str, limit: Optional[int] = None, data_dir: Path = DATA_DIR) -> list[Prompt]:
    """The first ``limit`` items of a task (all when None), as prompts, in file order."""
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    items = load_items(task, data_dir)[:limit]
    build = PROMPTS[task]
    return [Prompt(task, item["id"], build(item), MAX_NEW_TOKENS[task], item) for item in items]


def mixed_prompts(tasks: list[str], num_prompts: int, data_dir: Path = DATA_DIR) -> list[Prompt]:
    """``num_prompts`` prompts taken round-robin over ``tasks`` (deterministic)."""
    if num_prompts < 1:
        raise ValueError(f"num_prompts must be >= 1, got {num_prompts}")
    per_task = {t: load_prompts(t, data_dir=data_dir) for t in tasks}
    out: list[Prompt] = []
    i = 0
    while len(out) < num_prompts:
        for t in tasks:
            if i < len(per_task[t]) and len(out) < num_prompts:
                out.append(per_task[t][i])
        i += 1
        if all(i >= len(v) for v in per_task.values()):
            break
    return out
