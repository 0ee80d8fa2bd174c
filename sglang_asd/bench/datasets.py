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


USER_TASK = "prompts"   # the task name of prompts from a user's file
_USER_KEYS = {"id", "prompt", "reference", "max_new_tokens"}


def load_prompt_file(path: Path, max_new_tokens: int) -> list[Prompt]:
    """A user's prompts: a JSONL file, one object per line with ``prompt`` (the user message, a
    non-empty string) and optionally ``id`` (a unique string or integer; default the line
    number), ``reference`` (the reference final answer, a string or number, read by a scorer) and
    ``max_new_tokens`` (an integer >= 1: this prompt's cap at natural stop, default
    ``max_new_tokens``). Blank lines are skipped. Anything else is a ValueError naming the file, the
    line and the problem."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: cannot be read as UTF-8 text ({e})") from None
    out: list[Prompt] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path} line {number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{where}: not JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(row, dict):
            raise ValueError(f"{where}: must be a JSON object with a \"prompt\", got {type(row).__name__}")
        unknown = sorted(set(row) - _USER_KEYS)
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; a line may hold "
                             f"{', '.join(sorted(_USER_KEYS))}")
        text = row.get("prompt")
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{where}: \"prompt\" must be a non-empty string, got {text!r:.60}")
        ident = row.get("id", f"line{number}")
        if isinstance(ident, bool) or not isinstance(ident, (str, int)) or str(ident) == "":
            raise ValueError(f"{where}: \"id\" must be a non-empty string or an integer, got {ident!r:.60}")
        ident = str(ident)
        if ident in seen:
            raise ValueError(f"{where}: id {ident!r} already used on line {seen[ident]}")
        seen[ident] = number
        ref = row.get("reference")
        if ref is not None and (isinstance(ref, bool) or not isinstance(ref, (str, int, float))):
            raise ValueError(f"{where}: \"reference\" must be a string or a number, got {ref!r:.60}")
        cap = row.get("max_new_tokens", max_new_tokens)
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
            raise ValueError(f"{where}: \"max_new_tokens\" must be an integer >= 1, got {cap!r:.60}")
        item = {"task": USER_TASK, "id": ident, **({} if ref is None else {"answer": str(ref)})}
        out.append(Prompt(USER_TASK, ident, text, cap, item))
    if not out:
        raise ValueError(f"{path}: no prompts (one JSON object per line, each with a \"prompt\")")
    return out
