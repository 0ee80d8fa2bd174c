"""``scripts/device_pack.sh`` and ``scripts/device/pack.py`` on CPU, without any download: the
dry-run plan, the requirement pins, stripping, and a build -> unpack round trip on a fake site folder."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "device"))

import pack  # noqa: E402


def test_dry_run_prints_the_plan_without_network():
    p = subprocess.run(["bash", str(ROOT / "scripts/device_pack.sh"), "--dry-run"], capture_output=True, text=True,
                       timeout=60, env={"PATH": "/usr/bin:/bin", "PIP_NO_INDEX": "1"}, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    plan = json.loads(p.stdout)
    reqs = plan["requirements"]
    assert "sglang==0.5.23" in reqs and "apache-tvm-ffi==0.1.11" in reqs
    assert not any(r.split("==")[0] in ("torch", "triton", "transformers", "sgl-kernel", "sglang-kernel",
                                        "flashinfer-python") for r in reqs), "the image has these, or they are not carried"
    assert {r["pattern"] for r in plan["strip"]} >= {"sglang/multimodal_gen", "sglang/test", "**/__pycache__"}
    assert plan["archive"].endswith(".device/carry/site.tar.xz") and plan["limit_mib"] <= 60


def test_pack_script_rejects_unknown_arguments():
    p = subprocess.run(["bash", str(ROOT / "scripts/device_pack.sh"), "--bogus"], capture_output=True, text=True)
    assert p.returncode == 2 and "usage" in p.stderr


def test_requirement_pins_are_exact_and_unique(tmp_path):
    pins = pack.requirement_pins(ROOT / "scripts/device/pack-requirements.txt")
    assert len(pins) >= 40 and all(v for _, v in pins)
    bad = tmp_path / "r.txt"
    bad.write_text("fastapi>=0.1\n")
    with pytest.raises(SystemExit, match="exact pin"):
        pack.requirement_pins(bad)
    bad.write_text("a==1\nA==2\n")
    with pytest.raises(SystemExit, match="pinned twice"):
        pack.requirement_pins(bad)


def _fake_site(root: pathlib.Path) -> pathlib.Path:
    site = root / "site"
    for rel, text in {
        "sglang/__init__.py": "x = 1\n", "sglang/srt/server.py": "y = 2\n",
        "sglang/test/big.py": "z" * 1000, "sglang/multimodal_gen/gen.py": "w" * 1000,
        "sglang/srt/__pycache__/server.cpython-312.pyc": "bytecode", "sglang/stub.pyi": "def f(): ...\n",
        "bin/tool": "#!/bin/sh\n",
        "sglang-0.5.23.dist-info/METADATA": "Name: sglang\nVersion: 0.5.23\n",
        "foo_bar-1.0.dist-info/METADATA": "Name: foo_bar\nVersion: 1.0\n", "foo_bar/__init__.py": "",
    }.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    return site


def test_build_strips_packs_and_unpacks(tmp_path, capsys):
    site = _fake_site(tmp_path)
    reqs = tmp_path / "reqs.txt"
    reqs.write_text("# comment\nsglang==0.5.23\nfoo-bar==1.0  # normalized name\n")
    carry = tmp_path / "carry"
    assert pack.main(["build", "--site", str(site), "--carry", str(carry), "--requirements", str(reqs)]) == 0
    manifest = json.loads((carry / "manifest.json").read_text())
    assert manifest["requirements"] == ["sglang==0.5.23", "foo-bar==1.0"]
    assert {p["name"] for p in manifest["packages"]} == {"sglang", "foo_bar"}
    stripped = {s["pattern"]: s["files"] for s in manifest["stripped"]}
    assert stripped["sglang/test"] == 1 and stripped["sglang/multimodal_gen"] == 1
    assert stripped["**/__pycache__"] == 1 and stripped["**/*.pyi"] == 1 and stripped["bin"] == 1
    assert manifest["bytes_packed"] == (carry / "site.tar.xz").stat().st_size
    assert "MiB" in capsys.readouterr().out
    dest = tmp_path / "dest"
    assert pack.main(["unpack", "--carry", str(carry), "--dest", str(dest)]) == 0
    assert (dest / "sglang/srt/server.py").read_text() == "y = 2\n"
    assert not (dest / "sglang/test").exists() and not (dest / "bin").exists()
    (dest / "marker").write_text("kept")  # a second unpack of the same pack is a no-op
    assert pack.main(["unpack", "--carry", str(carry), "--dest", str(dest)]) == 0
    assert "already holds" in capsys.readouterr().out and (dest / "marker").exists()


def test_build_refuses_a_site_without_the_pins_and_an_archive_over_the_limit(tmp_path):
    site = _fake_site(tmp_path)
    reqs = tmp_path / "reqs.txt"
    reqs.write_text("sglang==0.5.22\n")
    with pytest.raises(SystemExit, match="lacks pinned"):
        pack.main(["build", "--site", str(site), "--carry", str(tmp_path / "c"), "--requirements", str(reqs)])
    reqs.write_text("sglang==0.5.23\n")
    assert pack.main(["build", "--site", str(site), "--carry", str(tmp_path / "c"), "--requirements", str(reqs),
                      "--limit-mib", "0.000001"]) == 1


def test_unpack_refuses_a_corrupted_archive(tmp_path):
    site = _fake_site(tmp_path)
    reqs = tmp_path / "reqs.txt"
    reqs.write_text("sglang==0.5.23\n")
    carry = tmp_path / "carry"
    pack.main(["build", "--site", str(site), "--carry", str(carry), "--requirements", str(reqs)])
    with (carry / "site.tar.xz").open("ab") as f:
        f.write(b"x")
    with pytest.raises(SystemExit, match="sha256"):
        pack.main(["unpack", "--carry", str(carry), "--dest", str(tmp_path / "d")])


def test_the_cuda_stand_in_travels_with_the_working_tree():
    """The run tool carries the working tree minus git-ignored paths; the kit's stand-in must be in it."""
    files = [ROOT / "scripts/device/cuda_standin" / name for name in ("__init__.py", "ops.py")]
    assert all(f.is_file() for f in files)
    try:
        p = subprocess.run(["git", "check-ignore", *map(str, files)], cwd=ROOT, capture_output=True, text=True)
    except FileNotFoundError:
        pytest.skip("git is not installed")
    if p.returncode == 128:
        pytest.skip("not a git checkout")
    assert p.returncode == 1 and not p.stdout, f"ignored, so never carried: {p.stdout}"


