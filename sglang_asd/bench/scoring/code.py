"""From a model's reply to a runnable test program, for HumanEval and MBPP.

The program is then run by ``sandbox.run_program``; passing means exit status 0.
"""

from __future__ import annotations

import re
from typing import Optional

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)


def extract_code(text: str, must_define: Optional[str] = None) -> str:
    """The code in a reply: the first fenced block that defines ``must_define`` (else the first
    that defines any function, else the longest block). A fence left open by a length stop counts
    up to the end. With no fence, the reply from its first ``def``/``import``/``from``/``class``
    line on (or the whole reply)."""
    blocks = [m.group(2) for m in _FENCE.finditer(text)]
    if blocks:
        if must_define:
            for block in blocks:
                if re.search(rf"^\s*def\s+{re.escape(must_define)}\s*\(", block, re.MULTILINE):
                    return block
        for block in blocks:
            if re.search(r"^\s*def\s+\w+\s*\(", block, re.MULTILINE):
                return block
        return max(blocks, key=len)
    m = re.search(r"^(def |import |from |class |@)", text, re.MULTILINE)
    return text[m.start():] if m else text


def humaneval_program(item: dict, completion: str) -> str:
    """The prompt (for its imports and helpers), the model's function, the tests, ``check(f)``.
    A reply that does not redefine the entry point is taken as the body that follows the prompt."""
    entry = item["entry_point"]
    code = extract_code(completion, must_define=entry)
    if re.search(rf"^\s*def\s+{re.escape(entry)}\s*\(", code, re.MULTILINE):
        body = item["prompt"] + "\n" + code
    else:
        body = item["prompt"] + code
    return f"{body}\n\n{item['test']}\n\ncheck({entry})\n"


def mbpp_program(item: dict, completion: str) -> str:
    """The test imports, the model's code, then every ``assert`` of the item."""
    code = extract_code(completion)
    imports = "\n".join(item.get("test_imports") or [])
    tests = "\n".join(item["test_list"])
    return f"{imports}\n{code}\n\n{tests}\n"
