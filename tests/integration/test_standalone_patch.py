"""``patches/sglang-0.5.23/0003-standalone-draft-kv-holds-its-own-tokens.patch`` (the STANDALONE
draft-input fix written as an upstream change) on real servers: stock SGLang
(``sglang_asd.stock_server``: no sglang-asd hook at all) with the patched modules imported in place
of the installed ones. A draft equal to the target then accepts every draft token, as with
``--asd-standalone-draft-fix`` (tests/integration/test_standalone_self_draft.py); unpatched stock
SGLang does not (the bug the patch fixes)."""

import os
import shutil
import subprocess
import textwrap

import pytest
import requests

from tests.conftest import CONFIGS
from tests.seams.test_patches import PATCH_DIR, patched_files, sglang_root
from tests.server_utils import Server

pytestmark = pytest.mark.server

PATCH = PATCH_DIR / "0003-standalone-draft-kv-holds-its-own-tokens.patch"
MAX_NEW = 24  # a multiple of num_steps + 1: the last round is not cut short
PROMPTS = ["The quick brown fox", "def add(a, b):", "Once upon a time in a land far away", "1, 2, 3, 4, 5, 6",
           "1, 2, 3, 9"]


def _full_accept_length() -> float:
    args = CONFIGS["standalone_self"]
    return float(int(args[args.index("--speculative-num-steps") + 1]) + 1)


def _overlay(root) -> str:
    """A folder whose sitecustomize.py imports the patched SGLang modules instead of the installed
    ones (in every process: a spawned scheduler reads the same PYTHONPATH, a forked one inherits the finder)."""
    tree = root / "tree"
    modules = {}
    for rel in patched_files(PATCH):
        dst = tree / "python" / "sglang" / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if (sglang_root() / rel).exists():
            shutil.copy(sglang_root() / rel, dst)
        modules["sglang." + rel[:-len(".py")].replace("/", ".")] = str(dst)
    result = subprocess.run(["patch", "-p1", "-i", str(PATCH)], cwd=tree, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    (root / "sitecustomize.py").write_text(textwrap.dedent(f"""\
        import importlib.abc, importlib.util, sys
        _PATCHED = {modules!r}
        class _PatchedSGLang(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                return importlib.util.spec_from_file_location(name, _PATCHED[name]) if name in _PATCHED else None
        sys.meta_path.insert(0, _PatchedSGLang())
        """))
    return str(root)


@pytest.fixture(scope="module")
def patched_server(tmp_path_factory):
    overlay = _overlay(tmp_path_factory.mktemp("sglang_0003"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join(p for p in (overlay, os.environ.get("PYTHONPATH")) if p))
        server = Server("standalone_self-patched", CONFIGS["standalone_self"], module="sglang_asd.stock_server")
    yield server
    server.stop()


def _accept_lengths(server) -> list[float]:
    outs = [server.generate(p, max_new_tokens=MAX_NEW, ignore_eos=True) for p in PROMPTS]
    body = {"text": PROMPTS, "sampling_params": {"temperature": 0, "max_new_tokens": MAX_NEW, "ignore_eos": True}}
    r = requests.post(server.url + "/generate", json=body, timeout=300)
    assert r.status_code == 200, r.text
    return [o["meta_info"]["spec_accept_length"] for o in outs + r.json()]


def test_patched_stock_sglang_accepts_every_self_draft_token(patched_server):
    assert _accept_lengths(patched_server) == [pytest.approx(_full_accept_length())] * 2 * len(PROMPTS), \
        patched_server.tail()


def test_unpatched_stock_sglang_does_not(servers):
    stock = servers.get("standalone_self", stock=True)
    assert min(_accept_lengths(stock)) < _full_accept_length() - 1