def test_strip_keeps_the_serving_path_of_every_e2e_drafter():
    """No strip rule removes a module of the CUDA serving path step 0 imports (EAGLE, NGRAM, DSPARK,
    DFLASH workers and draft models included) or the parents of a kept file."""
    import cuda_import_check

    for module in cuda_import_check.MODULES:
        parts = module.split(".")
        for depth in range(1, len(parts) + 1):
            rel = "/".join(parts[:depth]) + ("" if depth < len(parts) else ".py")
            assert not any(pack._matches(rel, p) for p, _ in pack.STRIP), rel
    assert {"sglang.srt.speculative.dspark_components.dspark_worker_v2", "sglang.srt.speculative.dflash_worker_v2",
            "sglang.srt.models.dspark", "sglang.srt.models.dflash"} <= set(cuda_import_check.MODULES)


def test_the_tiny_fixture_builders_travel_with_the_working_tree():
    """The device builds the tiny models (block drafts included) from the project's own code: the
    builders are in the working tree the run tool carries (not git-ignored), not in the pack."""
    files = [ROOT / "sglang_asd/fixtures" / name for name in
             ("__main__.py", "registry.py", "tiny.py", "tiny_llama.py", "eagle_heads.py", "block_drafts.py")]
    assert all(f.is_file() for f in files), [str(f) for f in files if not f.is_file()]
    try:
        p = subprocess.run(["git", "check-ignore", *map(str, files)], cwd=ROOT, capture_output=True, text=True)
    except FileNotFoundError:
        pytest.skip("git is not installed")
    if p.returncode == 128:
        pytest.skip("not a git checkout")
    assert p.returncode == 1 and not p.stdout, f"ignored, so never carried: {p.stdout}"
