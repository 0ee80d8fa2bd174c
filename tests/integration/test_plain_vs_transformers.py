"""Plain greedy decoding on the CPU path equals transformers' greedy decoding for the same weights."""

import pytest

pytestmark = pytest.mark.server


def test_plain_greedy_equals_transformers(servers):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sglang_asd.fixtures import fixture_path

    path = fixture_path("tiny-llama")
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()
    server = servers.get("plain", stock=True)
    for prompt in ["The quick brown fox", "def add(a, b):", "1, 2, 3,"]:
        ids = tok(prompt)["input_ids"]
        with torch.no_grad():
            ref = model.generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False,
                                 eos_token_id=None, pad_token_id=tok.pad_token_id)[0, len(ids):].tolist()
        out = server.generate(input_ids=ids, max_new_tokens=24, ignore_eos=True)["output_ids"]
        assert out == ref, prompt
