"""The start-up warm-up lists exactly the verify variants serving launches (``sglang_seams/step/warmup.py``).

On CPU nothing compiles, but the scheduler keeps the list it would warm on CUDA and checks every
verify call against it; a variant met while serving that is not on the list is a WARNING line.
"""

import concurrent.futures as cf
import re
from types import SimpleNamespace

import pytest

from sglang_asd.sglang_seams.step.warmup import server_verify_shapes


def test_shapes_cover_adaptive_candidate_steps_and_ngram():
    eagle = SimpleNamespace(speculative_num_steps=3, speculative_num_draft_tokens=4, speculative_algorithm="EAGLE",
                            speculative_adaptive=False, speculative_adaptive_config=None)
    assert server_verify_shapes(eagle) == {(4, 3)}
    ngram = SimpleNamespace(**{**vars(eagle), "speculative_algorithm": "NGRAM", "speculative_num_draft_tokens": 8})
    assert server_verify_shapes(ngram) == {(8, 7)}
    adaptive = SimpleNamespace(**{**vars(eagle), "speculative_adaptive": True})
    # SGLang 0.5.23's default adaptive config: candidate steps {0, 1, 3, 5, 7} over its batch-size tiers.
    assert server_verify_shapes(adaptive) == {(4, 3), (1, 0), (2, 1), (6, 5), (8, 7)}


def test_block_drafters_verify_one_chain_of_their_block_width():
    """SGLang sets ``speculative_num_steps`` to 1 for DSPARK and DFLASH: W comes from the worker."""
    spec = SimpleNamespace(speculative_num_steps=1, speculative_num_draft_tokens=None, speculative_algorithm="DSPARK",
                           speculative_adaptive=False, speculative_adaptive_config=None)
    assert server_verify_shapes(spec, SimpleNamespace(verify_num_draft_tokens=4)) == {(4, 3)}
    dflash = SimpleNamespace(**{**vars(spec), "speculative_algorithm": "DFLASH", "speculative_num_draft_tokens": 6})
    assert server_verify_shapes(dflash, SimpleNamespace(block_size=6)) == {(6, 5)}
    with pytest.raises(RuntimeError, match="neither verify_num_draft_tokens nor block_size"):
        server_verify_shapes(dflash, SimpleNamespace())


@pytest.mark.server
@pytest.mark.parametrize("algorithm", ["eagle", "eagle_tree", "ngram"])
def test_serving_launches_only_warmed_variants(servers, algorithm):
    """The pool's server (info log): its log also holds every variant earlier tests met on it."""
    server = servers.get(algorithm)
    prompts = ["The quick brown fox", "def add(a, b):", "Once upon a time", "1, 2, 3,"] * 4
    for width in (1, 3, 16):  # batch sizes vary the verify's bs; stop tokens vary the stop width
        with cf.ThreadPoolExecutor(width) as pool:
            list(pool.map(lambda p: server.generate(p, max_new_tokens=12, asd_budget=8,
                                                    stop_token_ids=list(range(1, 1 + width))), prompts[:width]))
    log = open(server.log_path, errors="replace").read()
    assert re.search(r"sglang_asd: verify warm-up on cpu: \d+ variants", log), server.tail()
    assert "verify variant seen" in log
    assert "was not warmed up" not in log, [line for line in log.splitlines() if "not warmed" in line]
